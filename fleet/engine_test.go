package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// engineTTL is the claim TTL of the external-cluster tests: above
// ClaimTTLFloor, as the default is, so a leader election in the cluster
// costs no claim.
const engineTTL = 20 * time.Second

// engineCluster is three clustered nats-servers, as an operator's, and
// the comma-separated URLs a node is given for them.
func engineCluster(t *testing.T) ([]*server.Server, []*server.Options, string) {
	servers, opts := natstest.Cluster(t, 3)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	return servers, opts, strings.Join(urls, ",")
}

// engineLeader is the index in servers of the server leading stream.
func engineLeader(t *testing.T, n *fleetNode, servers []*server.Server, stream string) int {
	t.Helper()
	s, err := n.fleet.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	for i, srv := range servers {
		if c := s.CachedInfo().Cluster; c != nil && srv.Name() == c.Leader {
			return i
		}
	}
	t.Fatalf("stream %s has no leader among the servers", stream)
	return -1
}

// TestFleetExternalCluster: on an external NATS cluster of three, the
// fleet keeps three copies of its streams and buckets, and the loss of one
// server changes nothing its users see: the lease held is heartbeated
// throughout, a new group is made and leased, and every node stays ready.
// The loss of a second (no majority left) is told by Ready (/readyz) and
// Peers (/peers), and the servers' return clears it.
func TestFleetExternalCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kills NATS servers and waits out their elections")
	}
	ctx := context.Background()
	servers, opts, urls := engineCluster(t)
	a := fleetJoinWith(t, Config{Name: "node-a", NATS: urls, ClaimTTL: engineTTL})
	b := fleetJoinWith(t, Config{Name: "node-b", NATS: urls, ClaimTTL: engineTTL})
	fleetReplicas(t, a, "joined on a cluster of three", MaxReplicas)
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.before", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	// The plan claims the group: on a cluster just formed and a loaded
	// machine a's life may not be held yet (its first write waits on the
	// lives bucket's election), which is unavailable, "try again".
	poll.Until(t, 20*time.Second, "a plans its group", func() error {
		_, err := a.app.Coordinator.PlanTail(ctx, "alt.before", 100000)
		if err != nil && leasehold.KindOf(err) != leasehold.KindUnavailable {
			t.Fatal(err)
		}
		return err
	})
	var g *leasehold.Grant
	poll.Eventually(t, 20*time.Second, "a leases its group", func() bool {
		var err error
		if g, err = a.app.Coordinator.Lease(ctx, a.worker); err != nil {
			t.Fatal(err)
		}
		return g != nil
	})

	// The server leading the lives: its loss is an election where every
	// node's life is renewed.
	first := engineLeader(t, a, servers, "KV_"+LivesBucket)
	servers[first].Shutdown()
	killed := time.Now()
	var notReady []string
	made := false
	for time.Since(killed) < engineTTL+5*time.Second {
		if err := a.app.Coordinator.Heartbeat(ctx, leasehold.GroupHolder{NodeID: a.worker, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
			t.Fatalf("%s after the loss of one NATS server of three: heartbeat: %v", time.Since(killed).Round(time.Millisecond), err)
		}
		if !made {
			if _, _, err := b.app.Coordinator.PutGroup(ctx, "alt.during", store.GroupSpec{}); err != nil {
				t.Fatalf("%s after the loss of one NATS server of three: a new group at b: %v", time.Since(killed).Round(time.Millisecond), err)
			}
			made = true
		}
		for _, n := range []*fleetNode{a, b} {
			if err := n.app.Ready(ctx); err != nil {
				notReady = append(notReady, n.name+" at "+time.Since(killed).Round(time.Millisecond).String()+": "+err.Error())
			}
		}
		time.Sleep(200 * time.Millisecond) // stays: the interval of checks that must hold across the whole window
	}
	if len(notReady) > 0 {
		t.Fatalf("not ready after the loss of one NATS server of three:\n%s", strings.Join(notReady, "\n"))
	}
	if _, err := b.app.Coordinator.PlanTail(ctx, "alt.during", 1000); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "b leases the group made after the loss", func() bool {
		g, err := b.app.Coordinator.Lease(ctx, b.worker)
		if err != nil {
			t.Fatal(err)
		}
		return g != nil
	})

	// A second server lost: the streams have no majority.
	second := (first + 1) % len(servers)
	servers[second].Shutdown()
	// The streams lose their leaders one by one as their elections time
	// out: waited for until the events stream is among them.
	var err error
	poll.Eventually(t, 30*time.Second, "a says its events stream is offline", func() bool {
		st, perr := a.fleet.Peers(ctx)
		err = a.app.Ready(ctx)
		return perr == nil && strings.Contains(st.Offline, StreamName) &&
			leasehold.KindOf(err) == leasehold.KindUnavailable && strings.Contains(err.Error(), StreamName)
	})
	t.Logf("with two NATS servers of three lost: %v", err)
	for _, i := range []int{first, second} {
		s := natstest.Start(t, opts[i])
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	poll.Eventually(t, 60*time.Second, "both nodes ready again with the servers back", func() bool {
		st, err := a.fleet.Peers(ctx)
		return err == nil && st.Offline == "" && a.app.Ready(ctx) == nil && b.app.Ready(ctx) == nil
	})
}
