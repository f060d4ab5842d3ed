package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// foldPeer is one node of a fold test: its catalog, its publisher, its
// folder (rebuilding from dumps) and its dumper, on a shared server.
type foldPeer struct {
	*dumpNode
	nc     *nats.Conn
	js     jetstream.JetStream
	pub    *Publisher
	folder *Folder

	mu       sync.Mutex
	stopFold func()
}

// foldSetUp creates the stream and the publish records' bucket as the
// fleet does, and returns the stream.
func foldSetUp(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: StreamName, Subjects: []string{SubjectPrefix + ">"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: PublishedBucket, History: 1}); err != nil {
		t.Fatal(err)
	}
	return stream
}

// foldJoin starts node name on its catalog in dir: publisher, folder and
// dumper, all stopped with the test.
func foldJoin(t *testing.T, url, name, dir string) *foldPeer {
	t.Helper()
	ctx := context.Background()
	p := &foldPeer{dumpNode: dumpOpen(t, name, dir), nc: dumpConn(t, url)}
	var err error
	if p.js, err = jetstream.New(p.nc); err != nil {
		t.Fatal(err)
	}
	records, err := p.js.KeyValue(ctx, PublishedBucket)
	if err != nil {
		t.Fatal(err)
	}
	maxAttempts := p.app.Config.MaxAttempts
	p.pub = NewPublisher(p.js, p.db, name, records, nil, claimQuiet)
	p.folder = NewFolder(p.js, p.db, name, records, maxAttempts, dumpRebuilder{p.nc, p.db, maxAttempts, memoryKeyring(nil), nil}, claimQuiet)
	dumpServe(t, p.nc, p.dumpNode)
	p.pub.Start(context.Background())
	t.Cleanup(p.pub.Stop)
	p.startFolding(t)
	t.Cleanup(p.stopFolding)
	return p
}

func (p *foldPeer) startFolding(t *testing.T) {
	if err := p.folder.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.stopFold = p.folder.Stop
	p.mu.Unlock()
}

func (p *foldPeer) stopFolding() {
	p.mu.Lock()
	stop := p.stopFold
	p.stopFold = nil
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// published waits until p's outbox is all sent and its publish record
// has caught up with the stream.
func (p *foldPeer) published(t *testing.T, stream jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	poll.Eventually(t, 20*time.Second, p.name+"'s outbox sent", func() bool {
		evs, err := p.db.Unsent(ctx, 0, 1)
		if err != nil || len(evs) > 0 {
			return false
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return false
		}
		records, err := p.js.KeyValue(ctx, PublishedBucket)
		if err != nil {
			return false
		}
		e, err := records.Get(ctx, p.name)
		if err != nil {
			return false
		}
		var rec PublishRecord
		return json.Unmarshal(e.Value(), &rec) == nil && rec.Seq == info.State.LastSeq
	})
}

// foldFinish leases group on n's worker "w" and finishes count ranges,
// then releases it: two events a range and two for the lease.
func foldFinish(t *testing.T, n *dumpNode, group string, count int) {
	t.Helper()
	ctx := context.Background()
	c := n.app.Coordinator
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("nodes: %v, %v", nodes, err)
	}
	w := nodes[0]
	g, err := c.Lease(ctx, w.ID)
	if err != nil || g == nil || g.Group.Name != group {
		t.Fatalf("lease: %+v, %v; want %s", g, err, group)
	}
	for range count {
		r, err := c.Next(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence})
		if err != nil || r == nil {
			t.Fatalf("next: %+v, %v", r, err)
		}
		if _, err := c.Finish(ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		t.Fatal(err)
	}
}

// foldPeerOf is how b lists origin.
func foldPeerOf(t *testing.T, b *dumpNode, origin string) (leasehold.Peer, bool) {
	t.Helper()
	peers, err := b.db.Peers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.Name == origin {
			return p, true
		}
	}
	return leasehold.Peer{}, false
}

