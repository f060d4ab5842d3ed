package appliance

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// report reads the watchman's report and the kinds of its findings in the
// order given.
func (f *fixture) report() (Report, []leasehold.FindingKind) {
	f.t.Helper()
	rep, err := f.app.Watchman.Report(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	kinds := []leasehold.FindingKind{}
	for _, s := range rep.Stuck {
		kinds = append(kinds, s.Kind)
	}
	return rep, kinds
}

func has(kinds []leasehold.FindingKind, k leasehold.FindingKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// TestWatchmanRules: each rule of DESIGN 9, on a moved clock; a finding
// appears only once its bound has passed.
func TestWatchmanRules(t *testing.T) {
	t.Parallel()
	t.Run("StaleRangeAndQuietLease", func(t *testing.T) {
		f := newFixture(t, Config{LeaseTTL: time.Minute, NodeUnseen: time.Hour})
		f.group("g", 0, 100)
		f.tail("g", 2000)
		w := f.node("w", -100, 100, 4)
		g := f.lease(w)
		r := f.next(w, g)
		f.clock.Advance(59 * time.Second)
		if _, kinds := f.report(); len(kinds) != 0 {
			t.Fatalf("findings before the bound: %v", kinds)
		}
		f.clock.Advance(2 * time.Second)
		rep, kinds := f.report()
		if !has(kinds, leasehold.FindingRangeStale) || !has(kinds, leasehold.FindingLeaseQuiet) || len(kinds) != 2 {
			t.Fatalf("findings %v, want range_stale and lease_quiet", kinds)
		}
		for _, s := range rep.Stuck {
			if s.Group != "g" || s.Node != "w" || s.AgeS != 61 {
				t.Errorf("finding %+v: want group g, node w, age 61s", s)
			}
			if s.Kind == leasehold.FindingRangeStale && (s.Range == nil || *s.Range != r.ID) {
				t.Errorf("stale range %v, want %d", s.Range, r.ID)
			}
		}
		// A heartbeat clears both: the holder is alive again.
		if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
			t.Fatal(err)
		}
		if _, kinds := f.report(); len(kinds) != 0 {
			t.Fatalf("findings after a heartbeat: %v", kinds)
		}
	})
	t.Run("FailedRange", func(t *testing.T) {
		f := newFixture(t, Config{MaxAttempts: 1, NodeUnseen: time.Hour})
		f.group("g", 0, 100)
		f.tail("g", 1100)
		w := f.node("w", -100, 100, 4)
		g := f.lease(w)
		f.next(w, g)
		f.release(w, g)
		// A failed range stays a finding however young it is, until retried.
		if _, kinds := f.report(); len(kinds) != 1 || kinds[0] != leasehold.FindingRangeFailed {
			t.Fatalf("findings %v, want one range_failed", kinds)
		}
	})
	t.Run("NodeUnseen", func(t *testing.T) {
		f := newFixture(t, Config{LeaseTTL: time.Minute, NodeUnseen: 10 * time.Minute})
		f.node("idle", -100, 100, 4)
		f.clock.Advance(10*time.Minute - time.Second)
		if _, kinds := f.report(); len(kinds) != 0 {
			t.Fatalf("findings before the bound: %v", kinds)
		}
		f.clock.Advance(2 * time.Second)
		rep, kinds := f.report()
		if len(kinds) != 1 || kinds[0] != leasehold.FindingNodeUnseen || rep.Stuck[0].Node != "idle" {
			t.Fatalf("findings %+v, want node_unseen of idle", rep.Stuck)
		}
		// The node asks for work (nothing to lease) and is seen again.
		if g := f.lease(leasehold.Node{ID: 1}); g != nil {
			t.Fatalf("leased %v with nothing planned", g)
		}
		if _, kinds := f.report(); len(kinds) != 0 {
			t.Fatalf("findings after the node was seen: %v", kinds)
		}
	})
	t.Run("NodeStoppedCleanly", func(t *testing.T) {
		// A worker that released its groups and stopped strands nothing:
		// it stays unseen in the nodes list, never a finding. One that
		// stopped holding a group (killed) is, until it is seen again.
		f := newFixture(t, Config{LeaseTTL: time.Hour, NodeUnseen: 10 * time.Minute})
		f.group("g", 0, 100)
		f.tail("g", 2000)
		f.group("h", 0, 100)
		f.tail("h", 2000)
		stopped := f.node("stopped", -100, 100, 4)
		killed := f.node("killed", -100, 100, 4)
		f.release(stopped, f.lease(stopped))
		held := f.lease(killed)
		f.clock.Advance(11 * time.Minute)
		rep, _ := f.report()
		var unseen []string
		for _, s := range rep.Stuck {
			if s.Kind == leasehold.FindingNodeUnseen {
				unseen = append(unseen, s.Node)
			}
		}
		if len(unseen) != 1 || unseen[0] != "killed" {
			t.Fatalf("node_unseen of %v, want of killed only: %+v", unseen, rep.Stuck)
		}
		gauges, err := f.app.Watchman.Gauges(f.ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n := gauges.Findings[leasehold.FindingNodeUnseen]; n != 1 {
			t.Errorf("node_unseen gauge %d, want 1 (killed)", n)
		}
		if n := gauges.Nodes[leasehold.NodeUnseen]; n != 2 {
			t.Errorf("unseen nodes %d, want 2: stopped is unseen, not a finding", n)
		}
		if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: killed.ID, GroupID: held.Group.ID, Fence: held.Fence}); err != nil {
			t.Fatal(err)
		}
		if _, kinds := f.report(); has(kinds, leasehold.FindingNodeUnseen) {
			t.Fatalf("findings after the holder was seen again: %v", kinds)
		}
	})
	t.Run("SnapshotOld", func(t *testing.T) {
		f := newFixture(t, Config{LeaseTTL: time.Hour, NodeUnseen: 24 * time.Hour, SnapshotMaxAge: 10 * time.Minute})
		f.group("g", 0, 100)
		f.tail("g", 2000)
		w := f.node("w", -100, 100, 4)
		g := f.lease(w)
		f.next(w, g)
		f.clock.Advance(11 * time.Minute)
		if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
			t.Fatal(err)
		}
		if _, kinds := f.report(); len(kinds) != 1 || kinds[0] != leasehold.FindingSnapshotOld {
			t.Fatalf("findings %v, want snapshot_old on the held group without a snapshot", kinds)
		}
		// Released, the group is not being worked: no finding.
		f.release(w, g)
		if _, kinds := f.report(); len(kinds) != 0 {
			t.Fatalf("findings after release: %v", kinds)
		}
	})
}

