package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestAdminFailures: the operator sees rule 10 in the CLI: a range's last
// error in `groups ranges`, a quarantine in `groups show`, and lifts it
// with `groups unquarantine` or `groups drop-snapshot`.
func TestAdminFailures(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	ctx := context.Background()
	admin(t, n, "groups", "create", "alt.x", "--range-size", "100")
	admin(t, n, "groups", "tail", "alt.x", "300")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	g, err := w.Lease(ctx)
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	r, err := w.Next(ctx, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		t.Fatalf("next: %v, %v", r, err)
	}
	if out := admin(t, n, "groups", "ranges", "alt.x", "--status", "leased"); !strings.Contains(out, " w1 ") {
		t.Errorf("groups ranges: got\n%s\nwant the leased range's NODE named w1", out)
	}
	if _, err := w.FailRange(ctx, r.ID, g.Fence, "disk\nfull", false); err != nil {
		t.Fatal(err)
	}
	out := admin(t, n, "groups", "ranges", "alt.x")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.Contains(lines[0], "LAST_ERROR") ||
		!strings.HasSuffix(lines[1], "disk full") || !strings.HasSuffix(lines[2], " -") {
		t.Errorf("groups ranges: got\n%s\nwant a LAST_ERROR column with the first range's error on one line", out)
	}
	if err := w.ReleaseUnreadable(ctx, g.Group.ID, g.Fence, "gzip: invalid header"); err != nil {
		t.Fatal(err)
	}
	if out := admin(t, n, "groups", "show", "alt.x"); !strings.Contains(out, "by w1: gzip: invalid header") {
		t.Errorf("groups show: got\n%s\nwant the quarantine", out)
	}
	if out := admin(t, n, "groups", "unquarantine", "alt.x"); !strings.Contains(out, "quarantine lifted") {
		t.Errorf("groups unquarantine: got %q", out)
	}
	if out := admin(t, n, "groups", "show", "alt.x"); strings.Contains(out, "quarantined") {
		t.Errorf("groups show after the lift: got\n%s", out)
	}
	if out := admin(t, n, "groups", "drop-snapshot", "alt.x"); !strings.Contains(out, "window dropped") {
		t.Errorf("groups drop-snapshot: got %q", out)
	}
}

// TestAdminGuardedWrites: without a terminal to ask on, `snapshot put`
// of a window that would make done ranges be indexed again and `nodes
// delete` of a node holding a group are refused with how to go ahead;
// with --force they are done.
func TestAdminGuardedWrites(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	ctx := context.Background()
	admin(t, n, "groups", "create", "alt.x", "--range-size", "100")
	admin(t, n, "groups", "tail", "alt.x", "300")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	g, err := w.Lease(ctx)
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	r, err := w.Next(ctx, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		t.Fatalf("next: %v, %v", r, err)
	}
	if _, err := w.Finish(ctx, r.ID, g.Fence, 3); err != nil {
		t.Fatal(err)
	}

	_, err = operatorRun(t, n, nil, "nodes", "delete", "w1")
	if !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("nodes delete of a holding node: %v, want a conflict saying --force", err)
	}
	if err := w.Release(ctx, g.Group.ID, g.Fence); err != nil {
		t.Fatalf("the refused delete took the lease: %v", err)
	}

	window := filepath.Join(t.TempDir(), "w.gz")
	if err := os.WriteFile(window, gzipped(t, []byte("a window")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = snapshotCmd(t, n, "put", "--next", "1", "alt.x", window)
	if !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "1 done range(s)") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("snapshot put over a done range: %v, want a conflict naming 1 done range and --force", err)
	}
	if out, _, err := snapshotCmd(t, n, "put", "--next", "1", "--force", "alt.x", window); err != nil || !strings.Contains(out, "stored") {
		t.Fatalf("snapshot put --force: %q, %v", out, err)
	}
	if _, err := w.Lease(ctx); err != nil {
		t.Fatal(err)
	}
	if out := admin(t, n, "nodes", "delete", "--force", "w1"); !strings.Contains(out, "deleted") {
		t.Errorf("nodes delete --force: %q", out)
	}
}

// TestRetryFailed: `admin ranges retry --failed GROUP` plans every failed
// range of the group again, says how many, and leaves other groups' failed
// ranges alone.
func TestRetryFailed(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	ctx := context.Background()
	for _, g := range []string{"alt.x", "alt.y"} {
		admin(t, n, "groups", "create", g, "--range-size", "100")
		admin(t, n, "groups", "tail", g, "300")
	}
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "--capacity", "2", "-q")))
	for range 2 {
		g, err := w.Lease(ctx)
		if err != nil || g == nil {
			t.Fatalf("lease: %v, %v", g, err)
		}
		fails := 2
		if g.Group.Name == "alt.y" {
			fails = 1
		}
		for range fails {
			r, err := w.Next(ctx, g.Group.ID, g.Fence)
			if err != nil || r == nil {
				t.Fatalf("next: %v, %v", r, err)
			}
			if _, err := w.FailRange(ctx, r.ID, g.Fence, "disk full", false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out := admin(t, n, "ranges", "retry", "--failed", "alt.x"); !strings.Contains(out, "2 failed range(s) planned again") {
		t.Errorf("ranges retry --failed alt.x: %q, want 2 retried", out)
	}
	for g, want := range map[string]int{"alt.x": 0, "alt.y": 1} {
		rs, err := client.New(n.URL, n.AdminToken).AllRanges(ctx, g, leasehold.StatusFailed)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != want {
			t.Errorf("%s: %d failed ranges after the retry, want %d", g, len(rs), want)
		}
	}
	if out := admin(t, n, "ranges", "retry", "--failed", "alt.x"); !strings.Contains(out, "0 failed range(s)") {
		t.Errorf("ranges retry --failed with none failed: %q", out)
	}
	if _, err := operatorRun(t, n, nil, "ranges", "retry", "--failed", "alt.x", "7"); err == nil {
		t.Error("ranges retry --failed GROUP ID: no error, want a usage error")
	}
}

// TestGroupsDelete: `admin groups delete` deletes an unheld group and
// refuses a held one, saying so.
func TestGroupsDelete(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	heldGroup(t, n, "alt.held")
	admin(t, n, "groups", "create", "alt.gone")
	if out := admin(t, n, "groups", "delete", "alt.gone"); !strings.Contains(out, "group alt.gone deleted") {
		t.Errorf("groups delete alt.gone: %q", out)
	}
	if out := admin(t, n, "groups", "list"); strings.Contains(out, "alt.gone") || !strings.Contains(out, "alt.held") {
		t.Errorf("groups list after the deletion:\n%s", out)
	}
	if _, err := operatorRun(t, n, nil, "groups", "delete", "alt.held"); !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "held") {
		t.Errorf("groups delete of a held group: %v, want a conflict saying it is held", err)
	}
}

// heldGroup creates group name with ranges planned, and a worker node w1
// that leases it.
func heldGroup(t *testing.T, n *nodetest.Node, name string) {
	t.Helper()
	admin(t, n, "groups", "create", name, "--range-size", "100")
	admin(t, n, "groups", "tail", name, "300")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	if g, err := w.Lease(context.Background()); err != nil || g == nil || g.Group.Name != name {
		t.Fatalf("lease: %v, %v; want %s", g, err, name)
	}
}
