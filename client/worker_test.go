package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/synthetic"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestWorkerHeartbeat: a range that takes several TTLs keeps its lease,
// and a second node gets nothing meanwhile.
func TestWorkerHeartbeat(t *testing.T) {
	// Serial: a real TTL of 1.5 s, heartbeaten every 500 ms, is kept only
	// while the worker's heartbeats are not starved.
	// Short but real: a heartbeat every 500ms keeps it.
	const ttl = 1500 * time.Millisecond
	e := start(t, nodetest.Options{LeaseTTL: ttl})
	e.group("alt.slow", 100, 1, 1, 200)
	a, nodeA := e.workerClient("a", 1, nil)
	b, _ := e.workerClient("b", 1, nil)

	release := make(chan struct{})
	var started atomic.Bool
	w := newWorker(t, a, 1)
	index := w.IndexFunc
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		if started.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return index(ctx, g, r, win, progress)
	}
	run(t, w)
	waitFor(t, "Index to start", started.Load)
	var first *leasehold.Lease
	waitFor(t, "the lease to be heartbeaten past 2 TTLs", func() bool {
		// Someone else asking all along must get nothing.
		if g, err := b.Lease(bg); err != nil || g != nil {
			t.Fatalf("node b: got %+v, %v; want nothing while a holds the group", g, err)
		}
		d, err := e.admin.Group(bg, "alt.slow")
		if err != nil {
			t.Fatal(err)
		}
		if d.Lease == nil {
			t.Fatal("the group is not held")
		}
		if first == nil {
			first = d.Lease
		}
		if d.Lease.NodeID != nodeA.ID || d.Lease.Fence != first.Fence {
			t.Fatalf("lease: got node %d fence %d, want node %d fence %d", d.Lease.NodeID, d.Lease.Fence, nodeA.ID, first.Fence)
		}
		return d.Lease.HeartbeatAt.Sub(d.Lease.LeasedAt) > 2*ttl
	})
	close(release)
	waitFor(t, "the group done", func() bool { return e.settled("alt.slow") })
	e.checkWindow("alt.slow")
}

// TestWorkerLostLease: when another node takes the group over, the
// worker's Index is cancelled with ErrLeaseLost as the cause, and the
// worker neither finishes, uploads nor releases anything of it.
func TestWorkerLostLease(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	const ttl = 3 * time.Second
	e := start(t, nodetest.Options{LeaseTTL: ttl, Clock: clock.Now})
	e.group("alt.lost", 100, 1, 1, 300)
	a, _ := e.workerClient("a", 1, nil)
	b, nodeB := e.workerClient("b", 1, nil)

	var started atomic.Bool
	var before atomic.Pointer[string]
	cause := make(chan error, 1)
	w := newWorker(t, a, 1)
	w.SnapshotInterval = -1
	log, logs := testLogger(t)
	w.Logger = log
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		// The snapshot a uploaded while it held the group (its empty
		// window) is all there may be after it lost it.
		sr, err := e.admin.GetGroupSnapshot(bg, "alt.lost", 0)
		if err != nil || sr == nil {
			t.Errorf("snapshot at the start of Index: %v, %v; want the empty window", sr, err)
		} else {
			before.Store(&sr.SHA256)
			sr.Close()
		}
		started.Store(true)
		progress(r.Start+10, 10)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}
	run(t, w)
	waitFor(t, "Index to start", started.Load)

	// a's heartbeats stop counting: the node's clock runs past the TTL.
	clock.Advance(ttl + time.Second)
	g, err := b.Lease(bg)
	if err != nil || g == nil || !g.Takeover {
		t.Fatalf("node b: got %+v, %v; want a takeover", g, err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, leasehold.ErrLeaseLost) {
			t.Errorf("Index's context cause: got %v, want lease lost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Index was not cancelled after the lease was lost")
	}
	waitFor(t, "the worker to forget the group", func() bool { return w.Held() == 0 })
	d, err := e.admin.Group(bg, "alt.lost")
	if err != nil {
		t.Fatal(err)
	}
	if d.Lease == nil || d.Lease.NodeID != nodeB.ID || d.Lease.Fence != g.Fence {
		t.Errorf("lease: got %+v, want b's at fence %d", d.Lease, g.Fence)
	}
	if d.Ranges[leasehold.StatusDone] != 0 {
		t.Errorf("ranges done: got %d, want 0 (a lost the range before finishing it)", d.Ranges[leasehold.StatusDone])
	}
	if sr, err := e.admin.GetGroupSnapshot(bg, "alt.lost", 0); err != nil || sr == nil || before.Load() == nil || sr.SHA256 != *before.Load() {
		t.Errorf("snapshot: got %+v, %v; want the one from before the loss (a never writes a snapshot for a lost group)", sr, err)
	} else {
		sr.Close()
	}
	if !strings.Contains(logs.String(), "lease lost") {
		t.Errorf("log: no word of the lost lease:\n%s", logs)
	}
}

