package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// foldStart is the clock of the fold tests.
var foldStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// foldGroup is group name as peer "a" holds it, owned under claim rev:
// ranges of 100 planned 1..1000, held by a's worker, 2 ranges done.
func foldGroup(name string, rev uint64) PeerGroup {
	at := foldStart.Add(-time.Minute)
	return PeerGroup{
		Group: leasehold.Group{ID: 99, Name: name, Priority: 3, Active: true, RangeSize: 100, Start: 1, TailEnd: 1000, HistoryFloor: 1,
			CreatedAt: foldStart.Add(-time.Hour)},
		ClaimRev: rev, Fence: 4, Holder: "wa", LeasedAt: &at, HeartbeatAt: &at, RangesDone: 2, Headers: 150,
	}
}

// foldRanges are foldGroup's ten ranges: two done, one leased (in work
// at 250), the rest planned.
func foldRanges() []PeerRange {
	var rs []PeerRange
	for i := range int64(10) {
		r := PeerRange{Range: leasehold.Range{ID: 500 + i, GroupID: 99, Start: i*100 + 1, End: i*100 + 100, Next: i*100 + 1,
			Status: leasehold.StatusPlanned, Priority: leasehold.TailPriority, UpdatedAt: foldStart.Add(-time.Duration(10-i) * time.Second)}}
		switch {
		case i < 2:
			r.Status, r.Next, r.Attempts, r.Headers = leasehold.StatusDone, r.End+1, 1, 75
		case i == 2:
			r.Status, r.Next, r.Attempts, r.Node = leasehold.StatusLeased, 250, 1, "wa"
		}
		rs = append(rs, r)
	}
	return rs
}

// foldPeerRow is what peer_groups and groups hold of a folded group.
type foldPeerRow struct {
	origin, holder string
	fence, rev     int64
	owned          bool
	snapNext       *int64
	done, headers  int64
}

func foldPeerOf(t *testing.T, db *DB, id int64) (foldPeerRow, bool) {
	t.Helper()
	var p foldPeerRow
	err := db.r.QueryRow(`SELECT p.origin, p.holder, p.fence, g.claim_rev, g.owned, p.snapshot_next, p.ranges_done, p.headers
		FROM groups g JOIN peer_groups p ON p.group_id = g.id WHERE g.id = ?`, id).
		Scan(&p.origin, &p.holder, &p.fence, &p.rev, &p.owned, &p.snapNext, &p.done, &p.headers)
	if err != nil {
		return p, false
	}
	return p, true
}

// foldEvents counts the outbox rows.
func foldEvents(t *testing.T, db *DB) int {
	t.Helper()
	evs, err := db.Events(context.Background(), 0, 100000)
	must(t, err)
	return len(evs)
}

// foldUrgentTail is the group's tail lane of the lease-choice key.
func foldUrgentTail(t *testing.T, db *DB, id int64) *int64 {
	t.Helper()
	var v *int64
	must(t, db.r.QueryRow(`SELECT urgent_tail FROM groups WHERE id = ?`, id).Scan(&v))
	return v
}

// foldIn folds g and its ranges from origin in one write and returns the
// local id and whether the state was taken.
func foldIn(t *testing.T, db *DB, origin string, g PeerGroup, rs []PeerRange) (int64, bool) {
	t.Helper()
	var id int64
	var ok bool
	must(t, db.Write(context.Background(), func(tx *Tx) error {
		var err error
		if id, ok, err = tx.FoldGroup(origin, g, 5); err != nil || !ok {
			return err
		}
		return tx.FoldRanges(id, rs)
	}))
	return id, ok
}

