package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestOwnership: only owned groups are leased. A group the lease's
// OwnsFunc refuses is disowned and passed over, and stays out of the
// choice; DisownGroup takes a held group from its holder at once (lease
// lost, its range planned again at its resume point); OwnGroup brings it
// back.
func TestOwnership(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db := openTest(t, "", Options{NowFunc: clock.Now})
	ctx := context.Background()
	var node leasehold.Node
	ids := map[string]int64{}
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		if node, err = tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 8}); err != nil {
			return err
		}
		for _, name := range []string{"a", "b", "c"} {
			g, _, err := tx.PutGroup(name, GroupSpec{RangeSize: ptr(int64(100))})
			if err != nil {
				return err
			}
			ids[name] = g.ID
			if _, err := tx.PlanTail(g.ID, 1000); err != nil {
				return err
			}
		}
		return nil
	}))
	lease := func(owns func(string, uint64) bool) *leasehold.Grant {
		t.Helper()
		var g *leasehold.Grant
		must(t, db.Write(ctx, func(tx *Tx) error {
			var err error
			g, err = tx.LeaseGroup(LeaseRequest{NodeID: node.ID, TTL: time.Minute, MaxAttempts: 5, OwnsFunc: owns})
			return err
		}))
		return g
	}
	// "a" is the first choice; refused, it is disowned and "b" is leased.
	g := lease(func(name string, _ uint64) bool { return name != "a" })
	if g == nil || g.Group.Name != "b" {
		t.Fatalf("lease with a refused = %+v, want b", g)
	}
	owned, err := db.OwnedGroups(ctx)
	if err != nil || len(owned) != 2 || owned[0] != "b" || owned[1] != "c" {
		t.Fatalf("owned = %v, %v; want [b c]", owned, err)
	}
	// Without OwnsFunc, "a" stays out: "c" comes next, then nothing.
	if g := lease(nil); g == nil || g.Group.Name != "c" {
		t.Fatalf("second lease = %+v, want c", g)
	}
	if g := lease(nil); g != nil {
		t.Fatalf("third lease = %+v, want nothing (a is disowned)", g)
	}
	// Disowning a held group ends its lease at once.
	var r *leasehold.Range
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		r, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: node.ID, Fence: g.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 5})
		return err
	}))
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.DisownGroup("b", 5) }))
	err = db.Write(ctx, func(tx *Tx) error {
		_, err := tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: node.ID, Fence: g.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 5})
		return err
	})
	if !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("holder call after disowning: %v, want lease lost", err)
	}
	got, err := db.Range(ctx, r.ID)
	if err != nil || got.Status != leasehold.StatusPlanned || got.NodeID != nil {
		t.Fatalf("range after disowning = %+v, %v; want planned, no node", got, err)
	}
	// Owned again, "a" and "b" are leased again.
	must(t, db.Write(ctx, func(tx *Tx) error {
		if err := tx.OwnGroup("a", 7, 5); err != nil {
			return err
		}
		return tx.OwnGroup("b", 8, 5)
	}))
	for _, want := range []string{"a", "b"} {
		if g := lease(nil); g == nil || g.Group.Name != want {
			t.Fatalf("lease after owning again = %+v, want %s", g, want)
		}
	}
	err = db.Write(ctx, func(tx *Tx) error { return tx.DisownGroup("nope", 5) })
	if !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("disowning a missing group: %v, want not found", err)
	}
}

// TestOwnGroupClaimWonAnew: a lease is granted under the claim revision the
// group is owned by; when the node wins the group's claim anew (it lost the
// claim, another node may have leased the group meanwhile, and it won it
// back), OwnGroup ends that lease (lease lost, range planned again) and
// owns the group at the new revision. Owning again at the same revision
// changes nothing.
func TestOwnGroupClaimWonAnew(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	var node leasehold.Node
	var gid int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		if node, err = tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 8}); err != nil {
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
		return tx.OwnGroup("g", 3, 5)
	}))
	var g *leasehold.Grant
	var r *leasehold.Range
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		if g, err = tx.LeaseGroup(LeaseRequest{NodeID: node.ID, TTL: time.Minute, MaxAttempts: 5,
			OwnsFunc: func(string, uint64) bool { return true }}); err != nil || g == nil {
			return err
		}
		r, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: gid, NodeID: node.ID, Fence: g.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 5})
		return err
	}))
	if g == nil || r == nil {
		t.Fatalf("grant %+v, range %+v", g, r)
	}
	must(t, db.Write(ctx, func(tx *Tx) error {
		if name, owned, rev, err := tx.GroupClaim(gid); err != nil || name != "g" || !owned || rev != 3 {
			t.Errorf("claim = %s %v %d, %v; want g owned at 3", name, owned, rev, err)
		}
		return tx.OwnGroup("g", 3, 5)
	}))
	must(t, db.Write(ctx, func(tx *Tx) error {
		return tx.Heartbeat(leasehold.GroupHolder{GroupID: gid, NodeID: node.ID, Fence: g.Fence})
	}))
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.OwnGroup("g", 9, 5) }))
	err := db.Write(ctx, func(tx *Tx) error {
		return tx.Heartbeat(leasehold.GroupHolder{GroupID: gid, NodeID: node.ID, Fence: g.Fence})
	})
	if !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Fatalf("heartbeat after the claim was won anew: %v, want lease lost", err)
	}
	got, err := db.Range(ctx, r.ID)
	if err != nil || got.Status != leasehold.StatusPlanned || got.NodeID != nil {
		t.Fatalf("range after the claim was won anew = %+v, %v; want planned, no node", got, err)
	}
	must(t, db.Write(ctx, func(tx *Tx) error {
		if _, _, rev, err := tx.GroupClaim(gid); err != nil || rev != 9 {
			t.Errorf("claim rev = %d, %v; want 9", rev, err)
		}
		return nil
	}))
}
