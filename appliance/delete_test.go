package appliance

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// TestDeleteGroupRemovesWindow: on a lone node, deleting an unheld group
// takes its window snapshot's file with it, and the group is gone.
func TestDeleteGroupRemovesWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	app, err := Open(Config{DataDir: dir, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	g, _, err := app.Coordinator.PutGroup(ctx, "g", store.GroupSpec{RangeSize: ptr(int64(100)), Start: ptr(int64(1))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Coordinator.PlanTail(ctx, "g", 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Snapshots.Put(ctx, Upload{GroupID: g.ID, Next: 1, Body: strings.NewReader("the window")}); err != nil {
		t.Fatal(err)
	}
	files := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*.gz"))
		return m
	}
	if f := files(); len(f) != 1 {
		t.Fatalf("snapshot files before the deletion: %v, want one", f)
	}
	if err := app.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if f := files(); len(f) != 0 {
		t.Errorf("snapshot files after the deletion: %v, want none", f)
	}
	if _, err := app.Coordinator.Group(ctx, "g"); leasehold.ErrorKind(err) != leasehold.KindNotFound {
		t.Errorf("g after its deletion: %v, want not found", err)
	}
	if err := app.DeleteGroup(ctx, "g"); leasehold.ErrorKind(err) != leasehold.KindNotFound {
		t.Errorf("g deleted twice: %v, want not found", err)
	}
}

// TestDeleteGroupRefusedInFleet: a node of a fleet does not delete a
// group, held or not, since the deletion would not reach its peers; it
// says so, and the group and its window stay.
func TestDeleteGroupRefusedInFleet(t *testing.T) {
	t.Parallel()
	w := newFleetWorld(t)
	if err := w.app.Coordinator.Release(w.ctx, leasehold.Holder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence}); err != nil {
		t.Fatal(err)
	}
	err := w.app.DeleteGroup(w.ctx, "g")
	if leasehold.ErrorKind(err) != leasehold.KindConflict || !strings.Contains(err.Error(), "fleet") {
		t.Fatalf("deleting g in a fleet: %v, want a conflict naming the fleet", err)
	}
	if _, err := w.app.Coordinator.Group(w.ctx, "g"); err != nil {
		t.Errorf("g after the refused deletion: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(w.dir, "snapshots", "*.gz")); len(m) != 1 {
		t.Errorf("snapshot files after the refused deletion: %v, want g's", m)
	}
}
