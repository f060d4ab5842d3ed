package fleet

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/store"
)

// copiesAre says why the fleet's streams and buckets, as js sees them, do
// not all have want copies in place (the config asks them, and a leader
// has want-1 others current), nil when they do.
func copiesAre(js jetstream.JetStream, want int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range engineStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		info := s.CachedInfo()
		if got := info.Config.Replicas; got != want {
			return fmt.Errorf("stream %s asks %d copies, want %d", name, got, want)
		}
		current := 0
		if info.Cluster != nil && info.Cluster.Leader != "" {
			current = 1
			for _, p := range info.Cluster.Replicas {
				if p.Current {
					current++
				}
			}
		}
		if current != want {
			return fmt.Errorf("stream %s has %d copies current, want %d", name, current, want)
		}
	}
	return nil
}

// workOneRange makes group at app, plans it, leases it for a worker
// registered there, finishes one range and releases it: the fleet serves.
func workOneRange(t *testing.T, app *appliance.Appliance, group string) {
	t.Helper()
	ctx := context.Background()
	c := app.Coordinator
	w, err := c.RegisterNode(ctx, appliance.NodeSpec{Name: "w-" + group})
	if err != nil {
		t.Fatal(err)
	}
	rs := int64(10)
	// A node just made ready may find its life not renewed yet while the
	// streams' copies are raised (their leaders elected again): the write
	// is refused as unavailable, as a client is told to try again.
	untilAvailable(t, "PUT /groups/"+group, func() error {
		_, _, err := c.PutGroup(ctx, group, store.GroupSpec{RangeSize: &rs})
		return err
	})
	untilAvailable(t, "POST /groups/"+group+"/tail", func() error {
		_, err := c.PlanTail(ctx, group, 100)
		return err
	})
	var g *leasehold.Grant
	poll.Eventually(t, 20*time.Second, "a lease of "+group, func() bool {
		if g, err = c.Lease(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
		return g != nil && g.Group.Name == group
	})
	r, err := c.Next(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence})
	if err != nil || r == nil {
		t.Fatalf("next range of %s: %v, %v", group, r, err)
	}
	if _, err := c.Finish(ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, r.End-r.Next+1); err != nil {
		t.Fatalf("finish a range of %s: %v", group, err)
	}
	if err := c.Release(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		t.Fatalf("release %s: %v", group, err)
	}
}

// untilAvailable calls write until it is not refused as unavailable, for
// 20 s at most; any other error fails the test.
func untilAvailable(t *testing.T, what string, write func() error) {
	t.Helper()
	var last error
	poll.Eventually(t, 20*time.Second, what+" not refused as unavailable", func() bool {
		last = write()
		if last != nil && leasehold.KindOf(last) != leasehold.KindUnavailable {
			t.Fatalf("%s: %v", what, last)
		}
		return last == nil
	})
}

// TestFleetMajority: of a fleet of three embedded nodes, one started
// alone waits, saying for what; once a second is up both are ready within
// seconds, on two copies of every stream and bucket, and serve a group.
// The third started, every stream and bucket is raised to three copies,
// a line says so, and the third is ready.
func TestFleetMajority(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ports, routes := readyRoutes(t)
	var logs syncbuf.Buffer
	a := startReady(t, "node-a", ports[0], routes, &logs)
	poll.Eventually(t, 20*time.Second, "a alone waits for the fleet's JetStream", func() bool {
		return strings.Contains(fmt.Sprint(a.fleet.gate.Ready()), "JetStream")
	})
	second := time.Now()
	b := startReady(t, "node-b", ports[1], routes, &logs)
	for _, n := range []*fleetNode{a, b} {
		poll.Until(t, 30*time.Second, n.name+" ready with a majority up", n.fleet.gate.Ready)
		t.Logf("%s ready %.1f s after the second node's start", n.name, time.Since(second).Seconds())
	}
	if err := copiesAre(a.fleet.js, 2); err != nil {
		t.Fatalf("two nodes of three up: %v", err)
	}
	workOneRange(t, a.app, "alt.two")

	third := time.Now()
	c := startReady(t, "node-c", ports[2], routes, &logs)
	poll.Until(t, 60*time.Second, "node-c ready", c.fleet.gate.Ready)
	poll.Until(t, 60*time.Second, "three copies of every stream and bucket", func() error { return copiesAre(a.fleet.js, 3) })
	t.Logf("three copies %.1f s after the third node's start", time.Since(third).Seconds())
	poll.Eventually(t, 10*time.Second, "a line saying the copies were raised", func() bool {
		return strings.Contains(logs.String(), "peers: stream copies raised 2 → 3")
	})
	workOneRange(t, c.app, "alt.three")
}

// TestFleetExternalMajority: nodes on an external NATS cluster of three
// started with one server missing join on two copies and serve; the
// third server up, every stream and bucket is raised to three. Each
// server routes to the two others only: a server given a route to itself
// too counts it in the cluster size it boots with, and two of them never
// elect JetStream's meta leader (nats-server 2.15), whatever the fleet
// does. A cluster that has run with its three and lost one places three
// copies with one down, a quorum all the same (TestFleetExternalCluster).
func TestFleetExternalMajority(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a NATS cluster and starts a server late")
	}
	var opts []*server.Options
	for i := range 3 {
		o := natstest.Options(t)
		o.Port = natstest.FreePort(t)
		o.ServerName = fmt.Sprintf("s%d", i+1)
		o.Cluster.Name, o.Cluster.Host, o.Cluster.Port = "majority", "127.0.0.1", natstest.FreePort(t)
		opts = append(opts, o)
	}
	var urls []string
	for i, o := range opts {
		for j, p := range opts {
			if j != i {
				o.Routes = append(o.Routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p.Cluster.Port)})
			}
		}
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	for _, o := range opts[:2] {
		s := natstest.Start(t, o)
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	cfg := Config{NATS: strings.Join(urls, ","), ClaimTTL: engineTTL}
	cfg.Name = "node-a"
	a := fleetJoinWith(t, cfg)
	cfg.Name = "node-b"
	b := fleetJoinWith(t, cfg)
	if err := copiesAre(a.fleet.js, 2); err != nil {
		t.Fatalf("two NATS servers of three up: %v", err)
	}
	workOneRange(t, b.app, "alt.two")
	third := natstest.Start(t, opts[2])
	t.Cleanup(func() { third.Shutdown(); third.WaitForShutdown() })
	poll.Until(t, 60*time.Second, "three copies of every stream and bucket", func() error { return copiesAre(a.fleet.js, 3) })
	workOneRange(t, a.app, "alt.three")
}
