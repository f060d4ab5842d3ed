package appliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	t     *testing.T
	app   *Appliance
	c     *Coordinator
	clock *clock
	ctx   context.Context
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	ck := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Minute
	}
	cfg.NowFunc = ck.Now
	app, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return &fixture{t: t, app: app, c: app.Coordinator, clock: ck, ctx: context.Background()}
}

func (f *fixture) node(name string, pmin, pmax, capacity int64) leasehold.Node {
	f.t.Helper()
	n, err := f.c.RegisterNode(f.ctx, NodeSpec{Name: name, PriorityMin: &pmin, PriorityMax: &pmax, Capacity: &capacity})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) group(name string, priority, size int64) leasehold.Group {
	f.t.Helper()
	g, _, err := f.c.PutGroup(f.ctx, name, store.GroupSpec{Priority: &priority, RangeSize: &size, Start: ptr(int64(1001))})
	if err != nil {
		f.t.Fatal(err)
	}
	return g
}

func (f *fixture) tail(name string, high int64) {
	f.t.Helper()
	if _, err := f.c.PlanTail(f.ctx, name, high); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) history(name string, low int64) {
	f.t.Helper()
	if _, err := f.c.PlanHistory(f.ctx, name, low); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) lease(n leasehold.Node) *leasehold.Grant {
	f.t.Helper()
	g, err := f.c.Lease(f.ctx, n.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return g
}

func (f *fixture) next(n leasehold.Node, g *leasehold.Grant) *leasehold.Range {
	f.t.Helper()
	r, err := f.c.Next(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: g.Group.ID, Fence: g.Fence})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) release(n leasehold.Node, g *leasehold.Grant) {
	f.t.Helper()
	if err := f.c.Release(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		f.t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func name(g *leasehold.Grant) string {
	if g == nil {
		return "<none>"
	}
	return g.Group.Name
}

// TestLeaseChoice is rule 1, case by case.
func TestLeaseChoice(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		cfg   Config
		setup func(f *fixture) leasehold.Node
		want  string
	}{
		{"TailBeforeHistory", Config{}, func(f *fixture) leasehold.Node {
			f.group("hist", 0, 100)
			f.history("hist", 1)
			f.group("live", 5, 100)
			f.tail("live", 2000)
			return f.node("w", -100, 100, 4)
		}, "live"},
		{"HistoryBandWithTailPending", Config{}, func(f *fixture) leasehold.Node {
			f.group("both", 0, 100)
			f.tail("both", 2000)
			f.history("both", 1)
			return f.node("historian", 0, 100, 4)
		}, "both"},
		{"LongestUnheldFirst", Config{}, func(f *fixture) leasehold.Node {
			f.group("a", 0, 100)
			f.tail("a", 2000)
			f.group("b", 0, 100)
			f.tail("b", 2000)
			w := f.node("w", -100, 100, 4)
			// b is released first, so it has been unheld longer than a.
			gb := f.lease(w)
			ga := f.lease(w)
			if name(gb) != "a" || name(ga) != "b" {
				f.t.Fatalf("setup leased %s, %s; want a, b", name(gb), name(ga))
			}
			f.release(w, ga)
			f.clock.Advance(time.Second)
			f.release(w, gb)
			return w
		}, "b"},
		{"GroupPriorityBreaksTies", Config{}, func(f *fixture) leasehold.Node {
			f.group("low", 7, 100)
			f.tail("low", 2000)
			f.group("high", 2, 100)
			f.tail("high", 2000)
			return f.node("w", -100, 100, 4)
		}, "high"},
		{"OutsideBand", Config{}, func(f *fixture) leasehold.Node {
			f.group("live", 0, 100)
			f.tail("live", 2000)
			return f.node("w", 0, 100, 4)
		}, "<none>"},
		{"Paused", Config{}, func(f *fixture) leasehold.Node {
			f.group("live", 0, 100)
			f.tail("live", 2000)
			w := f.node("w", -100, 100, 4)
			if _, err := f.c.SetPaused(f.ctx, w.ID, true, "alice"); err != nil {
				f.t.Fatal(err)
			}
			return w
		}, "<none>"},
		{"AtCapacity", Config{}, func(f *fixture) leasehold.Node {
			f.group("a", 0, 100)
			f.tail("a", 2000)
			f.group("b", 0, 100)
			f.tail("b", 2000)
			w := f.node("w", -100, 100, 1)
			if g := f.lease(w); g == nil {
				f.t.Fatal("first lease got nothing")
			}
			return w
		}, "<none>"},
		{"ZeroCapacity", Config{}, func(f *fixture) leasehold.Node {
			f.group("a", 0, 100)
			f.tail("a", 2000)
			return f.node("w", -100, 100, 0)
		}, "<none>"},
		{"HistoryCapLeasesTailOnly", Config{HistoryMinFreeBytes: 1 << 62}, func(f *fixture) leasehold.Node {
			f.group("hist", 0, 100)
			f.history("hist", 1)
			return f.node("w", -100, 100, 4)
		}, "<none>"},
		{"HistoryCapStillLeasesTail", Config{HistoryMinFreeBytes: 1 << 62}, func(f *fixture) leasehold.Node {
			f.group("hist", 0, 100)
			f.history("hist", 1)
			f.group("live", 9, 100)
			f.tail("live", 2000)
			return f.node("w", -100, 100, 4)
		}, "live"},
		{"Inactive", Config{}, func(f *fixture) leasehold.Node {
			f.group("off", 0, 100)
			f.tail("off", 2000)
			if _, _, err := f.c.PutGroup(f.ctx, "off", store.GroupSpec{Active: ptr(false)}); err != nil {
				f.t.Fatal(err)
			}
			return f.node("w", -100, 100, 4)
		}, "<none>"},
		{"CaughtUpGroupNotLeased", Config{}, func(f *fixture) leasehold.Node {
			f.group("empty", 0, 100)
			return f.node("w", -100, 100, 4)
		}, "<none>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg)
			w := tc.setup(f)
			if got := name(f.lease(w)); got != tc.want {
				t.Fatalf("leased %s, want %s", got, tc.want)
			}
		})
	}
}

