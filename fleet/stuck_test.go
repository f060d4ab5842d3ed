package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestPeerSyncStuck: a node whose outbox cannot be published (its NATS
// gone) for longer than stuckAfter says so: a peer_sync_stuck finding
// naming it, one WARN line, and the troubles /readyz tells, while its own
// writes go on; all of it clears when publishing works again.
func TestPeerSyncStuck(t *testing.T) {
	defer func(d time.Duration) { stuckAfter = d }(stuckAfter)
	stuckAfter = 2 * time.Second
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	var logs syncbuf.Buffer
	a := fleetJoin(t, s.ClientURL(), "node-a", &logs)
	if _, err := a.app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "w-before"}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "a's outbox published", func() bool {
		st, err := a.fleet.Peers(ctx)
		return err == nil && st.Unpublished == 0 && st.Published > 0
	})
	if ts := a.app.Troubles(); len(ts) != 0 {
		t.Fatalf("troubles with NATS up: %+v", ts)
	}

	s.Shutdown()
	s.WaitForShutdown()
	if _, err := a.app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "w-cut-off"}); err != nil {
		t.Fatal(err)
	}
	var stuck leasehold.Finding
	poll.Eventually(t, 30*time.Second, "a peer_sync_stuck finding at a", func() bool {
		rep, err := a.app.Watchman.Report(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Stuck {
			if f.Kind == leasehold.FindingPeerSyncStuck {
				stuck = f
				return true
			}
		}
		return false
	})
	if stuck.Node != "node-a" || !strings.Contains(stuck.Detail, "outbox") {
		t.Errorf("finding = %+v, want node-a's outbox named", stuck)
	}
	if ts := a.app.Troubles(); len(ts) != 1 || ts[0].Kind != leasehold.FindingPeerSyncStuck {
		t.Errorf("troubles for /readyz = %+v, want peer_sync_stuck", ts)
	}
	g, err := a.app.Watchman.Gauges(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.Findings[leasehold.FindingPeerSyncStuck] != 1 {
		t.Errorf("gauge peer_sync_stuck = %d, want 1", g.Findings[leasehold.FindingPeerSyncStuck])
	}
	if n := strings.Count(logs.String(), "peer sync is stuck"); n != 1 {
		t.Errorf("%d WARN lines saying peer sync is stuck, want 1:\n%s", n, logs.String())
	}

	// NATS back on the same port: the outbox drains and the finding goes.
	natstest.Start(t, opts)
	poll.Eventually(t, 60*time.Second, "a line saying peer sync publishes again", func() bool {
		return strings.Contains(logs.String(), "peer sync publishes again")
	})
	if ts := a.app.Troubles(); len(ts) != 0 {
		t.Errorf("troubles once a published again: %+v", ts)
	}
}
