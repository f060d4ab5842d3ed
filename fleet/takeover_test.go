package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/store"
)

// TestFleetTakeoverPrompt: of three nodes, the one holding groups stops
// without releasing them (as a killed node does), and the two others,
// whose workers never ask for work, take every one of its groups over
// within the claim TTL and a few seconds, sharing them, and no group is
// ever held by both. Left to idle workers, the groups would wait for a
// worker that never comes.
func TestFleetTakeoverPrompt(t *testing.T) {
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	a, b, c := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-b"), fleetJoin(t, s.ClientURL(), "node-c")

	// Three groups ranked first for a and three for b, so the share can
	// be told.
	var groups []string
	ranked := map[string]int{}
	for i := 0; len(groups) < 6 && i < 1000; i++ {
		g := fmt.Sprintf("alt.takeover.%d", i)
		if r := takeoverRank(g, []string{a.name, b.name}); ranked[r] < 3 {
			ranked[r]++
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		if _, _, err := c.app.Coordinator.PutGroup(ctx, g, store.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.app.Coordinator.PlanTail(ctx, g, 10000); err != nil {
			t.Fatal(err)
		}
	}
	// c holds every claim (its worker leases what it has not claimed yet),
	// and a and b know every group as c's.
	claimEventually(t, 20*time.Second, "c holds every group's claim and a and b fold them", func() bool {
		for _, g := range groups {
			if !c.fleet.claims.Held(g) {
				if _, err := c.app.Coordinator.Lease(ctx, c.worker); err != nil {
					t.Fatal(err)
				}
				return false
			}
			for _, n := range []*fleetNode{a, b} {
				if origin, err := n.db.PeerOwner(ctx, g); err != nil || origin != c.name {
					return false
				}
			}
		}
		return true
	})

	killed := time.Now()
	c.stop() // neither its claims nor its life are released
	bound := fleetTTL + 5*time.Second
	took := map[string]time.Duration{}
	claimEventually(t, bound, "every group of c's held by a or b", func() bool {
		for _, g := range groups {
			atA, atB := a.fleet.claims.Held(g), b.fleet.claims.Held(g)
			if atA && atB {
				t.Fatalf("group %s held by both a and b", g)
			}
			if _, ok := took[g]; !ok && (atA || atB) {
				took[g] = time.Since(killed)
			}
		}
		return len(took) == len(groups)
	})
	share := map[string]int{}
	for _, g := range groups {
		if a.fleet.claims.Held(g) {
			share[a.name]++
		} else {
			share[b.name]++
		}
	}
	t.Logf("claim TTL %s: taken over %v after the stop; share %v", fleetTTL, took, share)
	if share[a.name] == 0 || share[b.name] == 0 {
		t.Fatalf("one survivor took every group: %v; want them shared", share)
	}
	// Owned too, not only claimed: each survivor leases its share.
	for _, n := range []*fleetNode{a, b} {
		claimEventually(t, 10*time.Second, n.name+" leases a group it took over", func() bool {
			g, err := n.app.Coordinator.Lease(ctx, n.worker)
			if err != nil {
				t.Fatal(err)
			}
			return g != nil
		})
	}
}
