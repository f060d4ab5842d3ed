package client_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// restartWorker is one worker of TestRestartMidLoad: it holds one group and
// logs what the node acknowledged, and the one call it never got an
// answer to.
type restartWorker struct {
	name   string
	api    *client.Client
	nodeID int64
	group  int64
	fence  int64

	leased   map[int64]leasehold.Range // ranges next handed out, by id
	progress map[int64]int64           // last acknowledged resume point
	finished map[int64]int64           // headers of acknowledged finishes
	snapshot *leasehold.Snapshot       // last acknowledged upload
	doubt    string                    // the unanswered call, "" if none
	doubtArg [2]int64
	doubtSum *leasehold.Snapshot
}

// TestRestartMidLoad stops a node while four workers are writing to it
// (the SIGTERM path: requests in flight finish, the writer is flushed),
// starts it again on the same data, and checks every acknowledged write is
// there, range by range; then that the leases resume after the TTL: a new
// worker gets nothing while the old leases live, and takes every group over
// once they lapse, from the recorded snapshot (rule 2), while the old
// holders are fenced off. The clock is the test's, so nothing sleeps.
func TestRestartMidLoad(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	const ttl = time.Minute
	opts := nodetest.Options{DataDir: t.TempDir(), Clock: clock.Now, LeaseTTL: ttl}
	n := nodetest.Start(t, opts)
	admin := client.New(n.URL, n.AdminToken)
	admin.Retry.Attempts = 1
	size, start := int64(10), int64(1)
	const workers = 4
	var ws []*restartWorker
	for i := range workers {
		name := fmt.Sprintf("restart.g%d", i)
		if _, _, err := admin.PutGroup(bg, name, client.GroupSpec{RangeSize: &size, Start: &start}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.PlanTail(bg, name, 2000); err != nil {
			t.Fatal(err)
		}
		one := int64(1)
		node, err := admin.RegisterNode(bg, client.NodeSpec{Name: fmt.Sprintf("restart-w%d", i), Capacity: &one})
		if err != nil {
			t.Fatal(err)
		}
		w := &restartWorker{name: node.Name, nodeID: node.ID, api: client.New(n.URL, node.Token),
			leased: map[int64]leasehold.Range{}, progress: map[int64]int64{}, finished: map[int64]int64{}}
		w.api.Retry.Attempts = 1
		g, err := w.api.Lease(bg)
		if err != nil || g == nil {
			t.Fatalf("lease for %s: %v, %v", w.name, g, err)
		}
		w.group, w.fence = g.Group.ID, g.Fence
		// A first window, so every takeover below resumes from a snapshot.
		if w.snapshot, err = w.api.PutSnapshot(bg, w.group, w.fence, 1, bytes.NewReader(gzipOf(t, "empty window")), client.SnapshotUpload{Gzip: true}); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}

	var acked atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			if err := w.work(&acked, 200, func() { once.Do(func() { close(enough) }) }); err != nil {
				t.Error(err)
			}
		})
	}
	<-enough // every worker is mid-load now
	n.Stop()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	doubts := 0
	for _, w := range ws {
		if w.doubt != "" {
			doubts++
		}
	}
	t.Logf("%d calls acknowledged before the stop, %d unanswered", acked.Load(), doubts)

	n = nodetest.Start(t, opts)
	admin = client.New(n.URL, n.AdminToken)
	admin.Retry.Attempts = 1
	for _, w := range ws {
		w.api.URL = n.URL
		w.check(t, admin)
	}

	late, err := admin.RegisterNode(bg, client.NodeSpec{Name: "restart-late"})
	if err != nil {
		t.Fatal(err)
	}
	lc := client.New(n.URL, late.Token)
	lc.Retry.Attempts = 1
	if g, err := lc.Lease(bg); g != nil || err != nil {
		t.Fatalf("a lease while every holder's lease is alive: %+v, %v; want nothing", g, err)
	}
	clock.Advance(ttl + time.Second)
	byGroup := map[int64]*restartWorker{}
	for _, w := range ws {
		byGroup[w.group] = w
	}
	for range workers {
		g, err := lc.Lease(bg)
		if err != nil || g == nil {
			t.Fatalf("a lease after the TTL: %+v, %v; want a takeover", g, err)
		}
		w := byGroup[g.Group.ID]
		if w == nil || !g.Takeover || g.Fence != w.fence+1 {
			t.Fatalf("after the TTL the late node got %+v; want a takeover of a restart worker's group at its fence+1", g)
		}
		delete(byGroup, g.Group.ID)
		d, err := admin.Group(bg, g.Group.Name)
		if err != nil {
			t.Fatal(err)
		}
		if g.Snapshot == nil || d.Snapshot == nil || g.Snapshot.Next != d.Snapshot.Next || g.Snapshot.SHA256 != d.Snapshot.SHA256 {
			t.Fatalf("the takeover of group %d carries snapshot %+v; recorded %+v", g.Group.ID, g.Snapshot, d.Snapshot)
		}
		r, err := lc.Next(bg, g.Group.ID, g.Fence)
		if err != nil || r == nil {
			t.Fatalf("next after the takeover of group %d: %v, %v", g.Group.ID, r, err)
		}
		// Rule 2: work resumes where the recorded window ends; what the
		// old holder did past it is planned again.
		if want := g.Snapshot.Next; r.Next != want {
			t.Fatalf("after the takeover of group %d (snapshot %+v) next is range %d..%d at %d, want the work to resume at %d", g.Group.ID, g.Snapshot, r.Start, r.End, r.Next, want)
		}
		if _, err := w.api.Heartbeat(bg, w.group, w.fence); !errors.Is(err, leasehold.ErrLeaseLost) {
			t.Fatalf("the old holder's heartbeat after the takeover: %v, want lease lost", err)
		}
	}
}

