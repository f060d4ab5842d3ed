package store

import (
	"context"
	"errors"
	"testing"

	"leasehold"
)

// TestRememberedAuthEndsWithDeletion: a node's authentication is
// remembered, and its deletion ends it before the deletion is answered.
func TestRememberedAuthEndsWithDeletion(t *testing.T) {
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
	if err := db.Write(ctx, func(tx *Tx) error { return tx.DeleteNode(id, 3) }); err != nil {
		t.Fatal(err)
	}
	if a, err := db.NodeByTokenHash(ctx, hash); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after deletion: got %+v, %v; want not found", a, err)
	}
}
