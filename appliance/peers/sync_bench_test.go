package peers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/store"
)

// BenchmarkPeerSync is what peer sync costs a busy node: the in-process
// lease cycle (lease, next, finish, release; durable) with 16 workers over
// 1,000 groups, alone, with its outbox published to the stream, and with
// a second node folding it. It reports cycles/s, the events published a
// second, and how long the folding node took to catch up once the cycles
// stopped. "publish,sync" is publish with the server fsyncing every
// JetStream write before its acknowledgement (SyncAlways, as the embedded
// server runs), to say what that costs the events stream. "fold-after"
// is the fleet's ceiling: a second node folds nothing while the cycles
// run, then folds all their events at once, alone on the machine; it
// reports the events one node folds a second.
//
//	go test -run '^$' -bench PeerSync -benchtime 5000x ./appliance/peers
func BenchmarkPeerSync(b *testing.B) {
	for _, mode := range []string{"alone", "publish", "publish,sync", "publish+fold", "fold-after"} {
		b.Run("peer="+mode, func(b *testing.B) { benchPeerSync(b, mode) })
	}
}

func benchPeerSync(b *testing.B, mode string) {
	ctx := context.Background()
	syncAlways := mode == "publish,sync"
	if syncAlways {
		mode = "publish"
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: b.TempDir(), SyncAlways: syncAlways})
	if err != nil {
		b.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: StreamName, Subjects: []string{SubjectPrefix + ">"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	records, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: PublishedBucket, History: 1})
	if err != nil {
		b.Fatal(err)
	}

	a := dumpOpen(b, "node-a", b.TempDir())
	c := a.app.Coordinator
	size := int64(10)
	for i := range 1000 {
		name := fmt.Sprintf("bench.%04d", i)
		if _, _, err := c.PutGroup(ctx, name, store.GroupSpec{RangeSize: &size}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.PlanTail(ctx, name, 1000); err != nil { // 100 ranges a group
			b.Fatal(err)
		}
	}
	const workers = 16
	var nodes []int64
	for i := range workers {
		n, err := c.RegisterNode(ctx, appliance.NodeSpec{Name: fmt.Sprintf("w%02d", i)})
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n.ID)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var pub *Publisher
	if mode != "alone" {
		pub = NewPublisher(js, a.app.DB, "node-a", records, claimQuiet)
		pub.Start(runCtx)
		wg.Add(1)
		go func(done <-chan struct{}) { defer wg.Done(); <-done }(pub.Done())
	}
	var folder *Folder
	var bNode *dumpNode
	foldCtx, stopFold := context.WithCancel(runCtx)
	var foldDone sync.WaitGroup
	if mode == "publish+fold" || mode == "fold-after" {
		bNode = dumpOpen(b, "node-b", b.TempDir())
		folder = NewFolder(js, bNode.app.DB, "node-b", records, 5, claimQuiet)
		folder.Start(foldCtx)
		foldDone.Add(1)
		go func(done <-chan struct{}) { defer foldDone.Done(); <-done }(folder.Done())
	}
	defer foldDone.Wait()
	defer stopFold()
	defer wg.Wait()
	defer cancel()
	// The catalog's making is published and folded before the clock runs.
	drain := func() {
		for pub != nil {
			evs, err := a.app.DB.Unsent(ctx, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	caughtUp := func() {
		if folder == nil {
			return
		}
		stream, _ := js.Stream(ctx, StreamName)
		info, err := stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for {
			_, mark, err := bNode.app.DB.FoldMark(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if mark >= info.State.LastSeq {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	drain()
	caughtUp()
	if mode == "fold-after" {
		stopFold()
		foldDone.Wait()
	}
	sent0 := int64(0)
	if pub != nil {
		sent0 = pub.Sent()
	}

	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var cw sync.WaitGroup
	for _, node := range nodes {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for left.Add(-1) >= 0 {
				g, err := c.Lease(ctx, node)
				if err != nil || g == nil {
					b.Errorf("lease: %v, %v", g, err)
					return
				}
				r, err := c.Next(ctx, node, g.Group.ID, g.Fence)
				if err != nil || r == nil {
					b.Errorf("next: %v, %v", r, err)
					return
				}
				if _, err := c.Finish(ctx, node, r.ID, g.Fence, 10); err != nil {
					b.Error(err)
					return
				}
				if err := c.Release(ctx, node, g.Group.ID, g.Fence); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	cw.Wait()
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "cycles/s")
	if pub != nil {
		// The publisher drains, then the folder catches up.
		drain()
		drained := time.Since(start)
		b.ReportMetric(float64(pub.Sent()-sent0)/drained.Seconds(), "events-published/s")
		b.ReportMetric((drained - took).Seconds(), "s-publish-behind")
	}
	if mode == "fold-after" {
		events := pub.Sent() - sent0
		folder = NewFolder(js, bNode.app.DB, "node-b", records, 5, claimQuiet)
		again, stopAgain := context.WithCancel(runCtx)
		defer stopAgain()
		folder.Start(again)
		foldDone.Add(1)
		go func(done <-chan struct{}) { defer foldDone.Done(); <-done }(folder.Done())
		foldStart := time.Now()
		caughtUp()
		b.ReportMetric(float64(events)/time.Since(foldStart).Seconds(), "events-folded/s")
	} else if folder != nil {
		caughtUp()
		b.ReportMetric((time.Since(start) - took).Seconds(), "s-fold-behind")
	}
}
