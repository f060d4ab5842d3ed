package fleet

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestMemberLiveness: in a real fleet, a member that has published
// nothing (no groups, no worker nodes) is up while its life is renewed,
// not joining for ever; and once this node is cut off from NATS, so that
// it can read no life, the member is unknown, never down, and nothing
// is taken from it.
func TestMemberLiveness(t *testing.T) {
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	a := fleetJoin(t, s.ClientURL(), "node-a")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", "node-quiet")
	app, _, f, err := joinNode(ctx, appliance.Config{DataDir: t.TempDir(), LeaseTTL: time.Minute, Logger: log},
		Config{Name: "node-quiet", NATS: s.ClientURL(), ClaimTTL: fleetTTL, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop(); app.Close() })

	state := func() string {
		st, err := a.fleet.Peers(ctx)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, p := range st.Peers {
			out = append(out, p.Name+"="+p.State)
		}
		return strings.Join(out, " ")
	}
	poll.Eventually(t, 20*time.Second, "a lists the quiet node up", func() bool { return state() == "node-quiet=up" })
	if got, want := membersByState(t, a.fleet.Collector()), "down=0 joining=0 unknown=0 up=1"; got != want {
		t.Fatalf("a's leasehold_peer_members %s, want %s", got, want)
	}

	// Cut off: a can read no life, the quiet node's among them.
	s.Shutdown()
	s.WaitForShutdown()
	poll.Eventually(t, 20*time.Second, "a lists the quiet node unknown", func() bool {
		got := state()
		if strings.Contains(got, "=down") {
			t.Fatalf("a cut off from NATS lists %s, want no member down", got)
		}
		return got == "node-quiet=unknown"
	})
	if groups, _ := a.fleet.members.Orphans(100); len(groups) != 0 {
		t.Fatalf("orphans of an unknown member: %v, want none", groups)
	}
}
