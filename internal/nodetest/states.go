package nodetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// SeedNodeStates registers four worker nodes on n, whose clock is clock,
// and brings each into one node state through the API as its worker and
// its operator would: "gone" leased group "states" and released it, then
// was not seen past the unseen bound (unseen); "busy" holds the group
// (active); "spare" asked for work after that and got none (idle); "held"
// was paused by "ops" (paused). It returns each name's state.
func SeedNodeStates(t testing.TB, n *Node, clock *Clock) map[string]string {
	t.Helper()
	ctx := context.Background()
	admin := client.New(n.URL, n.AdminToken)
	size := int64(100)
	if _, _, err := admin.PutGroup(ctx, "states", client.GroupSpec{RangeSize: &size}); err != nil {
		t.Fatalf("nodetest: creating group states: %v", err)
	}
	if _, err := admin.PlanTail(ctx, "states", 300); err != nil {
		t.Fatalf("nodetest: planning states: %v", err)
	}
	workers := map[string]*client.Client{}
	ids := map[string]int64{}
	for _, name := range []string{"gone", "busy", "spare", "held"} {
		nd, err := admin.RegisterNode(ctx, client.NodeSpec{Name: name})
		if err != nil {
			t.Fatalf("nodetest: registering %s: %v", name, err)
		}
		workers[name], ids[name] = client.New(n.URL, nd.Token), nd.ID
	}
	lease := func(name string) *client.Grant {
		t.Helper()
		g, err := workers[name].Lease(ctx)
		if err != nil {
			t.Fatalf("nodetest: %s's lease: %v", name, err)
		}
		return g
	}
	g := lease("gone")
	if g == nil {
		t.Fatal("nodetest: gone leased nothing")
	}
	if err := workers["gone"].Release(ctx, g.Group.ID, g.Fence); err != nil {
		t.Fatalf("nodetest: gone's release: %v", err)
	}
	clock.Advance(n.App.Config.NodeUnseen + time.Second)
	if g := lease("busy"); g == nil || g.Group.Name != "states" {
		t.Fatalf("nodetest: busy leased %+v, want states", g)
	}
	if g := lease("spare"); g != nil {
		t.Fatalf("nodetest: spare leased %s, want nothing free", g.Group.Name)
	}
	if _, err := admin.PauseNode(ctx, ids["held"], "ops"); err != nil {
		t.Fatalf("nodetest: pausing held: %v", err)
	}
	return map[string]string{"gone": leasehold.NodeUnseen, "busy": leasehold.NodeActive, "spare": leasehold.NodeIdle, "held": leasehold.NodePaused}
}
