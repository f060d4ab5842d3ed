package appliance_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/store"
)

// TestDeleteGroupRemovesWindow: on a lone node, deleting an unheld group
// takes its window snapshot's file with it, and the group is gone.
func TestDeleteGroupRemovesWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Minute})
	app, dir := n.App, n.DataDir
	g, _, err := app.Coordinator.PutGroup(ctx, "g", store.GroupSpec{RangeSize: leasehold.Int(100), Start: leasehold.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Coordinator.PlanTail(ctx, "g", 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Snapshots.Put(ctx, appliance.Upload{GroupID: g.ID, Next: 1, Body: strings.NewReader("the window")}); err != nil {
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
	if _, err := app.Coordinator.Group(ctx, "g"); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("g after its deletion: %v, want not found", err)
	}
	if err := app.DeleteGroup(ctx, "g"); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("g deleted twice: %v, want not found", err)
	}
}

// TestDeleteGroupInFleet: a node of a fleet deletes a group it owns as a
// lone node does, refusing while a worker holds it, and leaves what
// carries the deletion to its peers: a group_deleted event naming the
// group and the claim it owned it under, and a tombstone that keeps a
// late event of the group from making it again.
func TestDeleteGroupInFleet(t *testing.T) {
	t.Parallel()
	w := newFleetWorld(t)
	if err := w.app.DeleteGroup(w.ctx, "g"); leasehold.KindOf(err) != leasehold.KindConflict || !strings.Contains(err.Error(), "held") {
		t.Fatalf("deleting g while held: %v, want a conflict saying it is held", err)
	}
	if err := w.app.Coordinator.Release(w.ctx, leasehold.GroupHolder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence}); err != nil {
		t.Fatal(err)
	}
	if err := w.app.DeleteGroup(w.ctx, "g"); err != nil {
		t.Fatalf("deleting g once released: %v", err)
	}
	if _, err := w.app.Coordinator.Group(w.ctx, "g"); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("g after its deletion: %v, want not found", err)
	}
	if m, _ := filepath.Glob(filepath.Join(w.dir, "snapshots", "*.gz")); len(m) != 0 {
		t.Errorf("snapshot files after the deletion: %v, want none", m)
	}
	var body string
	if err := w.view.QueryRow(`SELECT body FROM events WHERE kind = 'group_deleted'`).Scan(&body); err != nil {
		t.Fatalf("the deletion's event: %v", err)
	}
	if want := fmt.Sprintf(`{"claim_rev":%d,"name":"g"}`, fleetClaimRev); body != want {
		t.Errorf("the deletion's event body: %s, want %s", body, want)
	}
	var rev int64
	if err := w.view.QueryRow(`SELECT claim_rev FROM group_tombstones WHERE name = 'g'`).Scan(&rev); err != nil || rev != fleetClaimRev {
		t.Errorf("g's tombstone: %d, %v; want claim %d", rev, err, fleetClaimRev)
	}
}