// TestWorkerPanic: a panic in Index releases the group without finishing
// the range, is logged with its stack, and the loop goes on.
func TestWorkerPanic(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	e.group("alt.panic", 100, 1, 1, 300)
	c, _ := e.workerClient("w", 1, nil)
	w := newWorker(t, c, 1)
	log, logs := testLogger(t)
	w.Logger = log
	var panicked atomic.Bool
	var panicRange atomic.Int64
	index := w.IndexFunc
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		if r.Start == 101 && panicked.CompareAndSwap(false, true) {
			panicRange.Store(r.ID)
			progress(r.Start+50, 50)
			panic("index exploded")
		}
		return index(ctx, g, r, win, progress)
	}
	run(t, w)
	waitFor(t, "the group done", func() bool { return panicked.Load() && e.settled("alt.panic") })
	e.checkWindow("alt.panic")
	rs, err := e.admin.AllRanges(bg, "alt.panic", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ID == panicRange.Load() && r.Attempts < 2 {
			t.Errorf("range %d: got %d attempts, want the panicked one and another", r.ID, r.Attempts)
		}
	}
	out := logs.String()
	for _, want := range []string{"panic in IndexFunc", "index exploded", "worker_test.go", "released group"} {
		if !strings.Contains(out, want) {
			t.Errorf("log: no %q in\n%s", want, out)
		}
	}
}

// TestWorkerStop: when Run's context ends, the running Index calls see it,
// the windows are uploaded and every group is released.
func TestWorkerStop(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	names := []string{"alt.stop.a", "alt.stop.b", "alt.stop.c"}
	for _, n := range names {
		e.group(n, 100, 1, 1, 500)
	}
	c, node := e.workerClient("w", 3, nil)
	w := newWorker(t, c, 3)
	var inIndex, sawCancel atomic.Int64
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		// Half the range, then wait for the end.
		half := r
		half.End = r.Start + 49
		if err := (synthetic.Source{}).Index(ctx, win.(*synthetic.Window), half, progress); err != nil {
			return err
		}
		inIndex.Add(1)
		<-ctx.Done()
		sawCancel.Add(1)
		return ctx.Err()
	}
	stop := run(t, w)
	waitFor(t, "three groups in Index", func() bool { return inIndex.Load() == 3 })
	stop()
	if sawCancel.Load() != 3 {
		t.Errorf("Index calls that saw the end: got %d, want 3", sawCancel.Load())
	}
	for _, n := range names {
		d, err := e.admin.Group(bg, n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Lease != nil || d.Ranges[leasehold.StatusLeased] != 0 {
			t.Errorf("%s after stop: lease %+v, %d leased ranges; want released", n, d.Lease, d.Ranges[leasehold.StatusLeased])
		}
		// The window went up with the progress: ids 1..50.
		if got := e.storedWindow(n); !got.Equal(synthetic.Uninterrupted(n, 1, 50)) {
			t.Errorf("%s window: got %v, want ids 1..50", n, got)
		}
		rs, err := e.admin.AllRanges(bg, n, leasehold.StatusPlanned)
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].Start == 1 && rs[0].Next != 51 {
			t.Errorf("%s: range 1..100 resumes at %d, want 51", n, rs[0].Next)
		}
	}
	ns, err := e.admin.Nodes(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.ID == node.ID && n.Held != 0 {
			t.Errorf("node holds %d groups after stop, want 0", n.Held)
		}
	}
}