// TestFoldShowsPeerState: a group created on A with its tail planned, a
// worker registered (and paused) on A and ranges finished on A show on B
// row for row; B lists A with the stream position it folded through. A
// message published again under its Nats-Msg-Id is dropped by the stream
// (even with another body), and the same state folded twice under a new
// id changes nothing.
func TestFoldShowsPeerState(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	stream := foldSetUp(t, natstest.Connect(t, url))
	a := foldJoin(t, url, "node-a", t.TempDir())
	b := foldJoin(t, url, "node-b", t.TempDir())

	dumpWork(t, a.dumpNode, "g", 100, 5000, 0)
	foldFinish(t, a.dumpNode, "g", 12)
	paused, err := a.app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "w-paused"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.app.Coordinator.SetPaused(ctx, paused.ID, true, "ops"); err != nil {
		t.Fatal(err)
	}
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "b lists a folded through the stream's end", func() bool {
		p, ok := foldPeerOf(t, b.dumpNode, "node-a")
		return ok && p.Folded == info.State.LastSeq
	})
	p, _ := foldPeerOf(t, b.dumpNode, "node-a")
	if p.Catalog != a.db.CatalogID() || p.Groups != 1 || p.Nodes != 2 || p.LastEventAt == nil || p.Rebuilds != 0 {
		t.Fatalf("b lists a as %+v", p)
	}
	if _, ok := foldPeerOf(t, a.dumpNode, "node-b"); ok {
		t.Fatal("a lists b, which published nothing")
	}

	// A duplicate under the same message id, with a changed body: dropped.
	last, err := stream.GetLastMsgForSubject(ctx, SubjectPrefix+"node-a")
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal(last.Data, &m); err != nil {
		t.Fatal(err)
	}
	m.Kind, m.Group, m.Node = store.EventGroupUpdated, &store.PeerGroup{Group: leasehold.Group{Name: "g", Priority: 77, Active: true, RangeSize: 100, Start: 1}}, nil
	body, _ := json.Marshal(m)
	dup := nats.NewMsg(last.Subject)
	dup.Header = last.Header
	dup.Data = body
	ack, err := a.js.PublishMsg(ctx, dup)
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate || ack.Sequence != last.Sequence {
		t.Fatalf("a republished message id was stored again: %+v", ack)
	}
	// The same message under a new id (a resend past the window) folds
	// again and changes nothing.
	again := nats.NewMsg(last.Subject)
	again.Header = nats.Header{}
	for k, v := range last.Header {
		again.Header[k] = v
	}
	again.Header.Set(nats.MsgIdHdr, last.Header.Get(nats.MsgIdHdr)+".again")
	again.Data = last.Data
	ack, err = a.js.PublishMsg(ctx, again)
	if err != nil || ack.Duplicate {
		t.Fatalf("resend: %+v, %v", ack, err)
	}
	poll.Eventually(t, 10*time.Second, "b folds the resend", func() bool {
		p, ok := foldPeerOf(t, b.dumpNode, "node-a")
		return ok && p.Folded == ack.Sequence
	})
	if diffs := foldDiff(t, a.dumpNode, b.dumpNode, false); len(diffs) > 0 {
		t.Fatalf("b's copy changed by a duplicate:\n%v", diffs)
	}
	// And later changes still fold on top.
	foldFinish(t, a.dumpNode, "g", 3)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)
}