// TestFoldGroup: a peer's group is created here disowned, its state named
// as the origin's, without an outbox row; a state under an older claim
// revision is refused; a state under a newer claim on a group this node
// owns disowns it and ends the lease held here; under the same claim, an
// owned group is left alone.
func TestFoldGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("New", func(t *testing.T) {
		db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
		id, ok := foldIn(t, db, "a", foldGroup("g", 3), foldRanges())
		if !ok {
			t.Fatal("a new peer group was refused")
		}
		g, err := db.GroupByName(ctx, "g")
		must(t, err)
		want := foldGroup("g", 3).Group
		want.ID = id
		want.Kind = leasehold.DefaultSourceKind // a peer's group sent without a kind
		if g != want {
			t.Fatalf("group = %+v, want %+v", g, want)
		}
		got, found := foldPeerOf(t, db, id)
		if w := (foldPeerRow{origin: "a", holder: "wa", fence: 4, rev: 3, done: 2, headers: 150}); !found || got != w {
			t.Fatalf("peer row = %+v (%v), want %+v", got, found, w)
		}
		if owned, err := db.OwnedGroups(ctx); err != nil || len(owned) != 0 {
			t.Fatalf("owned = %v, %v; want none", owned, err)
		}
		if origin, err := db.GroupOrigin(ctx, id); err != nil || origin != "a" {
			t.Fatalf("origin = %q, %v; want a", origin, err)
		}
		if n := foldEvents(t, db); n != 0 {
			t.Fatalf("folding wrote %d outbox rows, want none", n)
		}
		if ids, err := db.OwnGroupIDs(ctx, 0, 10); err != nil || len(ids) != 0 {
			t.Fatalf("own groups = %v, %v; a peer's group is not this node's own", ids, err)
		}
		err = db.Write(ctx, func(tx *Tx) error { _, _, err := tx.FoldGroup("a", foldGroup("bad name!", 3), 5); return err })
		if !errors.Is(err, leasehold.ErrInvalid) {
			t.Fatalf("folding a bad group name: %v, want invalid", err)
		}
	})
	t.Run("OlderClaimRefused", func(t *testing.T) {
		db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
		id, _ := foldIn(t, db, "b", foldGroup("g", 5), foldRanges())
		old := foldGroup("g", 4)
		old.Priority, old.Holder = 9, "wold"
		if _, ok := foldIn(t, db, "a", old, nil); ok {
			t.Fatal("a state under an older claim was taken")
		}
		g, err := db.GroupByName(ctx, "g")
		must(t, err)
		if p, _ := foldPeerOf(t, db, id); g.Priority != 3 || p.origin != "b" || p.holder != "wa" || p.rev != 5 {
			t.Fatalf("after a late state of an old owner: group %+v, peer %+v; want b's", g, p)
		}
		// The same claim again, and a newer one, are taken.
		same := foldGroup("g", 5)
		same.Priority = 4
		if _, ok := foldIn(t, db, "b", same, nil); !ok {
			t.Fatal("a state under the same claim of a peer's group was refused")
		}
		if _, ok := foldIn(t, db, "c", foldGroup("g", 6), nil); !ok {
			t.Fatal("a state under a newer claim was refused")
		}
		if p, _ := foldPeerOf(t, db, id); p.origin != "c" || p.rev != 6 {
			t.Fatalf("peer = %+v, want c's under 6", p)
		}
	})
	t.Run("NewerClaimDisowns", func(t *testing.T) {
		db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
		var node leasehold.Node
		var gid int64
		must(t, db.Write(ctx, func(tx *Tx) error {
			var err error
			if node, err = tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 4}); err != nil {
				return err
			}
			g, _, err := tx.PutGroup("g", GroupSpec{RangeSize: ptr(int64(100))})
			if err != nil {
				return err
			}
			gid = g.ID
			if _, err := tx.PlanTail(g.ID, 1000); err != nil {
				return err
			}
			return tx.OwnGroup("g", 5, 5)
		}))
		var grant *leasehold.Grant
		var r *leasehold.Range
		must(t, db.Write(ctx, func(tx *Tx) error {
			var err error
			if grant, err = tx.LeaseGroup(LeaseRequest{NodeID: node.ID, TTL: time.Minute, MaxAttempts: 5}); err != nil || grant == nil {
				return err
			}
			r, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: gid, NodeID: node.ID, Fence: grant.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 5})
			return err
		}))
		if grant == nil || r == nil {
			t.Fatalf("grant %+v, range %+v", grant, r)
		}
		// Under the claim this node owns it by, a peer's state is refused.
		if _, ok := foldIn(t, db, "a", foldGroup("g", 5), nil); ok {
			t.Fatal("a peer's state under this node's own claim was taken")
		}
		if _, found := foldPeerOf(t, db, gid); found {
			t.Fatal("a refused state left a peer row")
		}
		if _, ok := foldIn(t, db, "a", foldGroup("g", 6), foldRanges()); !ok {
			t.Fatal("a state under a newer claim was refused")
		}
		if owned, err := db.OwnedGroups(ctx); err != nil || len(owned) != 0 {
			t.Fatalf("owned = %v, %v; want none: the group was lost", owned, err)
		}
		err := db.Write(ctx, func(tx *Tx) error {
			return tx.Heartbeat(leasehold.GroupHolder{GroupID: gid, NodeID: node.ID, Fence: grant.Fence})
		})
		if !errors.Is(err, leasehold.ErrLeaseLost) {
			t.Fatalf("the local holder's heartbeat: %v, want lease lost", err)
		}
		if p, _ := foldPeerOf(t, db, gid); p.origin != "a" || p.rev != 6 || p.owned {
			t.Fatalf("peer = %+v, want a's under 6, disowned", p)
		}
		// The fence here never falls below the one the local lease used.
		var fence int64
		must(t, db.r.QueryRow(`SELECT fence FROM group_leases WHERE group_id = ?`, gid).Scan(&fence))
		if fence < grant.Fence {
			t.Fatalf("fence %d fell below the local lease's %d", fence, grant.Fence)
		}
	})
}

