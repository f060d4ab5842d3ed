package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestVisitor: a token registered at peer a (its hash folded from a's
// node) lets its node in here as a visitor that leases like a node of
// this node's own, is listed among the nodes with its home, and
// follows a's events: a pause, a new token (the old one refused at once,
// remembered authentication or not), a deletion (what it held released),
// a hash no longer sent. Changes made here are conflicts, and a name
// registered here keeps a peer's node of that name out, and takes the
// time that node was last seen at the peer.
func TestVisitor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newFailWorld(t, "g1")
	db := w.db
	h1, h2 := sha256.Sum256([]byte("one")), sha256.Sum256([]byte("two"))
	node := func(name string, hash []byte) FleetNode {
		return FleetNode{Node: leasehold.Node{Name: name, PriorityMin: -10, PriorityMax: 10, Capacity: 2}, TokenHash: hash}
	}
	fold := func(n FleetNode) {
		t.Helper()
		must(t, w.write(func(tx *Tx) error { return tx.FoldNode("a", n, failMaxAttempts) }))
	}
	refused := func(hash []byte) {
		t.Helper()
		if a, err := db.NodeByTokenHash(ctx, hash); !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("NodeByTokenHash = %+v, %v; want not found", a, err)
		}
		if a, err := db.Visit(ctx, hash); !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("Visit = %+v, %v; want not found", a, err)
		}
	}

	// A stranger's token: not found, and no write.
	before := db.Stats().Writes
	refused(h1[:])
	if got := db.Stats().Writes; got != before {
		t.Fatalf("an unknown token cost %d writes", got-before)
	}

	fold(node("wa", h1[:]))
	a, err := db.Visit(ctx, h1[:])
	if err != nil || a.Name != "wa" || a.Home != "a" {
		t.Fatalf("Visit = %+v, %v; want wa of a", a, err)
	}
	for range 2 { // the second answered from memory
		if got, err := db.NodeByTokenHash(ctx, h1[:]); err != nil || got.ID != a.ID || got.Home != "a" {
			t.Fatalf("NodeByTokenHash = %+v, %v; want the visitor %d", got, err, a.ID)
		}
	}
	if ns, err := db.Nodes(ctx); err != nil || len(ns) != 2 || ns[0].Name != "w" || ns[0].Home != "" || ns[1].Name != "wa" || ns[1].Home != "a" {
		t.Fatalf("Nodes = %+v, %v; want w, registered here, and wa, a visitor from a", ns, err)
	}
	if f, home, err := db.FleetNode(ctx, a.ID); err != nil || home != "a" || f.TokenHash != nil {
		t.Fatalf("FleetNode = %+v, %q, %v; want home a, no hash published", f, home, err)
	}
	var g *leasehold.Grant
	must(t, w.write(func(tx *Tx) error {
		var err error
		g, err = tx.LeaseGroup(LeaseRequest{NodeID: a.ID, TTL: 60e9, MaxAttempts: failMaxAttempts})
		return err
	}))
	if g == nil {
		t.Fatal("the visitor was granted nothing")
	}

	// Its home's to change.
	for what, change := range map[string]func(tx *Tx) error{
		"pause":  func(tx *Tx) error { _, err := tx.SetPaused(a.ID, true, "x"); return err },
		"change": func(tx *Tx) error { _, err := tx.ChangeNode(a.ID, NodeChange{Capacity: ptr(int64(1))}); return err },
		"token":  func(tx *Tx) error { return tx.SetNodeToken(a.ID, h2[:]) },
		"delete": func(tx *Tx) error { return tx.DeleteNode(a.ID, failMaxAttempts, true) },
	} {
		if err := w.write(change); leasehold.KindOf(err) != leasehold.KindConflict {
			t.Errorf("%s here: %v; want a conflict", what, err)
		}
	}

	// Paused at a, with a new token: the old one is refused.
	paused := node("wa", h2[:])
	paused.Paused, paused.PausedBy = true, "ops"
	fold(paused)
	refused(h1[:])
	if got, err := db.NodeByTokenHash(ctx, h2[:]); err != nil || got.ID != a.ID {
		t.Fatalf("the new token: %+v, %v; want the visitor %d", got, err, a.ID)
	}
	if n, err := db.Node(ctx, a.ID); err != nil || !n.Paused || n.PausedBy != "ops" {
		t.Fatalf("the visitor after a's pause: %+v, %v", n, err)
	}

	// Deleted at a: refused, and its group released here.
	must(t, w.write(func(tx *Tx) error { return tx.FoldNodeGone("a", "wa", failMaxAttempts) }))
	refused(h2[:])
	if d, err := db.GroupDetail(ctx, "g1"); err != nil || d.Lease != nil {
		t.Fatalf("g1 after the visitor's deletion: %+v, %v; want released", d.Lease, err)
	}

	// A hash no longer sent (a's build went back): the visitor goes.
	fold(node("wb", h1[:]))
	if _, err := db.Visit(ctx, h1[:]); err != nil {
		t.Fatal(err)
	}
	fold(node("wb", nil))
	refused(h1[:])

	// w, registered here, working at b (b's visitor): seen there is seen.
	away := node("w", nil)
	seen := w.clock.Now().Add(time.Hour)
	away.LastSeenAt = &seen
	must(t, w.write(func(tx *Tx) error { return tx.FoldNode("b", away, failMaxAttempts) }))
	if n, err := db.Node(ctx, w.node); err != nil || n.LastSeenAt == nil || !n.LastSeenAt.Equal(seen) {
		t.Fatalf("w after b's event of it: last seen %v, %v; want %v", n.LastSeenAt, err, seen)
	}

	// A name registered here keeps a's node of that name out.
	fold(node("w", h2[:]))
	if a, err := db.Visit(ctx, h2[:]); !errors.Is(err, leasehold.ErrUnauthorized) || !errors.Is(err, ErrNameTaken) {
		t.Fatalf("a's w with w registered here: %+v, %v; want unauthorized", a, err)
	}
}