// TestFoldGapRebuilds: B stops folding; the stream's retention shrinks to
// 20 messages while A makes hundreds of changes (and deletes a worker), so
// what B never folded is gone. Started again, B detects the gap once,
// rebuilds A's part from A's dump and then equals A row for row, worker
// nodes' activity included. A new node C, with no mark, on the stream
// that has dropped its start is seeded from A's dump, not counted as a gap.
func TestFoldGapRebuilds(t *testing.T) {
	// Not parallel: its stream keeps 20 messages, and b slowed by the
	// parallel tests beside it fell behind them a second time (a real gap).
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	stream := foldSetUp(t, natstest.Connect(t, url))
	a := foldJoin(t, url, "node-a", t.TempDir())
	b := foldJoin(t, url, "node-b", t.TempDir())

	dumpWork(t, a.dumpNode, "g", 10, 5000, 0)
	old, err := a.app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "w-old"})
	if err != nil {
		t.Fatal(err)
	}
	foldFinish(t, a.dumpNode, "g", 5)
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)

	b.stopFolding()
	_, mark, err := b.db.FoldMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgs = 20
	if _, err := a.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := a.app.Coordinator.DeleteNode(ctx, old.ID, false); err != nil {
		t.Fatal(err)
	}
	// Several publisher batches, so the last messages alone cannot carry
	// everything that changed: finishes published apart until more than
	// the stream keeps lies past b's mark (each wait for the outbox sent
	// is at least one stream message, however many events a batch takes).
	for range 4 {
		foldFinish(t, a.dumpNode, "g", 40)
		a.published(t, stream)
	}
	for i := 0; ; i++ {
		if info, err = stream.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if info.State.LastSeq-mark > 21 || i == 40 {
			break
		}
		foldFinish(t, a.dumpNode, "g", 2)
		a.published(t, stream)
	}
	// More than the stream keeps was published past b's mark (a stream
	// message carries a publish batch's events).
	if info.State.FirstSeq <= mark+1 || info.State.LastSeq-mark <= 20 {
		t.Fatalf("stream %d..%d, b folded through %d: no gap staged", info.State.FirstSeq, info.State.LastSeq, mark)
	}
	if claimMetric(t, b.folder.gaps) != 0 {
		t.Fatal("a gap counted before there was one")
	}

	b.startFolding(t)
	foldConverge(t, a.dumpNode, b.dumpNode, true, 30*time.Second)
	if got := claimMetric(t, b.folder.gaps); got != 1 {
		t.Fatalf("gaps = %v, want 1", got)
	}
	if got := claimMetric(t, b.folder.rebuilds.WithLabelValues("ok")); got != 1 {
		t.Fatalf("rebuilds = %v, want 1", got)
	}
	if p, ok := foldPeerOf(t, b.dumpNode, "node-a"); !ok || p.Rebuilds != 1 || p.Nodes != 1 {
		t.Fatalf("b lists a as %+v (%v), want 1 rebuild and 1 node", p, ok)
	}
	// Folding goes on after the rebuild (a worker's visits and held count
	// travel only in dumps, not with lease events).
	foldFinish(t, a.dumpNode, "g", 2)
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)
	if got := claimMetric(t, b.folder.gaps); got != 1 {
		t.Fatalf("gaps after folding on = %v, want still 1", got)
	}

	c := foldJoin(t, url, "node-c", t.TempDir())
	foldConverge(t, a.dumpNode, c.dumpNode, true, 30*time.Second)
	if got := claimMetric(t, c.folder.gaps); got != 0 {
		t.Fatalf("a new node's seeding counted %v gaps, want 0", got)
	}
	if got := claimMetric(t, c.folder.rebuilds.WithLabelValues("ok")); got != 1 {
		t.Fatalf("a new node's rebuilds = %v, want 1 (seeded from a's dump)", got)
	}
}

// TestFoldNewIncarnation: the stream is deleted and made again while b is
// away; b's mark, of the old stream, vouches for nothing: b counts a gap
// and rebuilds a's part from its dump, then folds on.
func TestFoldNewIncarnation(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	js := natstest.Connect(t, url)
	stream := foldSetUp(t, js)
	a := foldJoin(t, url, "node-a", t.TempDir())
	b := foldJoin(t, url, "node-b", t.TempDir())
	dumpWork(t, a.dumpNode, "g", 10, 100, 0)
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)

	b.stopFolding()
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	stream = foldSetUp(t, js)
	foldFinish(t, a.dumpNode, "g", 3)
	a.published(t, stream)
	b.startFolding(t)
	foldConverge(t, a.dumpNode, b.dumpNode, true, 30*time.Second)
	if got := claimMetric(t, b.folder.gaps); got != 1 {
		t.Fatalf("gaps = %v, want 1 for a new incarnation of the stream", got)
	}
	if got := claimMetric(t, b.folder.rebuilds.WithLabelValues("ok")); got != 1 {
		t.Fatalf("rebuilds = %v, want 1", got)
	}
}