// TestFoldRanges: ranges are upserted by start (the origin's ids mean
// nothing here), their holder forgotten, and the lease-choice key follows,
// so the group is ready to lease once adopted; a bad range is invalid.
func TestFoldRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	id, _ := foldIn(t, db, "a", foldGroup("g", 1), foldRanges())
	got := rangesOf(t, db, id)
	if len(got) != 10 {
		t.Fatalf("%d ranges, want 10", len(got))
	}
	for i, w := range foldRanges() {
		g := got[i]
		if g.Start != w.Start || g.End != w.End || g.Next != w.Next || g.Status != w.Status || g.Attempts != w.Attempts || g.NodeID != nil {
			t.Errorf("range %d: got %+v, want %+v", w.Start, g, w.Range)
		}
	}
	if u := foldUrgentTail(t, db, id); u == nil || *u != leasehold.TailPriority {
		t.Fatalf("urgent_tail = %v, want %d", u, leasehold.TailPriority)
	}
	// Later: the leased range done, every other one done too, one more planned
	// at the top (the origin's ids have changed: they are not used).
	rs := foldRanges()
	for i := range rs {
		rs[i].ID += 1000
		rs[i].Status, rs[i].Next, rs[i].Headers, rs[i].UpdatedAt = leasehold.StatusDone, rs[i].End+1, 7, foldStart
	}
	g := foldGroup("g", 1)
	g.TailEnd = 1100
	if _, ok := foldIn(t, db, "a", g, rs); !ok {
		t.Fatal("refused")
	}
	got = rangesOf(t, db, id)
	if len(got) != 10 {
		t.Fatalf("%d ranges after the upsert, want 10", len(got))
	}
	for _, r := range got {
		if r.Status != leasehold.StatusDone || r.Next != r.End+1 {
			t.Errorf("range %d after the upsert: %+v, want done", r.Start, r)
		}
	}
	if u := foldUrgentTail(t, db, id); u != nil {
		t.Fatalf("urgent_tail = %d with nothing open, want NULL", *u)
	}
	top := []PeerRange{{Range: leasehold.Range{Start: 1001, End: 1100, Next: 1001, Status: leasehold.StatusPlanned, Priority: -2, UpdatedAt: foldStart}}}
	foldIn(t, db, "a", g, top)
	if got := rangesOf(t, db, id); len(got) != 11 {
		t.Fatalf("%d ranges after a new one, want 11", len(got))
	}
	if u := foldUrgentTail(t, db, id); u == nil || *u != -2 {
		t.Fatalf("urgent_tail = %v, want -2", u)
	}
	for name, bad := range map[string]PeerRange{
		"NextPastEnd": {Range: leasehold.Range{Start: 1, End: 100, Next: 102, Status: leasehold.StatusPlanned}},
		"EndBelow":    {Range: leasehold.Range{Start: 100, End: 1, Next: 100, Status: leasehold.StatusPlanned}},
		"Status":      {Range: leasehold.Range{Start: 1, End: 100, Next: 1, Status: "lost"}},
	} {
		err := db.Write(ctx, func(tx *Tx) error { return tx.FoldRanges(id, []PeerRange{bad}) })
		if !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

// TestOwnGroupAdopts: a peer's group owned here becomes this node's own
// (no peer row, leasable at once, an adoption event in the outbox); if
// the peer had a window snapshot this node has no copy of, what the window
// covered is planned again from the group's start.
func TestOwnGroupAdopts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		snapshot bool
	}{{"NoSnapshot", false}, {"PeerSnapshot", true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
			var node leasehold.Node
			must(t, db.Write(ctx, func(tx *Tx) error {
				var err error
				node, err = tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 4})
				return err
			}))
			g := foldGroup("g", 3)
			if tc.snapshot {
				g.Snapshot = &leasehold.Snapshot{Next: 201, Size: 10, SHA256: "ab", At: foldStart}
			}
			id, _ := foldIn(t, db, "a", g, foldRanges())
			lease := func() *leasehold.Grant {
				var grant *leasehold.Grant
				must(t, db.Write(ctx, func(tx *Tx) error {
					var err error
					grant, err = tx.LeaseGroup(LeaseRequest{NodeID: node.ID, TTL: time.Minute, MaxAttempts: 5})
					return err
				}))
				return grant
			}
			if grant := lease(); grant != nil {
				t.Fatalf("a peer's group was leased before it was owned: %+v", grant)
			}
			before := foldEvents(t, db)
			must(t, db.Write(ctx, func(tx *Tx) error { return tx.OwnGroup("g", 7, 5) }))
			if _, found := foldPeerOf(t, db, id); found {
				t.Fatal("the peer row outlived the adoption")
			}
			if ids, err := db.OwnGroupIDs(ctx, 0, 10); err != nil || len(ids) != 1 || ids[0] != id {
				t.Fatalf("own groups = %v, %v; want [%d]", ids, err, id)
			}
			var rev int64
			must(t, db.r.QueryRow(`SELECT claim_rev FROM groups WHERE id = ?`, id).Scan(&rev))
			if rev != 7 {
				t.Fatalf("claim_rev = %d, want 7", rev)
			}
			evs, err := db.Unsent(ctx, 0, 100)
			must(t, err)
			// The replan, if any, has its own event before.
			if len(evs) <= before || evs[len(evs)-1].Kind != EventGroupAdopted {
				t.Fatalf("outbox after adoption ends with %+v, want %s", evs[len(evs)-1], EventGroupAdopted)
			}
			got := rangesOf(t, db, id)
			for i, w := range foldRanges() {
				r := got[i]
				want := w.Status
				next := w.Next
				switch {
				case tc.snapshot && (w.Status == leasehold.StatusDone || w.Status == leasehold.StatusLeased):
					want, next = leasehold.StatusPlanned, w.Start // rule 2 with S = start
				case w.Status == leasehold.StatusLeased:
					want = leasehold.StatusPlanned // rule 2 without a snapshot: at its resume point
				}
				if r.Status != want || r.Next != next {
					t.Errorf("range %d after adoption: %s next %d, want %s next %d", w.Start, r.Status, r.Next, want, next)
				}
			}
			grant := lease()
			if grant == nil || grant.Group.ID != id {
				t.Fatalf("lease after adoption = %+v, want group %d", grant, id)
			}
			if grant.Fence <= g.Fence {
				t.Fatalf("fence %d, want past the peer's %d", grant.Fence, g.Fence)
			}
			// The peer's range in work is planned again at its resume point.
			var r *leasehold.Range
			must(t, db.Write(ctx, func(tx *Tx) error {
				var err error
				r, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: id, NodeID: node.ID, Fence: grant.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 5})
				return err
			}))
			wantStart, wantNext := int64(201), int64(250)
			if tc.snapshot {
				wantStart, wantNext = 1, 1
			}
			if r == nil || r.Start != wantStart || r.Next != wantNext {
				t.Fatalf("first range after adoption = %+v, want %d resumed at %d", r, wantStart, wantNext)
			}
		})
	}
	t.Run("Missing", func(t *testing.T) {
		db := openTest(t, "", Options{})
		err := db.Write(ctx, func(tx *Tx) error { return tx.OwnGroup("nope", 1, 5) })
		if !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("owning a missing group: %v, want not found", err)
		}
	})
}