// work runs next → progress → finish over the worker's group, uploading a
// snapshot after every third range, until a call goes unanswered; after
// enough acknowledged calls in all it calls mid once.
func (w *restartWorker) work(acked *atomic.Int64, enough int64, mid func()) error {
	// An answer that is an error is a bug, except 503 while the node stops:
	// that is a refusal that changed nothing.
	answered := func(call string, err error) (bool, error) {
		if err == nil {
			if acked.Add(1) >= enough {
				mid()
			}
			return true, nil
		}
		var he *client.HTTPError
		if errors.As(err, &he) && !errors.Is(err, leasehold.ErrUnavailable) {
			return false, fmt.Errorf("%s: %s answered %v", w.name, call, err)
		}
		if !errors.As(err, &he) {
			w.doubt = call
		}
		return false, nil
	}
	for done := 0; ; done++ {
		r, err := w.api.Next(bg, w.group, w.fence)
		if ok, err := answered("next", err); !ok {
			return err
		}
		w.leased[r.ID] = *r
		resume := r.Start + 5
		w.doubtArg = [2]int64{r.ID, resume}
		_, err = w.api.Progress(bg, r.ID, w.fence, resume)
		if ok, err := answered("progress", err); !ok {
			return err
		}
		w.progress[r.ID] = resume
		w.doubtArg = [2]int64{r.ID, 7}
		_, err = w.api.Finish(bg, r.ID, w.fence, 7)
		if ok, err := answered("finish", err); !ok {
			return err
		}
		w.finished[r.ID] = 7
		if done%3 == 2 {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			fmt.Fprintf(zw, "window of %s below %d", w.name, r.End+1)
			zw.Close()
			w.doubtSum = &leasehold.Snapshot{Next: r.End + 1}
			s, err := w.api.PutSnapshot(bg, w.group, w.fence, r.End+1, &b, client.SnapshotUpload{Gzip: true})
			if ok, err := answered("snapshot", err); !ok {
				return err
			}
			w.snapshot = s
		}
	}
}

// check compares the restarted node's ranges, lease and snapshot of the
// worker's group with what it acknowledged. The one unanswered call may
// have landed or not.
func (w *restartWorker) check(t *testing.T, admin *client.Client) {
	t.Helper()
	name := ""
	for _, g := range mustGroups(t, admin) {
		if g.ID == w.group {
			name = g.Name
		}
	}
	d, err := admin.Group(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	if d.Lease == nil || d.Lease.NodeID != w.nodeID || d.Lease.Fence != w.fence {
		t.Errorf("%s: the lease after the restart is %+v; acknowledged: node %d at fence %d", name, d.Lease, w.nodeID, w.fence)
	}
	switch got := d.Snapshot; {
	case w.doubt == "snapshot" && got != nil && got.Next == w.doubtSum.Next:
	case w.snapshot == nil && got != nil, w.snapshot != nil && (got == nil || got.Next != w.snapshot.Next || got.SHA256 != w.snapshot.SHA256):
		t.Errorf("%s: the snapshot after the restart is %+v; acknowledged %+v", name, got, w.snapshot)
	}
	ranges, err := admin.AllRanges(bg, name, "")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range ranges {
		want := leasehold.Range{Status: leasehold.StatusPlanned, Next: r.Start}
		if _, ok := w.leased[r.ID]; ok {
			want = leasehold.Range{Status: leasehold.StatusLeased, Next: r.Start, Attempts: 1}
		}
		if p, ok := w.progress[r.ID]; ok {
			want.Next = p
		}
		if h, ok := w.finished[r.ID]; ok {
			want = leasehold.Range{Status: leasehold.StatusDone, Next: r.End + 1, Attempts: 1, Headers: h}
		}
		got := leasehold.Range{Status: r.Status, Next: r.Next, Attempts: r.Attempts, Headers: r.Headers}
		if got == want {
			checked++
			continue
		}
		// What the unanswered call would have made of this range.
		landed := want
		switch {
		case w.doubt == "next" && r.Status == leasehold.StatusLeased:
			landed = leasehold.Range{Status: leasehold.StatusLeased, Next: r.Start, Attempts: 1}
		case w.doubt == "progress" && r.ID == w.doubtArg[0]:
			landed.Next = w.doubtArg[1]
		case w.doubt == "finish" && r.ID == w.doubtArg[0]:
			landed = leasehold.Range{Status: leasehold.StatusDone, Next: r.End + 1, Attempts: 1, Headers: w.doubtArg[1]}
		}
		if got != landed {
			t.Errorf("%s: range %d (%d..%d) after the restart is %+v; acknowledged %+v (the unanswered call was %q)", name, r.ID, r.Start, r.End, got, want, w.doubt)
		}
		checked++
	}
	if len(w.finished) == 0 || checked != len(ranges) {
		t.Errorf("%s: %d ranges finished before the stop, %d of %d checked", name, len(w.finished), checked, len(ranges))
	}
}

func mustGroups(t *testing.T, admin *client.Client) []leasehold.Group {
	t.Helper()
	gs, err := admin.AllGroups(bg)
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

func gzipOf(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