// TestFoldRebuildOwed: a rebuild a gap calls for fails (the origin does
// not answer); the fold goes on past the hole and the rebuild is owed in
// the catalog. A fold started again on that catalog (as after a crash)
// asks at once and, answered, equals the origin and owes nothing.
func TestFoldRebuildOwed(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	js := natstest.Connect(t, url)
	stream := foldSetUp(t, js)
	a := foldJoin(t, url, "node-a", t.TempDir())
	b := foldJoin(t, url, "node-b", t.TempDir())
	dumpWork(t, a.dumpNode, "g", 10, 100, 0)
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)

	b.stopFolding()
	rebuild := b.folder.rebuilder
	var down atomic.Bool
	down.Store(true)
	// The folder stopped, its rebuilder may be swapped for a test's.
	b.folder.rebuilder = rebuildFunc(func(ctx context.Context, origin string) error {
		if down.Load() {
			return errors.New("node-a does not answer")
		}
		return rebuild.Rebuild(ctx, origin)
	})
	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	stream = foldSetUp(t, js)
	foldFinish(t, a.dumpNode, "g", 3)
	a.published(t, stream)
	b.startFolding(t)
	poll.Eventually(t, 20*time.Second, "the failed rebuild owed", func() bool {
		owed, err := b.db.RebuildsOwed(ctx)
		return err == nil && len(owed) == 1 && owed[0] == "node-a"
	})
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "the fold goes on past the hole", func() bool {
		_, mark, err := b.db.FoldMark(ctx)
		return err == nil && mark >= info.State.LastSeq
	})
	b.stopFolding()

	down.Store(false)
	records, err := b.js.KeyValue(ctx, PublishedBucket)
	if err != nil {
		t.Fatal(err)
	}
	b.folder = NewFolder(b.js, b.db, "node-b", records, b.app.Config.MaxAttempts, rebuild, claimQuiet)
	b.startFolding(t)
	foldConverge(t, a.dumpNode, b.dumpNode, true, 30*time.Second)
	poll.Eventually(t, 10*time.Second, "nothing owed after the rebuild", func() bool {
		owed, err := b.db.RebuildsOwed(ctx)
		return err == nil && len(owed) == 0
	})
	if got := claimMetric(t, b.folder.rebuilds.WithLabelValues("ok")); got != 1 {
		t.Fatalf("rebuilds after the restart = %v, want 1", got)
	}
}

// TestFoldAfterAlone: A runs alone first (no outbox: serve --nats off),
// making and working a group no event tells of. Joined, it publishes the
// one outbox_pruned event left in its outbox, and B, which had folded
// everything there was, rebuilds A's part from A's dump and equals A. No
// gap is counted: nothing was lost to the stream.
func TestFoldAfterAlone(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	stream := foldSetUp(t, natstest.Connect(t, url))
	b := foldJoin(t, url, "node-b", t.TempDir())

	dirA := t.TempDir()
	app, db, err := openApp(appliance.Config{DataDir: dirA, HistoryMinFreeBytes: 0, Logger: claimQuiet, Store: store.Options{NoOutbox: true}})
	if err != nil {
		t.Fatal(err)
	}
	alone := &dumpNode{name: "node-a", dir: dirA, app: app, db: db}
	dumpWork(t, alone, "g", 10, 5000, 0)
	foldFinish(t, alone, "g", 7)
	evs, err := db.Events(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Kind != store.EventOutboxPruned {
		t.Fatalf("the outbox of a node alone holds %v, want one %s", evs, store.EventOutboxPruned)
	}
	app.Close()

	a := foldJoin(t, url, "node-a", dirA)
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, true, 30*time.Second)
	if got := claimMetric(t, b.folder.rebuilds.WithLabelValues("ok")); got != 1 {
		t.Fatalf("b's rebuilds = %v, want 1 (a's part, after a ran alone)", got)
	}
	if got := claimMetric(t, b.folder.gaps); got != 0 {
		t.Fatalf("gaps = %v, want 0", got)
	}
	// Folding goes on from there.
	foldFinish(t, a.dumpNode, "g", 2)
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, false, 20*time.Second)
}