// TestOutboxSent: Unsent reads what is not sent in order; MarkSent marks
// through an id; PruneSent removes only sent rows, at most limit ids of
// them from the oldest.
func TestOutboxSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	must(t, db.Write(ctx, func(tx *Tx) error {
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			if _, _, err := tx.PutGroup(name, GroupSpec{}); err != nil {
				return err
			}
		}
		return nil
	}))
	all, err := db.Unsent(ctx, 0, 100)
	must(t, err)
	if len(all) != 6 {
		t.Fatalf("%d unsent, want 6", len(all))
	}
	ids := func(evs []leasehold.Event) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.ID)
		}
		return out
	}
	if page, err := db.Unsent(ctx, all[1].ID, 2); err != nil || len(page) != 2 || page[0].ID != all[2].ID || page[1].ID != all[3].ID {
		t.Fatalf("Unsent after %d, 2 = %v, %v", all[1].ID, ids(page), err)
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.MarkSent(all[3].ID) }))
	left, err := db.Unsent(ctx, 0, 100)
	must(t, err)
	if len(left) != 2 || left[0].ID != all[4].ID {
		t.Fatalf("unsent after marking through %d = %v", all[3].ID, ids(left))
	}
	for name, want := range map[string]bool{"a": false, "d": false, "e": true, "f": true, "missing": false} {
		if got, err := db.Unpublished(ctx, name); err != nil || got != want {
			t.Errorf("Unpublished(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	prune := func(through int64, limit int) int64 {
		var n int64
		must(t, db.Write(ctx, func(tx *Tx) error {
			var err error
			n, err = tx.PruneSent(through, limit)
			return err
		}))
		return n
	}
	// The limit counts ids from the oldest: through the second one only.
	if n := prune(all[5].ID, 1); n != 2 {
		t.Fatalf("pruned %d with limit 1, want 2 (the oldest id and the next)", n)
	}
	if n := prune(all[5].ID, 100); n != 2 {
		t.Fatalf("pruned %d, want the 2 sent rows left", n)
	}
	rest, err := db.Events(ctx, 0, 100)
	must(t, err)
	if len(rest) != 2 || rest[0].ID != all[4].ID || rest[1].ID != all[5].ID {
		t.Fatalf("outbox after pruning = %v, want the unsent %d, %d", ids(rest), all[4].ID, all[5].ID)
	}
}

// TestFoldMark: no mark reads as ""/0; a mark is replaced whole (another
// incarnation may be lower), and lasts across reopening.
func TestFoldMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	db := openTest(t, path, Options{})
	if inc, seq, err := db.FoldMark(ctx); err != nil || inc != "" || seq != 0 {
		t.Fatalf("no mark = %q, %d, %v", inc, seq, err)
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.SetFoldMark("2026-01-01T00:00:00Z", 42) }))
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.SetFoldMark("2026-02-01T00:00:00Z", 7) }))
	if inc, seq, err := db.FoldMark(ctx); err != nil || inc != "2026-02-01T00:00:00Z" || seq != 7 {
		t.Fatalf("mark = %q, %d, %v; want the second", inc, seq, err)
	}
	db.Close()
	db = openTest(t, path, Options{})
	if inc, seq, err := db.FoldMark(ctx); err != nil || inc != "2026-02-01T00:00:00Z" || seq != 7 {
		t.Fatalf("mark after reopening = %q, %d, %v", inc, seq, err)
	}
}

