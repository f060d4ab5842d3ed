package fleet

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	t.Parallel()
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

// TestClaimsReadNoReplica: taking over a lapsed node's claim, beginning a
// life beside one that stands, and asking a group's owner read no key by
// a direct get, which any replica may take: a replica cut off without a
// FIN (a paused or partitioned node's server) takes it and never answers,
// and each such read held a takeover's claim for 5 s. Every read goes to
// the bucket's leader.
func TestClaimsReadNoReplica(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	ctx := context.Background()
	const group = "alt.liveness.direct"
	watcher := natstest.Connect(t, s.ClientURL()).Conn()
	var direct atomic.Int64
	sub, err := watcher.Subscribe("$JS.API.DIRECT.GET.>", func(m *nats.Msg) { direct.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}

	a := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a"})
	claimRun(t, a)
	if _, err := a.Claim(ctx, group); err != nil {
		t.Fatal(err)
	}
	// A second run of a while its life stands: its life's key exists.
	claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a"})
	b := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "b"})
	claimRun(t, b)
	if own, _, err := b.Owner(ctx, group); err != nil || own.Node != "a" {
		t.Fatalf("owner %v (%v), want a", own, err)
	}
	a.Stop() // killed: its claim stands until its life lapses
	poll.Eventually(t, 4*claimTestTTL, "b takes the lapsed group over", func() bool {
		_, err := b.Claim(ctx, group)
		return err == nil
	})
	if own, _, err := b.Owner(ctx, group); err != nil || own.Node != "b" {
		t.Fatalf("owner %v (%v), want b", own, err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := direct.Load(); n != 0 {
		t.Fatalf("%d direct gets, want every read from the leader", n)
	}
}