// TestPublishRecordIncarnation: a publish record names the stream
// incarnation its position counts in. When the stream is made anew while
// a node publishes, its record moves to the new stream's (lower) position
// with the new incarnation, not kept at the old stream's higher one; and
// only a record of the fold's own incarnation at or below its mark rules
// a hole out.
func TestPublishRecordIncarnation(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	js := natstest.Connect(t, url)
	stream := foldSetUp(t, js)
	a := foldJoin(t, url, "node-a", t.TempDir())
	dumpWork(t, a.dumpNode, "g", 10, 100, 0)
	// More stream messages than the new stream will get: each publish
	// batch is one message, so one batch a finish.
	for range 4 {
		foldFinish(t, a.dumpNode, "g", 1)
		a.published(t, stream)
	}
	record := func() PublishRecord { return readPublishRecord(t, js, "node-a") }
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := record()
	if old.Stream != incarnation(info) || old.Seq != info.State.LastSeq {
		t.Fatalf("record %+v, want seq %d in stream %s", old, info.State.LastSeq, incarnation(info))
	}

	if err := js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	stream = foldSetUp(t, js)
	foldFinish(t, a.dumpNode, "g", 1)
	var rec PublishRecord
	poll.Eventually(t, 20*time.Second, "the record moved to the new stream", func() bool {
		info, err = stream.Info(ctx)
		if err != nil || info.State.LastSeq == 0 {
			return false
		}
		rec = record()
		return rec.Stream == incarnation(info) && rec.Seq == info.State.LastSeq
	})
	if rec.Seq >= old.Seq {
		t.Fatalf("new stream's position %d not below the old one %d: the test shows nothing", rec.Seq, old.Seq)
	}
	for _, tc := range []struct {
		rec  PublishRecord
		inc  string
		mark uint64
		want bool
	}{
		{rec, rec.Stream, rec.Seq, true},
		{rec, rec.Stream, rec.Seq - 1, false},
		{old, rec.Stream, old.Seq, false}, // an earlier stream's record vouches for nothing
		{PublishRecord{Seq: 1}, rec.Stream, 100, false},
	} {
		if got := tc.rec.RulesOut(tc.inc, tc.mark); got != tc.want {
			t.Errorf("%+v.RulesOut(%s, %d) = %v, want %v", tc.rec, tc.inc, tc.mark, got, tc.want)
		}
	}
}

// publishPair is node A, publishing to a stream node B folds: the set-up of
// the tests of what A publishes after a group changes hands.
type publishPair struct {
	a *dumpNode
	b *foldPeer
	// publishA starts A's publisher and returns its stop.
	publishA func() func()
}

func newPublishPair(t *testing.T) publishPair {
	s := natstest.Server(t)
	url := s.ClientURL()
	js := natstest.Connect(t, url)
	foldSetUp(t, js)
	records, err := js.KeyValue(context.Background(), PublishedBucket)
	if err != nil {
		t.Fatal(err)
	}
	p := publishPair{a: dumpOpen(t, "node-a", t.TempDir()), b: foldJoin(t, url, "node-b", t.TempDir())}
	p.publishA = func() func() {
		pub := NewPublisher(js, p.a.db, "node-a", records, nil, claimQuiet)
		pub.Start(context.Background())
		return pub.Stop
	}
	return p
}

// tailAt is the tail of group g at n, -1 where n has no such group.
func tailAt(n *dumpNode) int64 {
	g, err := n.db.GroupByName(context.Background(), "g")
	if err != nil {
		return -1
	}
	return g.TailEnd
}

// ownedByAFoldedByB gives A group g (ranges of 100 to 1,000, done the
// first done of them) under claim 1 and waits until B has folded it.
func (p publishPair) ownedByAFoldedByB(t *testing.T, done int) {
	t.Helper()
	dumpWork(t, p.a, "g", 100, 1000, done)
	mustDo(t, p.a.db.Write(context.Background(), func(tx *store.Tx) error { return tx.OwnGroup("g", 1, 5) }))
	stop := p.publishA()
	poll.Eventually(t, 20*time.Second, "b folds a's group", func() bool { return tailAt(p.b.dumpNode) == tailAt(p.a) })
	stop()
}