// TestPeers: the peers list counts each origin's groups and worker nodes,
// keeps the newest event and position whatever order they fold in, tells
// the lag on this node's clock, and a rebuild drops the nodes the dump did
// not name and is counted.
func TestPeers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &testClock{now: foldStart}
	db := openTest(t, "", Options{NowFunc: clock.Now})
	foldIn(t, db, "a", foldGroup("g1", 1), nil)
	foldIn(t, db, "a", foldGroup("g2", 1), nil)
	foldIn(t, db, "b", foldGroup("h", 1), nil)
	at := foldStart.Add(-5 * time.Second)
	must(t, db.Write(ctx, func(tx *Tx) error {
		for _, n := range []string{"w1", "w2"} {
			if err := tx.FoldNode("a", FleetNode{Node: leasehold.Node{Name: n, PriorityMin: -1, PriorityMax: 5, Capacity: 2}}, 3); err != nil {
				return err
			}
		}
		if err := tx.FoldNode("b", FleetNode{Node: leasehold.Node{Name: "w1", Capacity: 1}}, 3); err != nil {
			return err
		}
		if err := tx.FoldPeer("a", "cat-a", 10, at, 100); err != nil {
			return err
		}
		// An older event folded late lowers nothing.
		if err := tx.FoldPeer("a", "cat-a", 9, at.Add(-time.Second), 90); err != nil {
			return err
		}
		return tx.FoldPeer("b", "cat-b", 3, at, 101)
	}))
	clock.now = foldStart.Add(10 * time.Second)
	peers, err := db.Peers(ctx)
	must(t, err)
	if len(peers) != 2 {
		t.Fatalf("peers = %+v, want a and b", peers)
	}
	a := peers[0]
	if a.Name != "a" || a.Catalog != "cat-a" || a.Folded != 100 || a.Groups != 2 || a.Nodes != 2 || a.Rebuilds != 0 ||
		a.LastEventAt == nil || !a.LastEventAt.Equal(at) || a.LagS != 15 {
		t.Fatalf("peer a = %+v", a)
	}
	if b := peers[1]; b.Name != "b" || b.Groups != 1 || b.Nodes != 1 || b.Folded != 101 {
		t.Fatalf("peer b = %+v", b)
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.PeerRebuilt("a", []string{"w2"}, 3) }))
	nodes, err := db.PeerNodes(ctx)
	must(t, err)
	if len(nodes) != 2 || nodes[0].Origin != "a" || nodes[0].Name != "w2" || nodes[1].Origin != "b" || nodes[1].Name != "w1" {
		t.Fatalf("peer nodes after a's rebuild = %+v, want a/w2 and b/w1", nodes)
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.FoldNodeGone("a", "w2", 3) }))
	peers, err = db.Peers(ctx)
	must(t, err)
	if peers[0].Rebuilds != 1 || peers[0].Nodes != 0 || peers[1].Rebuilds != 0 {
		t.Fatalf("peers after a's rebuild and node gone = %+v", peers)
	}
}

// TestOwnGroupAdoptsFromLocalSnapshot: a group adopted with a snapshot
// older than its folded progress (its newest window never left the old
// owner) is worked again from that snapshot: rule 2 at once, so a group
// whose ranges were all done is not left done behind an old window.
func TestOwnGroupAdoptsFromLocalSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	rs := foldRanges()
	for i := range rs {
		rs[i].Status, rs[i].Next, rs[i].Node = leasehold.StatusDone, rs[i].End+1, ""
	}
	id, _ := foldIn(t, db, "a", foldGroup("g", 3), rs)
	// The imported snapshot covers ids below 151.
	must(t, db.Write(ctx, func(tx *Tx) error {
		_, err := tx.execSQL(`UPDATE group_leases SET snapshot_next = 151, snapshot_size = 1, snapshot_sha256 = 'ab', snapshot_at = 0, snapshot_file = 1 WHERE group_id = ?`, id)
		return err
	}))
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.OwnGroup("g", 7, 5) }))
	for _, r := range rangesOf(t, db, id) {
		want, next := leasehold.StatusDone, r.End+1
		if r.End >= 151 {
			want, next = leasehold.StatusPlanned, max(r.Start, 151)
		}
		if r.Status != want || r.Next != next {
			t.Errorf("range %d..%d after adoption: %s next %d, want %s next %d", r.Start, r.End, r.Status, r.Next, want, next)
		}
	}
}

