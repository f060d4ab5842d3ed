package store

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestGroupTombstone: a group its owner deleted under claim 5 is deleted
// here, and no late state of it makes it again: not its owner's under
// that claim, not an earlier owner's (claim 4), not a dump's; a group
// made anew under a later claim (6) is a group again.
func TestGroupTombstone(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	if _, ok := foldIn(t, db, "b", foldGroup("g", 5), foldRanges()); !ok {
		t.Fatal("b's group was refused")
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.FoldGroupGone("b", "g", 5) }))
	gone := func(why string) {
		t.Helper()
		if _, err := db.GroupByName(ctx, "g"); leasehold.KindOf(err) != leasehold.KindNotFound {
			t.Fatalf("g %s: %v, want not found", why, err)
		}
	}
	gone("after its deletion")
	for _, late := range []struct {
		origin string
		rev    uint64
	}{{"b", 5}, {"a", 4}} {
		if _, ok := foldIn(t, db, late.origin, foldGroup("g", late.rev), foldRanges()); ok {
			t.Errorf("a late state of g from %s under claim %d was taken", late.origin, late.rev)
		}
		gone("after a late event")
	}
	must(t, db.Write(ctx, func(tx *Tx) error {
		return tx.FoldPeerGroups("a", []PeerGroupState{{Group: foldGroup("g", 4), Ranges: foldRanges()}}, 5)
	}))
	gone("after a dump of an earlier owner")
	if _, ok := foldIn(t, db, "a", foldGroup("g", 6), foldRanges()); !ok {
		t.Fatal("g made anew under claim 6 was refused")
	}
	// A deletion of the old one folded late leaves the new one.
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.FoldGroupGone("b", "g", 5) }))
	if _, err := db.GroupByName(ctx, "g"); err != nil {
		t.Fatalf("g made anew, after a late deletion of the old: %v", err)
	}
}

// TestRemoveMember: a removed member's peer row and worker nodes go, and
// so does its worker's visitor here; approved, the record is gone, and
// approving twice is not found.
func TestRemoveMember(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	hash := make([]byte, 32)
	hash[0] = 7
	must(t, db.Write(ctx, func(tx *Tx) error {
		n := FleetNode{Node: leasehold.Node{Name: "wc", Capacity: 1, Kinds: []string{leasehold.DefaultSourceKind}}, TokenHash: hash}
		if err := tx.FoldNode("c", n, 5); err != nil {
			return err
		}
		return tx.FoldPeer("c", "cat", 1, foldStart, 1)
	}))
	if _, err := db.Visit(ctx, hash); err != nil {
		t.Fatalf("c's worker let in: %v", err)
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.RemoveMember("c", "a", 5) }))
	if _, err := db.Visit(ctx, hash); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("c's worker after c's removal: %v, want not found", err)
	}
	if _, err := db.NodeByTokenHash(ctx, hash); err == nil {
		t.Error("c's worker's visitor is still here")
	}
	if ps, err := db.Peers(ctx); err != nil || len(ps) != 0 {
		t.Errorf("peers after c's removal: %+v, %v; want none", ps, err)
	}
	if rm, err := db.RemovedMembers(ctx); err != nil || !rm["c"] {
		t.Errorf("removed members: %v, %v; want c", rm, err)
	}
	must(t, db.Write(ctx, func(tx *Tx) error { return tx.ApproveMember("c") }))
	err := db.Write(ctx, func(tx *Tx) error { return tx.ApproveMember("c") })
	if leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("approving c twice: %v, want not found", err)
	}
}