// aPlansThenTakesBsClaim has A plan g's tail to 1,500 (the event left in
// its outbox), then B win claim 2 and A's catalog take B's state before A
// publishes the plan. It returns B's id of the group.
func (p publishPair) aPlansThenTakesBsClaim(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := p.a.app.Coordinator.PlanTail(ctx, "g", 1500); err != nil {
		t.Fatal(err)
	}
	mustDo(t, p.b.db.Write(ctx, func(tx *store.Tx) error { return tx.OwnGroup("g", 2, 5) }))
	gb, err := p.b.db.GroupByName(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	state, ranges, _, err := p.b.db.OwnState(ctx, gb.ID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	mustDo(t, p.a.db.Write(ctx, func(tx *store.Tx) error {
		id, ok, err := tx.FoldGroup("node-b", state, 5)
		if err != nil || !ok {
			return fmt.Errorf("a folding b's newer claim: taken %v, %v", ok, err)
		}
		return tx.FoldRanges(id, ranges)
	}))
	return gb.ID
}

// TestFoldLatePlan: A plans a group's tail while it owns the group, and
// its catalog takes B's newer claim on the group before A's publisher
// sends the plan (the stream could not take A's events meanwhile). A's
// state of the group is then B's, so the plan goes out as a late plan,
// and B, the owner now, plans the same ranges: an acknowledged plan (and
// the finishes in it, done again) is not lost with A's claim.
func TestFoldLatePlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newPublishPair(t)
	a, b := p.a, p.b
	p.ownedByAFoldedByB(t, 0)
	gbID := p.aPlansThenTakesBsClaim(t)

	// A's own ranges past B's plan went with A's state: B's replay of the
	// plan comes back to A and plans them in the same place again.
	gaID := func() int64 {
		g, err := a.db.GroupByName(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}()
	rsA, err := a.db.Ranges(ctx, gaID, "", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rsA {
		if r.Start > 1000 {
			t.Fatalf("a keeps range %d..%d past the owner's plan after taking its state", r.Start, r.End)
		}
	}
	mustDo(t, a.db.Write(ctx, func(tx *store.Tx) error {
		high := int64(1500)
		return tx.ReplayLatePlan("g", &high, nil)
	}))

	defer p.publishA()()
	poll.Eventually(t, 20*time.Second, "b, the owner, plans a's late tail", func() bool { return tailAt(b.dumpNode) == 1500 })
	rs, err := b.db.Ranges(ctx, gbID, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var planned []int64
	for _, r := range rs {
		if r.Start > 1000 {
			planned = append(planned, r.Start)
		}
	}
	if fmt.Sprint(planned) != "[1001 1101 1201 1301 1401]" {
		t.Errorf("b planned %v past 1000, want [1001 1101 1201 1301 1401]", planned)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFoldBulkSeeded: groups made by the bulk seeding path (no event
// each) reach a peer that joins afterwards, and one already folding, by
// the rebuild the seeding's one event asks for.
func TestFoldBulkSeeded(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	stream := foldSetUp(t, natstest.Connect(t, url))
	a := foldJoin(t, url, "node-a", t.TempDir())
	b := foldJoin(t, url, "node-b", t.TempDir())
	if err := a.db.BulkGroups(ctx, "bulk.", 50, 100, 3); err != nil {
		t.Fatal(err)
	}
	a.published(t, stream)
	foldConverge(t, a.dumpNode, b.dumpNode, true, 30*time.Second)
	c := foldJoin(t, url, "node-c", t.TempDir())
	foldConverge(t, a.dumpNode, c.dumpNode, true, 30*time.Second)
}

// TestPublishReplaysOwnLostPlan: a node plans a tail under its claim, is
// cut off before the stream takes the event, folds the new owner's state
// (which drops its ranges past that owner's plan), and wins the group back
// before the event goes out (the fleet fault run's 26 finishes at claim
// TTL 4 s: a pause, then a partition, then the group back). The publisher
// plans the lost tail again in the node's own state, so the fleet learns
// of it and the ranges are done again; sent with the state as it was, the
// plan and the finishes in it were lost to every node.
func TestPublishReplaysOwnLostPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newPublishPair(t)
	a, b := p.a, p.b
	p.ownedByAFoldedByB(t, 0)
	// A plans past 1000 under claim 1, B wins claim 2, and A takes B's
	// state, losing its own plan.
	p.aPlansThenTakesBsClaim(t)
	if got := tailAt(a); got != 1000 {
		t.Fatalf("a's tail after taking b's state is %d, want 1000", got)
	}
	// A wins the group back (claim 3) before its outbox goes out.
	mustDo(t, a.db.Write(ctx, func(tx *store.Tx) error { return tx.OwnGroup("g", 3, 5) }))

	defer p.publishA()()
	poll.Eventually(t, 20*time.Second, "a plans its lost tail again and b folds it", func() bool {
		return tailAt(a) == 1500 && tailAt(b.dumpNode) == 1500
	})
	for _, n := range []*dumpNode{a, b.dumpNode} {
		g, err := n.db.GroupByName(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := n.db.Ranges(ctx, g.ID, "", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var planned []string
		for _, r := range rs {
			if r.Start > 1000 {
				planned = append(planned, fmt.Sprintf("%d:%s", r.Start, r.Status))
			}
		}
		if want := "[1001:planned 1101:planned 1201:planned 1301:planned 1401:planned]"; fmt.Sprint(planned) != want {
			t.Errorf("%s has %v past 1000, want %s", n.name, planned, want)
		}
	}
}

// TestPublishWholeStateOnNewClaim: a peer's copy of a group that lost
// ranges (it folded a newer owner's state with a shorter plan) gets them
// back from the first state published under the claim the node wins next,
// although they were done before and are not touched since (the long
// fault run of 2026-12-06: the final owner's copy had a hole where two
// acknowledged finishes were, and the nodes disagreed).
func TestPublishWholeStateOnNewClaim(t *testing.T) {
	t.Parallel()
	t.Run("DisownedFirst", func(t *testing.T) { publishWholeStateOnNewClaim(t, true) })
	t.Run("WonAnew", func(t *testing.T) { publishWholeStateOnNewClaim(t, false) })
}

func publishWholeStateOnNewClaim(t *testing.T, disownFirst bool) {
	ctx := context.Background()
	p := newPublishPair(t)
	a, b := p.a, p.b
	rangesOf := func(n *dumpNode) string {
		g, err := n.db.GroupByName(ctx, "g")
		if err != nil {
			return err.Error()
		}
		rs, err := n.db.Ranges(ctx, g.ID, "", 0, 100)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%d:%s", r.Start, r.Status))
		}
		return fmt.Sprintf("tail %d %v", g.TailEnd, out)
	}

	// A owns g (claim 1) with 10 ranges, 3 done; B folds them.
	p.ownedByAFoldedByB(t, 3)
	poll.Eventually(t, 20*time.Second, "b folds a's ranges", func() bool { return rangesOf(b.dumpNode) == rangesOf(a) })

	// B folds a third node's state under claim 2 with a plan of 500:
	// the ranges past it go from B's copy.
	ga, err := a.db.GroupByName(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	state, _, _, err := a.db.OwnState(ctx, ga.ID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	state.ClaimRev, state.TailEnd = 2, 500
	mustDo(t, b.db.Write(ctx, func(tx *store.Tx) error {
		_, ok, err := tx.FoldGroup("node-c", state, 5)
		if err == nil && !ok {
			err = fmt.Errorf("b did not take claim 2's state")
		}
		return err
	}))
	if got := rangesOf(b.dumpNode); got != "tail 500 [1:done 101:done 201:done 301:planned 401:planned]" {
		t.Fatalf("b after claim 2's state: %s", got)
	}

	// A wins the group back (claim 3), having lost it in between or not
	// yet told of the loss: its first state under claim 3 brings B every
	// range again.
	if disownFirst {
		mustDo(t, a.db.Write(ctx, func(tx *store.Tx) error { return tx.DisownGroup("g", 5) }))
	}
	mustDo(t, a.db.Write(ctx, func(tx *store.Tx) error { return tx.OwnGroup("g", 3, 5) }))
	defer p.publishA()()
	want := rangesOf(a)
	deadline := time.Now().Add(20 * time.Second)
	for rangesOf(b.dumpNode) != want {
		if time.Now().After(deadline) {
			t.Fatalf("b's copy is %s, a's %s", rangesOf(b.dumpNode), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rebuildFunc is a function as a Rebuilder, for a test's rebuilds.
type rebuildFunc func(ctx context.Context, origin string) error

func (f rebuildFunc) Rebuild(ctx context.Context, origin string) error { return f(ctx, origin) }

// TestFoldNewerFormat: a peer's message of a newer format than this
// build reads is not folded: the fold holds before it (what came before
// is folded, nothing after), Newer names it for the findings, and once
// the message is gone (here: the peer's newer message purged) folding
// goes on. A dump chunk of a newer format is refused as unprocessable.
func TestFoldNewerFormat(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	stream := foldSetUp(t, natstest.Connect(t, url))
	b := foldJoin(t, url, "node-b", t.TempDir())
	js := natstest.Connect(t, url)
	publish := func(m Message) uint64 {
		t.Helper()
		body, _ := json.Marshal(m)
		msg := nats.NewMsg(SubjectPrefix + m.Origin)
		msg.Data = body
		ephemeralIdentity(m.Origin).SignMsg(msg)
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	group := func(name string) *store.PeerGroup {
		return &store.PeerGroup{Group: leasehold.Group{Name: name, Priority: 1, Active: true, RangeSize: 100, Start: 1, Kind: "default"}}
	}
	at := time.Now()
	first := publish(Message{Format: FormatVersion, Origin: "node-a", Catalog: "ca", Event: 1, Parts: 1, At: at, Kind: store.EventGroupUpdated, Group: group("alt.old")})
	newer := publish(Message{Format: FormatVersion + 1, Origin: "node-a", Catalog: "ca", Event: 2, Parts: 1, At: at, Kind: store.EventGroupUpdated, Group: group("alt.newer")})
	publish(Message{Format: FormatVersion, Origin: "node-a", Catalog: "ca", Event: 3, Parts: 1, At: at, Kind: store.EventGroupUpdated, Group: group("alt.after")})
	poll.Eventually(t, 10*time.Second, "the fold holds at the newer message", func() bool {
		n := b.folder.Newer()
		return n != nil && n.Seq == newer && n.Format == FormatVersion+1 && n.Origin == "node-a"
	})
	if _, mark, err := b.db.FoldMark(ctx); err != nil || mark != first {
		t.Fatalf("fold mark %d, %v; want %d, the message before the newer one", mark, err, first)
	}
	if _, err := b.db.GroupByName(ctx, "alt.old"); err != nil {
		t.Fatalf("the message before the newer one is not folded: %v", err)
	}
	for _, g := range []string{"alt.newer", "alt.after"} {
		if _, err := b.db.GroupByName(ctx, g); err == nil {
			t.Fatalf("%s is folded past a message of a newer format", g)
		}
	}
	if err := stream.DeleteMsg(ctx, newer); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "folding goes on past the purged message", func() bool {
		_, err := b.db.GroupByName(ctx, "alt.after")
		return err == nil && b.folder.Newer() == nil
	})

	// A dump of a newer format: refused.
	nc := dumpConn(t, url)
	sub, err := nc.Subscribe(DumpSubjectPrefix+"node-x", func(m *nats.Msg) {
		body, _ := json.Marshal(DumpChunk{Format: FormatVersion + 1, Seq: 0, Last: true, Catalog: "cx"})
		_ = respondAs(m, "node-x", body)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	// The server has the subscription once the flush is answered: a
	// request before that finds no responder.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	err = Rebuild(ctx, b.nc, b.db, "node-x", b.app.Config.MaxAttempts)
	if leasehold.KindOf(err) != leasehold.KindUnprocessable || !strings.Contains(err.Error(), "newer than this build reads") {
		t.Fatalf("a dump of a newer format: %v (%s); want unprocessable", err, leasehold.KindOf(err))
	}
}

// readPublishRecord reads node's publish record as it stands in the
// bucket (its signature, if any, left unchecked).
func readPublishRecord(t *testing.T, js jetstream.JetStream, node string) PublishRecord {
	t.Helper()
	ctx := context.Background()
	records, err := js.KeyValue(ctx, PublishedBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := records.Get(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	var rec PublishRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}