// TestPeerIndexes: Open decides peer sync's indexes from the outbox: a
// catalog opened alone (NoOutbox) has none, one opened with an outbox has
// them, and reopened alone drops them. They are made once and dropped
// once, and the publisher's read works once they are made, as one seek.
func TestPeerIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	hasIn := func(db *DB) bool {
		var n int
		must(t, db.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'ranges_group_updated'`).Scan(&n))
		return n == 1
	}
	for i, alone := range []bool{false, true} {
		db, err := Open(path, Options{NoOutbox: alone})
		if err != nil {
			t.Fatal(err)
		}
		got := hasIn(db)
		must(t, db.Close())
		if got == alone {
			t.Fatalf("open %d with NoOutbox %v: peer sync's index present %v", i, alone, got)
		}
	}
	db := openTest(t, path, Options{NoOutbox: true})
	has := func() bool { return hasIn(db) }
	if has() {
		t.Fatal("a catalog alone has peer sync's index")
	}
	for i, c := range []struct {
		on   bool
		want int
	}{{true, 1}, {true, 0}, {false, 1}, {false, 0}, {true, 1}} {
		changed, err := db.PeerIndexes(ctx, c.on)
		if err != nil || len(changed) != c.want {
			t.Fatalf("step %d: PeerIndexes(%v) = %v, %v; want %d changed", i, c.on, changed, err, c.want)
		}
		if has() != c.on {
			t.Fatalf("step %d: index present %v after PeerIndexes(%v)", i, has(), c.on)
		}
	}
	var g leasehold.Group
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		if g, _, err = tx.PutGroup("alt.indexed", GroupSpec{}); err != nil {
			return err
		}
		_, err = tx.PlanTail(g.ID, 5000)
		return err
	}))
	if _, ranges, _, err := db.OwnState(ctx, g.ID, time.Time{}); err != nil || len(ranges) == 0 {
		t.Fatalf("OwnState with the index made: %d ranges, %v", len(ranges), err)
	}
	var plan string
	rows, err := db.r.Query(`EXPLAIN QUERY PLAN SELECT id FROM ranges INDEXED BY ranges_group_updated WHERE group_id = ? AND updated_at >= ?`, g.ID, 0)
	must(t, err)
	for rows.Next() {
		var id, parent, notused int
		var detail string
		must(t, rows.Scan(&id, &parent, &notused, &detail))
		plan += detail
	}
	rows.Close()
	if !strings.Contains(plan, "SEARCH") {
		t.Errorf("the publisher's read is %q, not a seek", plan)
	}
}

// TestNoOutbox: a node alone writes no outbox rows; opening it alone
// empties what an earlier run left and leaves one outbox_pruned, once;
// opened for peer sync again, it writes events after that one, with ids
// never reused.
func TestNoOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	put := func(db *DB, name string) {
		must(t, db.Write(ctx, func(tx *Tx) error { _, _, err := tx.PutGroup(name, GroupSpec{}); return err }))
	}
	db := openTest(t, path, Options{})
	put(db, "a")
	put(db, "b")
	before, err := db.Events(ctx, 0, 100)
	must(t, err)
	if len(before) != 2 {
		t.Fatalf("%d events with the outbox on, want 2", len(before))
	}
	db.Close()
	lastOn := before[1].ID
	for round := range 2 {
		db = openTest(t, path, Options{NoOutbox: true})
		put(db, fmt.Sprintf("alone%d", round))
		evs, err := db.Events(ctx, 0, 100)
		must(t, err)
		if len(evs) != 1 || evs[0].Kind != EventOutboxPruned || evs[0].ID <= lastOn {
			t.Fatalf("round %d: the outbox of a node alone holds %+v, want one %s after id %d", round, evs, EventOutboxPruned, lastOn)
		}
		if round == 1 && evs[0].ID != before[0].ID {
			t.Fatalf("opened alone again, the outbox was pruned again: id %d, then %d", before[0].ID, evs[0].ID)
		}
		before = evs
		db.Close()
	}
	db = openTest(t, path, Options{})
	put(db, "c")
	evs, err := db.Events(ctx, 0, 100)
	must(t, err)
	if len(evs) != 2 || evs[0].Kind != EventOutboxPruned || evs[1].Kind != EventGroupCreated || evs[1].ID <= evs[0].ID {
		t.Fatalf("with the outbox on again: %+v", evs)
	}
}

// TestFoldReplaysEarlierOwnersPlans: a late event of an earlier owner of a
// group owned here is refused as state, but the tail and history it had
// planned (and acknowledged) are planned here too, once: plans are facts,
// and the fleet converges on this owner's view of them. Its ranges' work
// is not taken: the new ranges are planned from their start.
func TestFoldReplaysEarlierOwnersPlans(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	var gid int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		g, _, err := tx.PutGroup("g", GroupSpec{RangeSize: ptr(int64(100)), Start: ptr(int64(501))})
		if err != nil {
			return err
		}
		gid = g.ID
		if _, err := tx.PlanTail(g.ID, 1000); err != nil {
			return err
		}
		return tx.OwnGroup("g", 7, 5)
	}))
	late := foldGroup("g", 6) // an earlier claim
	late.TailEnd, late.HistoryFloor = 1200, 301
	for range 2 {
		must(t, db.Write(ctx, func(tx *Tx) error {
			_, ok, err := tx.FoldGroup("a", late, 5)
			if ok {
				t.Error("a late event of an earlier owner was taken as state")
			}
			return err
		}))
	}
	g, err := db.GroupByName(ctx, "g")
	if err != nil || g.TailEnd != 1200 || g.HistoryFloor != 301 {
		t.Fatalf("group after the replay = %+v, %v; want tail end 1200, history floor 301", g, err)
	}
	rs, err := db.Ranges(ctx, gid, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	for _, r := range rs {
		if r.Start > 1000 || r.Start < 501 {
			if r.Status != leasehold.StatusPlanned || r.Next != r.Start {
				t.Errorf("replayed range %+v, want planned from its start", r)
			}
			starts = append(starts, r.Start)
		}
	}
	slices.Sort(starts)
	if fmt.Sprint(starts) != "[301 401 1001 1101]" {
		t.Errorf("replayed ranges start at %v, want [301 401 1001 1101]", starts)
	}
	// Not owned here any more (let go, or another node's now): a later
	// late event still brings its plans, as it does at every node.
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.DisownGroup("g", 5) }))
	late.TailEnd = 1400
	must(t, db.Write(ctx, func(tx *Tx) error { _, _, err := tx.FoldGroup("a", late, 5); return err }))
	if g, err := db.GroupByName(ctx, "g"); err != nil || g.TailEnd != 1400 {
		t.Fatalf("group not owned after a late event = %+v, %v; want tail end 1400", g, err)
	}
}

// TestFoldSameClaimKeepsRanges: a state folded again under the claim the
// group is already held under (an older message folded after a rebuild)
// never removes ranges, even where its plan is behind them; the first
// state under a newer claim does remove those outside its plan.
func TestFoldSameClaimKeepsRanges(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	late := foldGroup("g", 3)
	late.TailEnd = 1000
	var gid int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		id, _, err := tx.FoldGroup("a", late, 5)
		gid = id
		if err != nil {
			return err
		}
		return tx.FoldRanges(id, []PeerRange{{Range: leasehold.Range{Start: 1, End: 500, Next: 1, Status: leasehold.StatusPlanned, UpdatedAt: time.Now()}},
			{Range: leasehold.Range{Start: 501, End: 1000, Next: 501, Status: leasehold.StatusPlanned, UpdatedAt: time.Now()}}})
	}))
	count := func() int {
		rs, err := db.Ranges(ctx, gid, "", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}
	older := late
	older.TailEnd = 500
	must(t, db.Write(ctx, func(tx *Tx) error { _, _, err := tx.FoldGroup("a", older, 5); return err }))
	if n := count(); n != 2 {
		t.Fatalf("ranges after an older state under the same claim: %d, want 2", n)
	}
	newer := foldGroup("g", 4)
	newer.TailEnd = 500
	must(t, db.Write(ctx, func(tx *Tx) error { _, _, err := tx.FoldGroup("b", newer, 5); return err }))
	if n := count(); n != 1 {
		t.Fatalf("ranges after a newer claim's state planned to 500: %d, want 1", n)
	}
}

// TestReplayPlansAroundRanges: a late plan replayed over a copy whose tail
// an older state under the same claim set below ranges it keeps (the long
// fault run's "UNIQUE constraint failed: ranges.group_id, ranges.start_id")
// plans only the ids no range covers: no collision, no overlap, no hole,
// and the tail covers every range.
func TestReplayPlansAroundRanges(t *testing.T) {
	t.Parallel()
	pr := func(s, e int64) PeerRange {
		return PeerRange{Range: leasehold.Range{Start: s, End: e, Next: s, Status: leasehold.StatusPlanned, UpdatedAt: foldStart}}
	}
	for _, tc := range []struct {
		name   string
		tail   int64       // the older state's tail, under the same claim
		kept   []PeerRange // the ranges the copy has (the first always 1..500)
		high   int64       // the late plan replayed
		want   [][2]int64
		wantTo int64
	}{
		{"Contiguous", 500, []PeerRange{pr(501, 1000)}, 1500,
			[][2]int64{{1, 500}, {501, 1000}, {1001, 1500}}, 1500},
		{"Hole", 500, []PeerRange{pr(501, 600), pr(801, 1000)}, 1200,
			[][2]int64{{1, 500}, {501, 600}, {601, 800}, {801, 1000}, {1001, 1200}}, 1200},
		{"Straddles", 520, []PeerRange{pr(501, 1000)}, 1200,
			[][2]int64{{1, 500}, {501, 1000}, {1001, 1200}}, 1200},
		{"PastThePlan", 500, []PeerRange{pr(501, 1000)}, 800,
			[][2]int64{{1, 500}, {501, 1000}}, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t, "", Options{})
			ctx := context.Background()
			g := foldGroup("g", 3)
			g.RangeSize = 500
			var gid int64
			must(t, db.Write(ctx, func(tx *Tx) error {
				id, _, err := tx.FoldGroup("a", g, 5)
				gid = id
				if err != nil {
					return err
				}
				return tx.FoldRanges(id, append([]PeerRange{pr(1, 500)}, tc.kept...))
			}))
			older := g
			older.TailEnd = tc.tail
			must(t, db.Write(ctx, func(tx *Tx) error { _, _, err := tx.FoldGroup("a", older, 5); return err }))
			high := tc.high
			if err := db.Write(ctx, func(tx *Tx) error { return tx.ReplayLatePlan("g", &high, nil) }); err != nil {
				t.Fatalf("replaying a late plan to %d: %v", high, err)
			}
			rs, err := db.Ranges(ctx, gid, "", 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			var got [][2]int64
			for _, r := range rs {
				got = append(got, [2]int64{r.Start, r.End})
			}
			slices.SortFunc(got, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("ranges %v, want %v", got, tc.want)
			}
			gr, err := db.GroupByName(ctx, "g")
			if err != nil {
				t.Fatal(err)
			}
			if gr.TailEnd != tc.wantTo {
				t.Errorf("tail end %d, want %d", gr.TailEnd, tc.wantTo)
			}
		})
	}
}

// TestOwnStates: a full dump's page reads, in id order, each of this
// node's own groups with all its ranges, exactly as OwnState reads it
// alone (water marks included: they travel with the group, rule 11), and
// passes over a peer's group and its ranges, inside the page's id span
// or not; pages follow on from the last id.
func TestOwnStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	if _, err := db.PeerIndexes(ctx, true); err != nil { // OwnState reads by them
		t.Fatal(err)
	}
	var own []int64
	for i := range 5 {
		if i == 2 {
			id, _ := foldIn(t, db, "a", foldGroup("peer.g", 3), foldRanges())
			if id == 0 {
				t.Fatal("the peer's group was not folded")
			}
		}
		must(t, db.Write(ctx, func(tx *Tx) error {
			g, _, err := tx.PutGroup(fmt.Sprintf("own.g%d", i), GroupSpec{})
			if err != nil {
				return err
			}
			own = append(own, g.ID)
			if i == 3 {
				return nil // a group with no ranges
			}
			if _, err := tx.PlanTail(g.ID, int64(1000*(i+1))); err != nil {
				return err
			}
			_, err = tx.ReportWatermarks(g.ID, int64(i+1), int64(1000*(i+1)))
			return err
		}))
	}
	var got []OwnGroupState
	for after := int64(0); ; {
		page, err := db.OwnStates(ctx, after, 3) // the peer's group inside the first page's span
		must(t, err)
		got = append(got, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Group.ID
	}
	if len(got) != len(own) {
		t.Fatalf("pages hold %d groups, want the %d own ones", len(got), len(own))
	}
	for i, s := range got {
		g, ranges, mirrored, err := db.OwnState(ctx, own[i], time.Time{})
		must(t, err)
		if mirrored || s.Group.ID != own[i] {
			t.Fatalf("page entry %d is group %d, want own group %d", i, s.Group.ID, own[i])
		}
		if !reflect.DeepEqual(s.Group, g) || !reflect.DeepEqual(s.Ranges, ranges) {
			t.Fatalf("group %d paged:\n%+v %d ranges\nalone:\n%+v %d ranges", own[i], s.Group, len(s.Ranges), g, len(ranges))
		}
		if i != 3 && (len(s.Ranges) == 0 || s.Group.Low == nil || *s.Group.Low != int64(i+1) || s.Group.MarksAt == nil) {
			t.Fatalf("group %d: %d ranges, marks %v/%v; want its plan and low mark %d", own[i], len(s.Ranges), s.Group.Low, s.Group.MarksAt, i+1)
		}
	}
}

// TestFoldGroupsRanges: many groups' ranges folded in one call, in
// statements of many rows (64, 8 and 1 here: 2 × 75 ranges), leave the
// catalog exactly as folding them one range at a time does: the same
// rows, lease-choice keys and tallies, on the first fold and on an upsert
// over it, with an error that travels with its range; a bad range
// anywhere refuses the whole call.
func TestFoldGroupsRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batched := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	alone := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	plan := func(name string, status leasehold.RangeStatus) []PeerRange {
		var rs []PeerRange
		for i := range int64(75) {
			r := PeerRange{Range: leasehold.Range{Start: i*10 + 1, End: i*10 + 10, Next: i*10 + 1, Status: status, Priority: i%3 - 1,
				Attempts: i % 4, RuleVersion: 2, UpdatedAt: foldStart.Add(time.Duration(i) * time.Millisecond)}}
			if status == leasehold.StatusDone {
				r.Next, r.Headers = r.End+1, i
			}
			if i == 40 {
				msg := `refused: "481" \ at ` + name
				at := foldStart.Add(-time.Second)
				r.Status, r.LastError, r.LastErrorAt = leasehold.StatusFailed, &msg, &at
			}
			rs = append(rs, r)
		}
		return rs
	}
	state := func(db *DB) string {
		var b strings.Builder
		rows, err := db.r.Query(`SELECT g.name, g.urgent_tail, g.urgent_hist, r.start_id, r.end_id, r.next_id, r.status, r.priority, r.attempts,
			r.rule_version, r.headers, r.updated_at, r.last_error, r.last_error_at FROM ranges r JOIN groups g ON g.id = r.group_id ORDER BY g.name, r.start_id`)
		must(t, err)
		defer rows.Close()
		for rows.Next() {
			var v [14]any
			p := make([]any, len(v))
			for i := range v {
				p[i] = &v[i]
			}
			must(t, rows.Scan(p...))
			fmt.Fprintln(&b, v[:]...)
		}
		tallies, err := db.Tallies(ctx)
		must(t, err)
		fmt.Fprintf(&b, "%+v", tallies)
		return b.String()
	}
	for _, status := range []leasehold.RangeStatus{leasehold.StatusPlanned, leasehold.StatusDone} {
		var gs []GroupRanges
		for _, name := range []string{"g1", "g2"} {
			id, _ := foldIn(t, batched, "a", foldGroup(name, 1), nil)
			gs = append(gs, GroupRanges{GroupID: id, Ranges: plan(name, status)})
			aid, _ := foldIn(t, alone, "a", foldGroup(name, 1), nil)
			for _, r := range plan(name, status) {
				must(t, alone.Write(ctx, func(tx *Tx) error { return tx.FoldRanges(aid, []PeerRange{r}) }))
			}
		}
		must(t, batched.Write(ctx, func(tx *Tx) error { return tx.FoldGroupsRanges(gs) }))
		if b, a := state(batched), state(alone); b != a || !strings.Contains(b, `"481" \`) {
			t.Fatalf("%s: folded in one call:\n%s\nfolded one at a time:\n%s", status, b, a)
		}
	}
	before := state(batched)
	bad := []GroupRanges{{GroupID: 1, Ranges: plan("g1", leasehold.StatusPlanned)}}
	bad[0].Ranges[70].Next = bad[0].Ranges[70].End + 2
	err := batched.Write(ctx, func(tx *Tx) error { return tx.FoldGroupsRanges(bad) })
	if !errors.Is(err, leasehold.ErrInvalid) || state(batched) != before {
		t.Fatalf("a bad range at the end: %v, catalog changed %v; want invalid and nothing changed", err, state(batched) != before)
	}
}

// TestOwnGroupFenceLead: a group taken over from a peer is leased at a
// fence FenceLead past the highest folded (4): above any fence the peer
// may have granted without its event reaching this node, which the
// shared index, comparing fences, needs (a stale holder's late writes
// refused). A group this node made itself starts at 1.
func TestOwnGroupFenceLead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	foldIn(t, db, "a", foldGroup("g", 3), foldRanges())
	var node leasehold.Node
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		if node, err = tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 4}); err != nil {
			return err
		}
		return tx.OwnGroup("g", 7, 5)
	}))
	var grant *leasehold.Grant
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		grant, err = tx.LeaseGroup(LeaseRequest{NodeID: node.ID, TTL: time.Minute, MaxAttempts: 5})
		return err
	}))
	if grant == nil || grant.Fence != 4+FenceLead+1 {
		t.Fatalf("lease after a takeover: %+v; want fence %d", grant, 4+FenceLead+1)
	}
}
