package main

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestNodesListState: `admin nodes list` shows each worker node's state
// in its STATE column, and --json in its state field: a node holding a
// group is active, one seen holding nothing idle, one not seen past the
// unseen bound unseen, a paused one paused.
func TestNodesListState(t *testing.T) {
	t.Parallel()
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

// TestNodesListLastSeenOnNodeClock: `admin nodes list` tells LAST_SEEN on
// the node's clock (its answer's Date), not on the machine the CLI runs
// on: through a proxy that says the node's clock is two hours ahead, a
// node seen just now was seen two hours ago.
func TestNodesListLastSeenOnNodeClock(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.x", "--range-size", "100")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	if _, err := w.Lease(context.Background()); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(n.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		at, err := http.ParseTime(r.Header.Get("Date"))
		if err != nil {
			return err
		}
		r.Header.Set("Date", at.Add(2*time.Hour).UTC().Format(http.TimeFormat))
		return nil
	}
	ahead := httptest.NewServer(proxy)
	t.Cleanup(ahead.Close)
	out := admin(t, &nodetest.Node{URL: ahead.URL, AdminToken: n.AdminToken}, "nodes", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	seen := strings.Index(lines[0], "LAST_SEEN")
	if len(lines) != 2 || seen < 0 || len(lines[1]) <= seen {
		t.Fatalf("nodes list:\n%s", out)
	}
	ago, err := time.ParseDuration(strings.TrimSuffix(strings.TrimSpace(lines[1][seen:]), " ago"))
	if err != nil || ago < 2*time.Hour-5*time.Second || ago > 2*time.Hour+5*time.Second {
		t.Errorf("w1 LAST_SEEN %q (%v), want about 2h ago on the node's clock", lines[1][seen:], err)
	}
}
