package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/store"
)

// TestTombstoneUnclaimedGroupHeals: a group deleted in a fleet of three and
// made again at node-a while node-a cannot claim it (NATS gone, so its
// life is not renewed) is made all the same (PutGroup lets the claim
// wait for the first lease or admin write), and its events go out under
// no claim (revision 0) once NATS is back. Every peer's tombstone buries
// them: the peers fold them and still have no such group. That is not
// for good: node-a's first admin write on the group claims it, at a
// revision of the claims bucket later than the one the group was deleted
// under, and the first state under that claim carries the whole group,
// so every peer has it again, node-a's, with node-a's ranges.
func TestTombstoneUnclaimedGroupHeals(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out NATS going away and coming back")
	}
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	var logs syncbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the nodes' logs:\n%s", logs.String())
		}
	})
	a := fleetJoin(t, s.ClientURL(), "node-a", &logs)
	peers := []*fleetNode{fleetJoin(t, s.ClientURL(), "node-b", &logs), fleetJoin(t, s.ClientURL(), "node-c", &logs)}
	const g = "alt.tombstone.anew"
	rs := int64(100)
	if _, _, err := a.app.Coordinator.PutGroup(ctx, g, store.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.app.Coordinator.PlanTail(ctx, g, 1000); err != nil {
		t.Fatal(err)
	}
	untilPeers(t, peers, "node-a's group seen", func(p *fleetNode) error {
		_, err := p.db.GroupByName(ctx, g)
		return err
	})
	if err := a.app.DeleteGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	untilPeers(t, peers, "the deleted group gone", func(p *fleetNode) error { return gone(ctx, p, g) })

	s.Shutdown()
	s.WaitForShutdown()
	if _, created, err := a.app.Coordinator.PutGroup(ctx, g, store.GroupSpec{RangeSize: &rs}); err != nil || !created {
		t.Fatalf("making %s anew at node-a cut off from NATS: created %v, %v", g, created, err)
	}
	if a.fleet.claims.Held(g) {
		t.Fatalf("node-a claimed %s with NATS gone", g)
	}
	s2 := natstest.Start(t, opts)
	t.Cleanup(func() { s2.Shutdown(); s2.WaitForShutdown() })

	// Every peer folds what node-a did while cut off; unclaimed, the
	// group made anew is buried under the tombstone there.
	untilPeers(t, peers, "node-a's events folded", func(p *fleetNode) error {
		sa, _, folded := publishedAndFolded(t, ctx, a, p)
		if sa.Unpublished > 0 || folded < sa.Published {
			return fmt.Errorf("node-a: %d event(s) unpublished, published through %d; folded through %d", sa.Unpublished, sa.Published, folded)
		}
		return nil
	})
	if a.fleet.claims.Held(g) {
		t.Logf("node-a claimed %s before its first admin write: the peers' burying is not looked at", g)
	} else {
		for _, p := range peers {
			if err := gone(ctx, p, g); err != nil {
				t.Errorf("the group made anew unclaimed, at %s: %v", p.name, err)
			}
		}
	}

	// The first admin write claims it (once node-a's life is renewed),
	// and every peer has the group again as node-a has it.
	poll.Until(t, 10*fleetTTL, "node-a plans the group made anew", func() error {
		_, err := a.app.Coordinator.PlanTail(ctx, g, 700)
		return err
	})
	want, err := rangesOf(ctx, a, g)
	if err != nil || len(want) != 7 {
		t.Fatalf("node-a's ranges of %s: %v, %v; want 7", g, want, err)
	}
	untilPeers(t, peers, "the group made anew seen as node-a has it", func(p *fleetNode) error {
		grp, err := p.db.GroupByName(ctx, g)
		if err != nil {
			return err
		}
		if origin, err := p.db.GroupOrigin(ctx, grp.ID); err != nil || origin != "node-a" {
			return fmt.Errorf("its state is %q's (%v), want node-a's", origin, err)
		}
		got, err := rangesOf(ctx, p, g)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("ranges %v, want node-a's %v", got, want)
		}
		return nil
	})
}

// untilPeers polls cond at each of peers until it holds there.
func untilPeers(t *testing.T, peers []*fleetNode, what string, cond func(p *fleetNode) error) {
	t.Helper()
	for _, p := range peers {
		poll.Until(t, 10*fleetTTL, what+" at "+p.name, func() error { return cond(p) })
	}
}

// gone is nil when n has no group named g.
func gone(ctx context.Context, n *fleetNode, g string) error {
	if _, err := n.db.GroupByName(ctx, g); !errors.Is(err, leasehold.ErrNotFound) {
		return fmt.Errorf("%s: %v, want not found", g, err)
	}
	return nil
}

// rangesOf is n's ranges of group g, each as start-end/status.
func rangesOf(ctx context.Context, n *fleetNode, g string) ([]string, error) {
	rs, err := n.app.Coordinator.Ranges(ctx, g, "", 0, 1000)
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%d-%d/%s", r.Start, r.End, r.Status))
	}
	return out, err
}