// TestWorkerPause: a paused node gets nothing and the loop backs off
// instead of spinning; on resume it works the backlog.
func TestWorkerPause(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	e.group("alt.pause", 100, 1, 1, 300)
	tr := &transport{}
	c, node := e.workerClient("w", 2, tr)
	if _, err := e.admin.PauseNode(bg, node.ID, "test"); err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, c, 2)
	w.Poll = client.Backoff{Min: 30 * time.Millisecond, Max: 240 * time.Millisecond}
	run(t, w)
	waitFor(t, "six lease polls", func() bool { return len(tr.leaseCalls()) >= 6 })
	calls := tr.leaseCalls()
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap < w.Poll.Min {
			t.Errorf("lease polls %d and %d: %v apart, want at least %v (no busy loop)", i-1, i, gap, w.Poll.Min)
		}
	}
	// Backoff: the waits grow. Each is at least max(Min, d/2) with d the
	// doubled, capped delay, so the first six polls span at least their sum.
	var floor time.Duration
	for n := range 5 {
		d := min(w.Poll.Min<<n, w.Poll.Max)
		floor += max(w.Poll.Min, d/2)
	}
	if span := calls[5].Sub(calls[0]); span < floor {
		t.Errorf("six polls in %v, want at least %v (growing backoff)", span, floor)
	}
	if d, err := e.admin.Group(bg, "alt.pause"); err != nil || d.Lease != nil || d.Ranges[leasehold.StatusDone] != 0 {
		t.Fatalf("while paused: got %+v, %v; want the group untouched", d, err)
	}
	if _, err := e.admin.ResumeNode(bg, node.ID, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the group done after resume", func() bool { return e.settled("alt.pause") })
	e.checkWindow("alt.pause")
}

