package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestGroupsCreateExisting: groups create on a name taken already is
// refused (a conflict, exit 1) with the group unchanged; --update changes
// it, but not its start, and not while a worker holds it.
func TestGroupsCreateExisting(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	ctx := context.Background()
	admin(t, n, "groups", "create", "alt.taken", "--range-size", "100")
	before := admin(t, n, "groups", "show", "alt.taken")

	_, err := operatorRun(t, n, nil, "groups", "create", "alt.taken", "--kind", "nntp", "--range-size", "10000")
	if !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "exists") || !strings.Contains(err.Error(), "--update") {
		t.Errorf("create over an existing group: %v; want a conflict naming --update", err)
	}
	if after := admin(t, n, "groups", "show", "alt.taken"); after != before {
		t.Errorf("the refused create changed the group:\n%s\nwas\n%s", after, before)
	}
	if _, err := operatorRun(t, n, nil, "groups", "create", "alt.taken", "--update", "--start", "5"); !isUsage(err) {
		t.Errorf("create --update --start on an existing group: %v; want a usage error", err)
	}
	if out := admin(t, n, "groups", "create", "alt.taken", "--update", "--priority", "3"); !strings.Contains(out, "group alt.taken updated") {
		t.Errorf("create --update: %q", out)
	}
	if out := admin(t, n, "groups", "create", "alt.new", "--update"); !strings.Contains(out, "group alt.new created") {
		t.Errorf("create --update of a new group: %q", out)
	}

	admin(t, n, "groups", "tail", "alt.taken", "300")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	g, err := w.Lease(ctx)
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	held := g.Group.Name
	before = admin(t, n, "groups", "show", held)
	_, err = operatorRun(t, n, nil, "groups", "create", held, "--update", "--kind", "nntp")
	if !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "held by w1") {
		t.Errorf("create --update of a held group: %v; want a conflict naming w1", err)
	}
	if after := admin(t, n, "groups", "show", held); after != before {
		t.Errorf("the refused update changed the held group:\n%s\nwas\n%s", after, before)
	}
}