// TestBacklogIsNotAStall: 10,000 planned ranges waiting while every
// worker is healthy is backlog, never a finding, however long it waits.
func TestBacklogIsNotAStall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{LeaseTTL: time.Minute, NodeUnseen: 10 * time.Minute})
	f.group("live", 0, 1)
	f.tail("live", 10000) // 9,000 tail ranges: 1001..10000
	f.group("old", 0, 1)
	f.history("old", 1) // 1,000 history ranges: 1000 down to 1
	w1, w2 := f.node("w1", -100, 10000, 1), f.node("w2", -100, 10000, 1)
	g1, g2 := f.lease(w1), f.lease(w2)
	f.next(w1, g1)
	f.next(w2, g2)
	// An hour passes; the workers heartbeat well within the TTL.
	for range 120 {
		f.clock.Advance(30 * time.Second)
		for _, h := range []struct {
			n leasehold.Node
			g *leasehold.Grant
		}{{w1, g1}, {w2, g2}} {
			if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: h.n.ID, GroupID: h.g.Group.ID, Fence: h.g.Fence}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, kinds := f.report()
	if len(kinds) != 0 {
		t.Fatalf("findings with healthy workers: %+v", rep.Stuck)
	}
	b := rep.Backlog
	if b.Planned != 9998 || b.Tail != 8999 || b.History != 999 {
		t.Fatalf("backlog %+v, want 9998 planned: 8999 tail, 999 history", b)
	}
	if b.TailOldestS != 3600 || b.HistOldestS != 3600 || b.OldestAgeS != 3600 {
		t.Fatalf("backlog ages %+v, want an hour", b)
	}
	gauges, err := f.app.Watchman.Gauges(f.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range gauges.Findings {
		if n != 0 {
			t.Errorf("count of %s = %d, want 0", k, n)
		}
	}
}

// TestFindingsNewestFirst: findings of different kinds come newest first.
func TestFindingsNewestFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{LeaseTTL: time.Minute, NodeUnseen: 5 * time.Minute, MaxAttempts: 1})
	f.node("gone", -100, 100, 4) // unseen since t0
	f.clock.Advance(2 * time.Minute)
	f.group("bad", 0, 100)
	f.tail("bad", 1100)
	w := f.node("w", -100, 100, 4)
	g := f.lease(w)
	f.next(w, g)
	f.release(w, g) // bad's range fails at t0+2m
	f.clock.Advance(2 * time.Minute)
	f.group("slow", 0, 100)
	f.tail("slow", 1100)
	g = f.lease(w)
	f.next(w, g) // slow's range and lease go quiet from t0+4m
	f.clock.Advance(2 * time.Minute)
	rep, kinds := f.report()
	want := []leasehold.FindingKind{leasehold.FindingRangeStale, leasehold.FindingLeaseQuiet, leasehold.FindingRangeFailed, leasehold.FindingNodeUnseen}
	if len(kinds) != len(want) {
		t.Fatalf("findings %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("findings %v, want %v", kinds, want)
		}
	}
	for i := 1; i < len(rep.Stuck); i++ {
		if rep.Stuck[i].Since.After(rep.Stuck[i-1].Since) {
			t.Fatalf("finding %d (%s) newer than %d: %+v", i, rep.Stuck[i].Since, i-1, rep.Stuck)
		}
	}
}
