package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/store"
)

// TestAdminCarriedWriteLogged: an admin write a peer carries here is
// logged as an admin write made over HTTP is, naming the op, the group,
// and the peer with its life, so an operator sees who changed the
// catalog through NATS.
func TestAdminCarriedWriteLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	var logs syncbuf.Buffer
	a := fleetJoin(t, s.ClientURL(), "node-a", &logs)
	b := fleetJoin(t, s.ClientURL(), "node-b")
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.carried", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "b sees a's group", func() bool {
		_, err := b.db.GroupByName(ctx, "alt.carried")
		return err == nil
	})
	if _, err := b.app.Coordinator.PlanTail(ctx, "alt.carried", 500); err != nil {
		t.Fatalf("planning a's group at b: %v", err)
	}
	var line map[string]any
	poll.Eventually(t, 10*time.Second, "a logs the carried write", func() bool {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "admin write" && m["via"] == "nats" {
				line = m
				return true
			}
		}
		return false
	})
	want := map[string]any{"op": "plan_tail", "group": "alt.carried", "peer": "node-b", "life": b.fleet.claims.Life(),
		"high": float64(500), "subject": AdminSubjectPrefix + "node-a", "level": "INFO"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("carried write logged %s=%v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if line["life"] == "" {
		t.Error("the carried write names no life")
	}
}

// TestCarrierNamesUnreachableNode: a write on a worker node carried to a
// home that answers no more names that node, not an empty group, so an
// operator revoking a visitor of a lost home learns which node is gone.
func TestCarrierNamesUnreachableNode(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, err = NewCarrier(nc, "node-a", nil).Forward(context.Background(), "node-gone", appliance.AdminOp{Op: "delete_node", Node: "w1"})
	if leasehold.KindOf(err) != leasehold.KindUnavailable {
		t.Fatalf("carrying to a home no one answers for: %v; want unavailable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `node "node-gone" cannot be reached now`) || strings.Contains(msg, `group ""`) {
		t.Errorf("carrying to a home no one answers for: %q; want it to name node-gone and no group", msg)
	}
}
