package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// The model is what the clients know from acknowledged answers: every
// group's lease and ranges as the node must have them. It applies each
// acknowledged write with the same rules the node applies (DESIGN.md rules
// 2-5), so after a crash the catalog must equal the model exactly, give or
// take the writes that were in flight when the node died.

// rangeState is one range as the catalog keeps it.
type rangeState struct {
	ID, Start, End, Next int64
	Status               leasehold.RangeStatus
	Priority             int64
	Node                 int64 // 0: NULL
	Attempts             int64
	Headers              int64
	RuleVersion          int64
}

// snapState is a recorded window snapshot.
type snapState struct {
	Next, Size int64
	SHA256     string
}

// groupState is one group's lease row and ranges.
type groupState struct {
	ID        int64
	Name      string
	RangeSize int64
	TailEnd   int64

	Holder, Fence, RangeID int64 // 0: NULL
	Snap                   *snapState
	RangesDone, Headers    int64
	Ranges                 []rangeState // by id
}

func (g *groupState) clone() *groupState {
	c := *g
	c.Ranges = slices.Clone(g.Ranges)
	if g.Snap != nil {
		s := *g.Snap
		c.Snap = &s
	}
	return &c
}

func (g *groupState) rangeByID(id int64) *rangeState {
	for i := range g.Ranges {
		if g.Ranges[i].ID == id {
			return &g.Ranges[i]
		}
	}
	return nil
}

// rules are the node's settings the model must know.
type rules struct {
	maxAttempts int64
}

// lease is rule 1's takeGroup and rule 2: a new fence, and what the
// snapshot does not cover planned again.
func (r rules) lease(g *groupState, node int64) {
	if g.Snap != nil {
		s := g.Snap.Next
		for i := range g.Ranges {
			x := &g.Ranges[i]
			if (x.Status == leasehold.StatusLeased || x.Status == leasehold.StatusDone) && x.End >= s {
				wasDone := x.Status == leasehold.StatusDone
				if x.Status == leasehold.StatusLeased && x.Attempts >= r.maxAttempts {
					x.Status = leasehold.StatusFailed
				} else {
					x.Status, x.Next = leasehold.StatusPlanned, max(x.Start, s)
				}
				if wasDone {
					x.Attempts = 0
				}
				x.Node = 0
			}
		}
		for i := range g.Ranges {
			x := &g.Ranges[i]
			if x.Status == leasehold.StatusPlanned && x.Next > x.Start && x.Next > s && x.End >= s {
				x.Next = max(x.Start, s)
			}
		}
	}
	r.replanLeased(g)
	g.Fence++
	g.Holder, g.RangeID = node, 0
}

// replanLeased puts leased ranges back to planned at their resume point,
// or fails those that used up their attempts.
func (r rules) replanLeased(g *groupState) {
	for i := range g.Ranges {
		x := &g.Ranges[i]
		if x.Status != leasehold.StatusLeased {
			continue
		}
		if x.Attempts >= r.maxAttempts {
			x.Status = leasehold.StatusFailed
		} else {
			x.Status, x.Node = leasehold.StatusPlanned, 0
		}
	}
}

// release is rule 5's release.
func (r rules) release(g *groupState) {
	r.replanLeased(g)
	g.Holder, g.RangeID = 0, 0
}

// next is rule 3: the range in work, or the lowest planned range by start
// leased to the holder; nil when caught up.
func (r rules) next(g *groupState) *rangeState {
	if x := g.rangeByID(g.RangeID); g.RangeID != 0 && x != nil && x.Status == leasehold.StatusLeased && x.Node == g.Holder {
		return x
	}
	for {
		var low *rangeState
		for i := range g.Ranges {
			x := &g.Ranges[i]
			if x.Status == leasehold.StatusPlanned && (low == nil || x.Start < low.Start) {
				low = x
			}
		}
		if low == nil {
			g.RangeID = 0
			return nil
		}
		if low.Attempts >= r.maxAttempts {
			low.Status = leasehold.StatusFailed
			continue
		}
		low.Status, low.Node = leasehold.StatusLeased, g.Holder
		low.Attempts++
		g.RangeID = low.ID
		return low
	}
}

func (r rules) progress(g *groupState, id, next int64) {
	if x := g.rangeByID(id); x != nil {
		x.Next = next
	}
}

func (r rules) finish(g *groupState, id, headers int64) {
	x := g.rangeByID(id)
	if x == nil || x.Status == leasehold.StatusDone && x.Node == g.Holder {
		return
	}
	x.Status, x.Next, x.Headers = leasehold.StatusDone, x.End+1, headers
	g.RangesDone++
	g.Headers += headers
	if g.RangeID == id {
		g.RangeID = 0
	}
}

// frontier is the id below which the group's window is complete: the
// lowest resume point of any range not done.
func (g *groupState) frontier() int64 {
	f := g.TailEnd + 1
	for _, x := range g.Ranges {
		if x.Status != leasehold.StatusDone {
			f = min(f, x.Next)
		}
	}
	return f
}

// diff says how the catalog's group differs from the model's, "" when
// they are the same.
func diff(want, got *groupState) string {
	var b strings.Builder
	field := func(name string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			fmt.Fprintf(&b, " %s=%v (want %v);", name, g, w)
		}
	}
	field("holder", want.Holder, got.Holder)
	field("fence", want.Fence, got.Fence)
	field("range_id", want.RangeID, got.RangeID)
	field("snapshot", snapString(want.Snap), snapString(got.Snap))
	field("ranges_done", want.RangesDone, got.RangesDone)
	field("headers", want.Headers, got.Headers)
	field("tail_end", want.TailEnd, got.TailEnd)
	gotRanges := map[int64]rangeState{}
	for _, x := range got.Ranges {
		gotRanges[x.ID] = x
	}
	for _, w := range want.Ranges {
		g, ok := gotRanges[w.ID]
		if !ok {
			fmt.Fprintf(&b, " range %d missing (want %+v);", w.ID, w)
			continue
		}
		delete(gotRanges, w.ID)
		if g != w {
			fmt.Fprintf(&b, " range %d is %+v (want %+v);", w.ID, g, w)
		}
	}
	for id, g := range gotRanges {
		fmt.Fprintf(&b, " range %d not in the model: %+v;", id, g)
	}
	return strings.TrimSuffix(strings.TrimSpace(b.String()), ";")
}

func snapString(s *snapState) string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("next=%d size=%d sha256=%.12s", s.Next, s.Size, s.SHA256)
}

// op is one call a client made: pending until answered, then acked, or in
// doubt when the node died before answering.
type op struct {
	kind    string // lease, next, progress, finish, heartbeat, snapshot, download, release
	client  *worker
	group   int64 // 0 for a lease until granted
	rangeID int64
	arg     int64 // progress: next; finish: headers
	snap    *snapState
	sent    time.Time
	// applied is set once the op's effect is in the model (an answer, or a
	// grant that proves an unanswered release landed).
	applied bool
}

// writes says whether the op changes the catalog beyond heartbeat times.
func (o *op) writes() bool { return o.kind != "heartbeat" && o.kind != "download" }

// apply applies o to g (a copy, for an op in doubt).
func (r rules) apply(g *groupState, o *op) {
	switch o.kind {
	case "lease":
		r.lease(g, o.client.nodeID)
	case "next":
		r.next(g)
	case "progress":
		r.progress(g, o.rangeID, o.arg)
	case "finish":
		r.finish(g, o.rangeID, o.arg)
	case "snapshot":
		s := *o.snap
		g.Snap = &s
	case "release":
		r.release(g)
	}
}
