package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/poll"
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
// reports the events one node folds a second. "fold-serving" is the same
// while the folding node serves 16 workers of its own at full speed over
// 1,000 groups of its own: it reports the events folded a second and the
// node's own cycles a second meanwhile (with the cycles alone on that
// node as its baseline, "b-alone-cycles/s").
//
//	go test -run '^$' -bench PeerSync -benchtime 5000x ./fleet
func BenchmarkPeerSync(b *testing.B) {
	for _, mode := range []string{"alone", "publish", "publish,sync", "publish+fold", "fold-after", "fold-serving"} {
		b.Run("peer="+mode, func(b *testing.B) { benchPeerSync(b, mode) })
	}
}

// benchWait bounds a benchmark's wait for its publisher to drain or its
// folder to catch up: far beyond what either takes, only so a stuck one
// fails rather than hangs.
const benchWait = 10 * time.Minute

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
	nodes := benchLoad(b, c, "bench.")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var pub *Publisher
	if mode != "alone" {
		pub = NewPublisher(js, a.db, "node-a", records, nil, claimQuiet)
		pub.Start(runCtx)
		wg.Add(1)
		go func(done <-chan struct{}) { defer wg.Done(); <-done }(pub.Done())
	}
	var folder *Folder
	var bNode *dumpNode
	foldCtx, stopFold := context.WithCancel(runCtx)
	var foldDone sync.WaitGroup
	serving := mode == "fold-serving"
	if serving {
		mode = "fold-after"
	}
	if mode == "publish+fold" || mode == "fold-after" {
		bNode = dumpOpen(b, "node-b", b.TempDir())
		folder = NewFolder(js, bNode.db, "node-b", records, 5, nil, claimQuiet)
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
		if pub == nil {
			return
		}
		// Asked every 5 ms: the figures time the drain to that.
		if err := poll.Wait(benchWait, 5*time.Millisecond, func() error {
			evs, err := a.db.Unsent(ctx, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			if len(evs) > 0 {
				return errors.New("events unsent")
			}
			return nil
		}); err != nil {
			b.Fatalf("the publisher did not drain within %s: %v", benchWait, err)
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
		if err := poll.Wait(benchWait, 5*time.Millisecond, func() error {
			_, mark, err := bNode.db.FoldMark(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if mark < info.State.LastSeq {
				return fmt.Errorf("folded to %d of %d", mark, info.State.LastSeq)
			}
			return nil
		}); err != nil {
			b.Fatalf("the folder did not catch up within %s: %v", benchWait, err)
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
	runCycles(b, c, nodes, func() bool { return left.Add(-1) >= 0 })
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
		var bNodes []int64
		var bCycles atomic.Int64
		var folding atomic.Bool
		if serving {
			// node-b's own load, first alone for a baseline, then beside
			// the fold; its groups are its own (not the folded ones).
			bNodes = benchLoad(b, bNode.app.Coordinator, "bench-b.")
			t0 := time.Now()
			runCycles(b, bNode.app.Coordinator, bNodes, func() bool { return time.Since(t0) < 3*time.Second && bCycles.Add(1) > 0 })
			b.ReportMetric(float64(bCycles.Load())/time.Since(t0).Seconds(), "b-alone-cycles/s")
			bCycles.Store(0)
			folding.Store(true)
		}
		var served sync.WaitGroup
		if serving {
			served.Add(1)
			go func() {
				defer served.Done()
				runCycles(b, bNode.app.Coordinator, bNodes, func() bool { return folding.Load() && bCycles.Add(1) > 0 })
			}()
		}
		folder = NewFolder(js, bNode.db, "node-b", records, 5, nil, claimQuiet)
		again, stopAgain := context.WithCancel(runCtx)
		defer stopAgain()
		folder.Start(again)
		foldDone.Add(1)
		go func(done <-chan struct{}) { defer foldDone.Done(); <-done }(folder.Done())
		foldStart := time.Now()
		caughtUp()
		folded := time.Since(foldStart)
		folding.Store(false)
		served.Wait()
		b.ReportMetric(float64(events)/folded.Seconds(), "events-folded/s")
		if serving {
			b.ReportMetric(float64(bCycles.Load())/folded.Seconds(), "b-cycles/s")
		}
	} else if folder != nil {
		caughtUp()
		b.ReportMetric((time.Since(start) - took).Seconds(), "s-fold-behind")
	}
}

// benchLoad gives a node 1,000 groups of 100 planned ranges, named from
// prefix (a fleet's group names are shared, so each node's own differ),
// and 16 registered workers, and returns the workers' ids.
func benchLoad(b *testing.B, c *appliance.Coordinator, prefix string) []int64 {
	ctx := context.Background()
	size := int64(10)
	for i := range 1000 {
		name := fmt.Sprintf("%s%04d", prefix, i)
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
	return nodes
}

// runCycles runs the four-call lease cycle (lease, next, finish, release)
// on every worker at once while more says so, and returns when all have
// stopped.
func runCycles(b *testing.B, c *appliance.Coordinator, nodes []int64, more func() bool) {
	ctx := context.Background()
	var cw sync.WaitGroup
	for _, node := range nodes {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for more() {
				g, err := c.Lease(ctx, node)
				if err != nil || g == nil {
					b.Errorf("lease: %v, %v", g, err)
					return
				}
				r, err := c.Next(ctx, leasehold.GroupHolder{NodeID: node, GroupID: g.Group.ID, Fence: g.Fence})
				if err != nil || r == nil {
					b.Errorf("next: %v, %v", r, err)
					return
				}
				if _, err := c.Finish(ctx, leasehold.RangeHolder{NodeID: node, RangeID: r.ID, Fence: g.Fence}, 10); err != nil {
					b.Error(err)
					return
				}
				if err := c.Release(ctx, leasehold.GroupHolder{NodeID: node, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	cw.Wait()
}