// TestTakeoverAfterTTL: a quiet holder's group is free after the TTL, taken
// at a higher fence; the old holder is then refused and changes nothing.
func TestTakeoverAfterTTL(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.group("g", 0, 100)
	f.tail("g", 1500)
	a, b := f.node("a", -100, 100, 4), f.node("b", -100, 100, 4)
	ga := f.lease(a)
	r := f.next(a, ga)
	if _, err := f.c.Progress(f.ctx, leasehold.RangeHolder{NodeID: a.ID, RangeID: r.ID, Fence: ga.Fence}, r.Start+10); err != nil {
		t.Fatal(err)
	}
	if g := f.lease(b); g != nil {
		t.Fatalf("b leased %s while a's lease is alive", g.Group.Name)
	}
	f.clock.Advance(59 * time.Second)
	if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: a.ID, GroupID: ga.Group.ID, Fence: ga.Fence}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(59 * time.Second)
	if g := f.lease(b); g != nil {
		t.Fatal("a heartbeat did not keep the lease alive")
	}
	f.clock.Advance(2 * time.Second)
	gb := f.lease(b)
	if gb == nil || gb.Group.ID != ga.Group.ID || !gb.Takeover || gb.Fence <= ga.Fence {
		t.Fatalf("after the TTL b got %+v, want a takeover of g above fence %d", gb, ga.Fence)
	}
	// Without a snapshot the range in work goes back at its own resume point.
	rb := f.next(b, gb)
	if rb.ID != r.ID || rb.Next != r.Start+10 {
		t.Fatalf("b's first range = %+v, want range %d resumed at %d", rb, r.ID, r.Start+10)
	}
	for name, call := range map[string]func() error{
		"Heartbeat": func() error {
			return f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: a.ID, GroupID: ga.Group.ID, Fence: ga.Fence})
		},
		"Next": func() error {
			_, err := f.c.Next(f.ctx, leasehold.GroupHolder{NodeID: a.ID, GroupID: ga.Group.ID, Fence: ga.Fence})
			return err
		},
		"Progress": func() error {
			_, err := f.c.Progress(f.ctx, leasehold.RangeHolder{NodeID: a.ID, RangeID: r.ID, Fence: ga.Fence}, r.Start+20)
			return err
		},
		"Finish": func() error {
			_, err := f.c.Finish(f.ctx, leasehold.RangeHolder{NodeID: a.ID, RangeID: r.ID, Fence: ga.Fence}, 5)
			return err
		},
		"Release": func() error {
			return f.c.Release(f.ctx, leasehold.GroupHolder{NodeID: a.ID, GroupID: ga.Group.ID, Fence: ga.Fence})
		},
		"Snapshot": func() error {
			_, err := f.app.Snapshots.Put(f.ctx, Upload{GroupID: ga.Group.ID, NodeID: a.ID, Fence: ga.Fence, Next: 5, Body: strings.NewReader("x")})
			return err
		},
	} {
		t.Run("StaleFence"+name, func(t *testing.T) {
			before := f.dump()
			err := call()
			if !errors.Is(err, leasehold.ErrLeaseLost) {
				t.Fatalf("got %v, want lease lost", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("held by node %d at fence %d", b.ID, gb.Fence)) {
				t.Errorf("message %q does not say who holds the group", err)
			}
			if after := f.dump(); after != before {
				t.Fatalf("a refused call changed the catalog:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// dump is the catalog's ranges and leases as text, to prove nothing changed.
func (f *fixture) dump() string {
	f.t.Helper()
	var b strings.Builder
	gs, _ := f.app.db.Groups(f.ctx, 0, 1000)
	for _, g := range gs {
		l, _ := f.app.db.Lease(f.ctx, g.ID)
		lj, _ := json.Marshal(l)
		fmt.Fprintf(&b, "%s %s;", g.Name, lj)
		rs, _ := f.app.db.Ranges(f.ctx, g.ID, "", 0, 1000)
		for _, r := range rs {
			fmt.Fprintf(&b, " %d:%d-%d@%d/%s/%d", r.ID, r.Start, r.End, r.Next, r.Status, r.Attempts)
		}
	}
	return b.String()
}

// TestNext is rule 3: ranges in id order inside the band, one in work at a
// time, the current rule version recorded.
func TestNext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.group("g", 0, 500)
	f.tail("g", 2000) // 1001-1500, 1501-2000 at -1
	f.history("g", 1) // 501-1000 at 0, 1-500 at 1
	v, err := f.c.PutRules(f.ctx, []byte(`{"subject":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	w := f.node("w", -100, 100, 4)
	g := f.lease(w)
	if g.Rules.Version != v || string(g.Rules.Body) != `{"subject":"x"}` {
		t.Fatalf("grant rules = %+v, want version %d", g.Rules, v)
	}
	var starts []int64
	for {
		r := f.next(w, g)
		if r == nil {
			break
		}
		if again := f.next(w, g); again.ID != r.ID {
			t.Fatalf("next while range %d is in work gave range %d", r.ID, again.ID)
		}
		if r.RuleVersion != v || r.Attempts != 1 || r.Status != leasehold.StatusLeased {
			t.Fatalf("leased range = %+v, want rule version %d, attempt 1", r, v)
		}
		starts = append(starts, r.Start)
		if _, err := f.c.Finish(f.ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, 7); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(starts), "[1 501 1001 1501]"; got != want {
		t.Fatalf("ranges in order %s, want %s", got, want)
	}
	l, _ := f.app.db.Lease(f.ctx, g.Group.ID)
	if l.RangesDone != 4 || l.Headers != 28 {
		t.Fatalf("lease counts %d ranges, %d headers; want 4, 28", l.RangesDone, l.Headers)
	}

	t.Run("Band", func(t *testing.T) {
		f := newFixture(t, Config{})
		f.group("g", 0, 500)
		f.tail("g", 2000)
		f.history("g", 1)
		tailer := f.node("tailer", -100, -1, 4)
		g := f.lease(tailer)
		if r := f.next(tailer, g); r == nil || r.Start != 1001 {
			t.Fatalf("a tail-only node got %+v, want the tail range at 1001", r)
		}
	})
}

// TestProgressAndFinish is rule 4.
func TestProgressAndFinish(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.group("g", 0, 100)
	f.tail("g", 1200)
	w := f.node("w", -100, 100, 4)
	g := f.lease(w)
	r := f.next(w, g)
	cases := []struct {
		name string
		next int64
		kind leasehold.ErrorKind
	}{
		{"Forward", 1050, ""},
		{"Same", 1050, ""},
		{"Backwards", 1049, leasehold.KindUnprocessable},
		{"PastEnd", r.End + 2, leasehold.KindUnprocessable},
		{"ToEndPlusOne", r.End + 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.dump()
			got, err := f.c.Progress(f.ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, tc.next)
			if tc.kind != "" {
				if leasehold.KindOf(err) != tc.kind {
					t.Fatalf("got %v, want %s", err, tc.kind)
				}
				if f.dump() != before {
					t.Fatal("a refused progress changed the catalog")
				}
				return
			}
			if err != nil || got.Next != tc.next {
				t.Fatalf("got %+v, %v; want next %d", got, err, tc.next)
			}
		})
	}
	done, err := f.c.Finish(f.ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, 42)
	if err != nil || done.Status != leasehold.StatusDone || done.Headers != 42 || done.Next != done.End+1 {
		t.Fatalf("finish: %+v, %v", done, err)
	}
	again, err := f.c.Finish(f.ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, 42)
	if err != nil || again.Status != leasehold.StatusDone {
		t.Fatalf("a repeated finish: %+v, %v; want the done range again", again, err)
	}
	if _, err := f.c.Progress(f.ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, done.End+1); !errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("progress on a done range: %v, want conflict", err)
	}
	if _, err := f.c.Finish(f.ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, -1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("negative headers: %v, want invalid", err)
	}
	l, _ := f.app.db.Lease(f.ctx, g.Group.ID)
	if l.RangesDone != 1 || l.Headers != 42 {
		t.Fatalf("lease counts %d ranges %d headers, want 1 and 42 (a repeated finish counts once)", l.RangesDone, l.Headers)
	}
}

// TestRelease is rule 5: the range in work goes back at its resume point
// and the group is free at once.
func TestRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.group("g", 0, 100)
	f.tail("g", 1200)
	a, b := f.node("a", -100, 100, 4), f.node("b", -100, 100, 4)
	g := f.lease(a)
	r := f.next(a, g)
	f.c.Progress(f.ctx, leasehold.RangeHolder{NodeID: a.ID, RangeID: r.ID, Fence: g.Fence}, 1033)
	f.release(a, g)
	gb := f.lease(b)
	if gb == nil || gb.Takeover {
		t.Fatalf("after a release b got %+v, want the group, not as a takeover", gb)
	}
	if rb := f.next(b, gb); rb.ID != r.ID || rb.Next != 1033 || rb.Attempts != 2 {
		t.Fatalf("b's range %+v, want range %d at 1033, attempt 2", rb, r.ID)
	}
}

// TestMaxAttempts: a range leased max times without finishing is failed,
// reported, not leased again, and retried by an operator.
func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{MaxAttempts: 2})
	f.group("g", 0, 100)
	f.tail("g", 1100) // one range
	w := f.node("w", -100, 100, 4)
	var rid int64
	for range 2 {
		g := f.lease(w)
		rid = f.next(w, g).ID
		f.release(w, g)
	}
	if g := f.lease(w); g != nil {
		t.Fatalf("the failed range's group was leased again: %+v", g)
	}
	rep, err := f.app.Watchman.Report(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stuck) != 1 || rep.Stuck[0].Kind != leasehold.FindingRangeFailed || *rep.Stuck[0].Range != rid {
		t.Fatalf("findings %+v, want the failed range %d", rep.Stuck, rid)
	}
	if _, err := f.c.Retry(f.ctx, rid+100); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("retry of a missing range: %v", err)
	}
	r, err := f.c.Retry(f.ctx, rid)
	if err != nil || r.Status != leasehold.StatusPlanned || r.Attempts != 0 {
		t.Fatalf("retry: %+v, %v", r, err)
	}
	if _, err := f.c.Retry(f.ctx, rid); !errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("retry of a planned range: %v, want conflict", err)
	}
	if g := f.lease(w); g == nil {
		t.Fatal("the retried range's group is not leased")
	}
}

// TestDeleteNode: what a deleted node held is released at its resume points.
func TestDeleteNode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.group("g", 0, 100)
	f.tail("g", 1100)
	a, b := f.node("a", -100, 100, 4), f.node("b", -100, 100, 4)
	g := f.lease(a)
	r := f.next(a, g)
	f.c.Progress(f.ctx, leasehold.RangeHolder{NodeID: a.ID, RangeID: r.ID, Fence: g.Fence}, 1010)
	// Not forced, a node holding a group is refused and stays, its lease
	// too.
	err := f.c.DeleteNode(f.ctx, a.ID, false)
	if !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "holds 1 group") {
		t.Fatalf("deleting a holding node unforced: %v; want a conflict naming 1 group", err)
	}
	if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: a.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		t.Fatalf("the refused delete ended the lease: %v", err)
	}
	if err := f.c.DeleteNode(f.ctx, a.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := f.c.DeleteNode(f.ctx, a.ID, true); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	gb := f.lease(b)
	if gb == nil {
		t.Fatal("the deleted node's group is still held")
	}
	if rb := f.next(b, gb); rb.Next != 1010 {
		t.Fatalf("resume point %d, want 1010", rb.Next)
	}
}

// TestPlanner is rule 8: tail and history in ranges of the range size,
// idempotent, with the documented priorities.
func TestPlanner(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.group("g", 0, 1000) // start 1001
	steps := []struct {
		op      string
		bound   int64
		planned int64
	}{
		{"tail", 5000, 4}, // 1001-2000 … 4001-5000
		{"tail", 5000, 0},
		{"tail", 5500, 1}, // 5001-5500
		{"tail", 100, 0},
		{"history", 1, 1}, // 1-1000
		{"history", 1, 0},
	}
	for _, s := range steps {
		var n int64
		var err error
		if s.op == "tail" {
			n, err = f.c.PlanTail(f.ctx, "g", s.bound)
		} else {
			n, err = f.c.PlanHistory(f.ctx, "g", s.bound)
		}
		if err != nil || n != s.planned {
			t.Fatalf("%s(%d) planned %d (%v), want %d", s.op, s.bound, n, err, s.planned)
		}
	}
	g, _ := f.app.db.GroupByName(f.ctx, "g")
	if g.TailEnd != 5500 || g.HistoryFloor != 1 {
		t.Fatalf("tail_end %d history_floor %d, want 5500 and 1", g.TailEnd, g.HistoryFloor)
	}
	rs, _ := f.app.db.Ranges(f.ctx, g.ID, "", 0, 100)
	var got []string
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%d-%d@%d", r.Start, r.End, r.Priority))
	}
	if want := "[1001-2000@-1 2001-3000@-1 3001-4000@-1 4001-5000@-1 5001-5500@-1 1-1000@0]"; fmt.Sprint(got) != want {
		t.Fatalf("ranges %v, want %s", got, want)
	}
	f.group("deep", 0, 100) // start 1001
	f.history("deep", 701)
	rs, _ = f.app.db.Ranges(f.ctx, 2, "", 0, 100)
	got = got[:0]
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%d-%d@%d", r.Start, r.End, r.Priority))
	}
	if want := "[901-1000@0 801-900@1 701-800@2]"; fmt.Sprint(got) != want {
		t.Fatalf("history ranges %v, want %s", got, want)
	}
	for _, tc := range []struct {
		name string
		err  error
		kind leasehold.ErrorKind
	}{
		{"MissingGroup", func() error { _, err := f.c.PlanTail(f.ctx, "nope", 10); return err }(), leasehold.KindNotFound},
		{"NegativeHigh", func() error { _, err := f.c.PlanTail(f.ctx, "g", -1); return err }(), leasehold.KindInvalid},
		{"TooMany", func() error { _, err := f.c.PlanTail(f.ctx, "g", 1<<40); return err }(), leasehold.KindUnprocessable},
		{"StartChanged", func() error { _, _, err := f.c.PutGroup(f.ctx, "g", store.GroupSpec{Start: ptr(int64(5))}); return err }(), leasehold.KindConflict},
		{"BadName", func() error { _, _, err := f.c.PutGroup(f.ctx, ".bad", store.GroupSpec{}); return err }(), leasehold.KindInvalid},
	} {
		if leasehold.KindOf(tc.err) != tc.kind {
			t.Errorf("%s: got %v, want %s", tc.name, tc.err, tc.kind)
		}
	}
}
