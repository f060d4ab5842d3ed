package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestNodesListState: `admin nodes list` shows each worker node's state
// in its STATE column, and --json in its state field: a node holding a
// group is active, one seen holding nothing idle, one not seen past the
// unseen bound unseen, a paused one paused.
func TestNodesListState(t *testing.T) {
	clock := nodetest.NewClock()
	n := nodetest.Start(t, nodetest.Options{Clock: clock.Now})
	want := nodetest.SeedNodeStates(t, n, clock)

	out := admin(t, n, "nodes", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	head := strings.Fields(lines[0])
	state := slices.Index(head, "STATE")
	if len(head) < 3 || head[1] != "NAME" || state < 0 {
		t.Fatalf("nodes list header %q, want ID NAME … STATE …", lines[0])
	}
	got := map[string]string{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > state {
			got[f[1]] = f[state]
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("nodes list STATE column: got %v, want %v\n%s", got, want, out)
	}

	var nodes []struct{ Name, State string }
	if err := json.Unmarshal([]byte(admin(t, n, "--json", "nodes", "list")), &nodes); err != nil {
		t.Fatal(err)
	}
	got = map[string]string{}
	for _, nd := range nodes {
		got[nd.Name] = nd.State
	}
	if !maps.Equal(got, want) {
		t.Errorf("nodes list --json states: got %v, want %v", got, want)
	}
}
