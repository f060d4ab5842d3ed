package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestRememberedAuthEndsWithDeletion: a node's authentication is
// remembered, and its deletion ends it before the deletion is answered.
func TestRememberedAuthEndsWithDeletion(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	hash := []byte("0123456789abcdef0123456789abcdef")
	var id int64
	if err := db.Write(ctx, func(tx *Tx) error {
		n, err := tx.CreateNode(NewNode{Name: "w", TokenHash: hash, PriorityMin: -10, PriorityMax: 10, Capacity: 1})
		id = n.ID
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second lookup is answered from memory
		if a, err := db.NodeByTokenHash(ctx, hash); err != nil || a.ID != id {
			t.Fatalf("before deletion: got %+v, %v; want node %d", a, err, id)
		}
	}
	if err := db.Write(ctx, func(tx *Tx) error { return tx.DeleteNode(id, 3, false) }); err != nil {
		t.Fatal(err)
	}
	if a, err := db.NodeByTokenHash(ctx, hash); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after deletion: got %+v, %v; want not found", a, err)
	}
}

// TestTouchNodeRemembered: a node's visits are written at most once a
// second, and a visit is never left unrecorded for longer, including when
// the catalog holds a visit this process did not write (a restart).
func TestTouchNodeRemembered(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "catalog.db")
	now := time.UnixMilli(1_800_000_000_000)
	clock := func() time.Time { return now }
	ctx := context.Background()
	db := openTest(t, path, Options{NowFunc: clock})
	var id int64
	if err := db.Write(ctx, func(tx *Tx) error {
		n, err := tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("h"), PriorityMin: -10, PriorityMax: 10, Capacity: 1})
		id = n.ID
		return err
	}); err != nil {
		t.Fatal(err)
	}
	touch := func(db *DB) {
		t.Helper()
		if err := db.Write(ctx, func(tx *Tx) error { return tx.TouchNode(id) }); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(db *DB) int64 {
		t.Helper()
		var v int64
		if err := db.r.QueryRow(`SELECT last_seen_at FROM nodes WHERE id = ?`, id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	start := now.UnixMilli()
	for _, step := range []struct {
		advance time.Duration
		want    int64
	}{{0, start}, {500 * time.Millisecond, start}, {1100 * time.Millisecond, start + 1600}, {300 * time.Millisecond, start + 1600}} {
		now = now.Add(step.advance)
		touch(db)
		if got := seen(db); got != step.want {
			t.Fatalf("at +%dms: last_seen_at = +%d, want +%d", now.UnixMilli()-start, got-start, step.want-start)
		}
	}
	// A new process finds a visit 300 ms old it did not write; its first
	// touch leaves it, and a touch 1.1 s after the recorded one writes.
	db.Close()
	db2 := openTest(t, path, Options{NowFunc: clock})
	touch(db2)
	now = now.Add(800 * time.Millisecond)
	touch(db2)
	if got, want := seen(db2), now.UnixMilli(); got != want {
		t.Fatalf("after reopening: last_seen_at = +%d, want +%d", got-start, want-start)
	}
}
