package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/web/client"
)

// TestAdminFailures: the operator sees rule 10 in the CLI: a range's last
// error in `groups ranges`, a quarantine in `groups show`, and lifts it
// with `groups unquarantine` or `groups drop-snapshot`.
func TestAdminFailures(t *testing.T) {
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