// TestTakeover: worker a is killed (its connections cut, nothing
// released); once the TTL has passed, worker b takes the group over,
// downloads a's snapshot, resumes at its next, redoes the ranges after
// it, and the final window equals the uninterrupted one.
func TestTakeover(t *testing.T) {
	// Serial: a's finishes are bounded by its 100 ms stop timeout, which a
	// test beside it on a loaded machine can make it miss.
	clock := nodetest.NewClock()
	const ttl = 3 * time.Second
	e := start(t, nodetest.Options{LeaseTTL: ttl, Clock: clock.Now})
	// History 1..500 and tail 501..1000, ranges of 100: next takes them
	// in id order, 1..100 first.
	e.group("alt.takeover", 100, 1, 501, 1000)
	trA := &transport{}
	a, _ := e.workerClient("a", 1, trA)
	a.Retry = client.Backoff{Min: time.Millisecond, Max: time.Millisecond, Attempts: 1}
	b, nodeB := e.workerClient("b", 1, nil)

	// a uploads its window after every range, but its uploads fail from
	// the third range on; in the fourth it gets halfway and is killed.
	wa := newWorker(t, a, 1)
	wa.SnapshotInterval = time.Nanosecond
	wa.StopTimeout = 100 * time.Millisecond
	var rangesA atomic.Int64
	halfway := make(chan leasehold.Range, 1)
	index := wa.IndexFunc
	wa.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		switch rangesA.Add(1) {
		case 3:
			trA.failSnapshots.Store(true)
		case 4:
			half := r
			half.End = r.Start + 49
			if err := index(ctx, g, half, win, progress); err != nil {
				return err
			}
			halfway <- r
			<-ctx.Done()
			return ctx.Err()
		}
		return index(ctx, g, r, win, progress)
	}
	stopA := run(t, wa)
	var r4 leasehold.Range
	select {
	case r4 = <-halfway:
	case <-time.After(60 * time.Second):
		t.Fatal("a did not get to its fourth range")
	}
	waitFor(t, "a's progress to reach the node", func() bool {
		rs, err := e.admin.AllRanges(bg, "alt.takeover", leasehold.StatusLeased)
		return err == nil && len(rs) == 1 && rs[0].ID == r4.ID && rs[0].Next == r4.Start+50
	})
	trA.killed.Store(true)
	stopA()
	d, err := e.admin.Group(bg, "alt.takeover")
	if err != nil || d.Lease == nil || d.Lease.Snapshot == nil {
		t.Fatalf("after the kill: got %+v, %v; want a's lease with its snapshot", d, err)
	}
	snapNext := d.Lease.Snapshot.Next
	if snapNext != 201 {
		t.Fatalf("a's snapshot: next %d, want 201 (after its second range)", snapNext)
	}

	clock.Advance(ttl + time.Second)
	var mu sync.Mutex
	var seen []leasehold.Range
	var grant *client.Grant
	wb := newWorker(t, b, 1)
	indexB := wb.IndexFunc
	wb.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		mu.Lock()
		seen = append(seen, r)
		grant = g
		mu.Unlock()
		return indexB(ctx, g, r, win, progress)
	}
	run(t, wb)
	waitFor(t, "b to finish the group", func() bool { return e.settled("alt.takeover") })
	mu.Lock()
	defer mu.Unlock()
	if grant == nil || !grant.Takeover || grant.Snapshot == nil || grant.Snapshot.Next != snapNext {
		t.Fatalf("b's grant: got %+v, want a takeover with a's snapshot at %d", grant, snapNext)
	}
	if len(seen) == 0 || seen[0].Next != snapNext || seen[0].Start != 201 {
		t.Fatalf("b's first range: got %+v, want 201..300 resumed at the snapshot's next %d", seen, snapNext)
	}
	// 201..300 was done by a after its last good snapshot; 301..400 was
	// half done. Both are redone whole.
	if len(seen) < 2 || seen[1].Start != r4.Start || seen[1].Next != r4.Start {
		t.Errorf("b's second range: got %+v, want %d..%d from its start", seen, r4.Start, r4.End)
	}
	if len(seen) != 8 {
		t.Errorf("b indexed %d ranges, want the 8 from 201 on", len(seen))
	}
	e.checkWindow("alt.takeover")
	if d, err := e.admin.Group(bg, "alt.takeover"); err != nil || d.Lease != nil {
		t.Errorf("after b: got %+v, %v; want released", d, err)
	}
	_ = nodeB
}

// TestWorkerIndexError: an error from Index gives the group back with its
// window up to the progress, and the loop takes it again after a wait.
func TestWorkerIndexError(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	e.group("alt.flaky", 100, 1, 1, 300)
	c, _ := e.workerClient("w", 1, nil)
	w := newWorker(t, c, 1)
	log, logs := testLogger(t)
	w.Logger = log
	var calls atomic.Int64
	index := w.IndexFunc
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		if r.Start == 201 && calls.Add(1) <= 2 {
			half := r
			half.End = r.Start + 29
			if err := index(ctx, g, half, win, progress); err != nil {
				return err
			}
			return errors.New("source went away")
		}
		return index(ctx, g, r, win, progress)
	}
	run(t, w)
	waitFor(t, "the group done", func() bool { return calls.Load() > 2 && e.settled("alt.flaky") })
	e.checkWindow("alt.flaky")
	if n := strings.Count(logs.String(), "index failed"); n != 2 {
		t.Errorf("log: %d index failures, want 2:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "next=231") {
		t.Errorf("log: no window uploaded at the progress (next=231):\n%s", logs)
	}
}

// TestWorkerTokenRefused: a node deleted under a running worker stops it
// with ErrUnauthorized instead of polling for ever.
func TestWorkerTokenRefused(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	c, node := e.workerClient("w", 1, nil)
	w := newWorker(t, c, 1)
	done := make(chan error, 1)
	go func() { done <- w.Run(bg) }()
	if err := e.admin.DeleteNode(bg, node.ID, true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, leasehold.ErrUnauthorized) {
			t.Errorf("Run: got %v, want unauthorized", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not stop after its node was deleted")
	}
}
