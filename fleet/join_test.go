package fleet

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/store"
)

// joinNode opens a node's appliance under its fleet part and joins it, as
// cmd/leasehold does.
func joinNode(ctx context.Context, appCfg appliance.Config, cfg Config) (*appliance.Appliance, *Fleet, error) {
	f, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	appCfg.Fleet = f
	app, err := appliance.Open(appCfg)
	if err != nil {
		return nil, nil, err
	}
	if err := f.Join(ctx, app); err != nil {
		f.Close()
		app.Close()
		return nil, nil, err
	}
	return app, f, nil
}

// ownFleet is the appliance.Fleet of a node whose claims a test wires by
// hand: its Ownership, once made. Before that it holds no claim and lets
// admin writes through, so a test can set up each node's catalog as its
// own first.
type ownFleet struct{ own atomic.Pointer[Ownership] }

func (f *ownFleet) Holds(group string) (uint64, bool) {
	if o := f.own.Load(); o != nil {
		return o.Holds(group)
	}
	return 0, false
}

func (f *ownFleet) Want(group string) {
	if o := f.own.Load(); o != nil {
		o.Want(group)
	}
}

func (f *ownFleet) ClaimNow(ctx context.Context, groups []string) bool {
	o := f.own.Load()
	return o != nil && o.ClaimNow(ctx, groups)
}

func (f *ownFleet) Ensure(ctx context.Context, group string) error {
	if o := f.own.Load(); o != nil {
		return o.Ensure(ctx, group)
	}
	return nil
}

func (f *ownFleet) Idle() {
	if o := f.own.Load(); o != nil {
		o.Idle()
	}
}

func (f *ownFleet) Forward(context.Context, string, appliance.AdminOp) (appliance.AdminResult, error) {
	return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "no admin forwarding in this test")
}

func (f *ownFleet) Ready() error { return nil }

// readyNode is a node of TestFleetReady: its fleet part made and its
// appliance open, its Join running.
type readyNode struct {
	name   string
	app    *appliance.Appliance
	fleet  *Fleet
	joined chan error
}

// startReady opens node name of a fleet routed on routes and starts its
// Join; Ready says when it has joined. A group write made before the join
// is checked to be refused as unavailable, as every write during the join
// is.
func startReady(t *testing.T, name string, cluster int, routes []string) *readyNode {
	t.Helper()
	dir := t.TempDir()
	f, err := New(Config{Name: name, Listen: "127.0.0.1:0", ClusterListen: fmt.Sprintf("127.0.0.1:%d", cluster), Routes: routes,
		Dir: dir + "/nats", ClaimTTL: 30 * time.Second, Logger: claimQuiet})
	if err != nil {
		t.Fatal(err)
	}
	app, err := appliance.Open(appliance.Config{DataDir: dir, Logger: claimQuiet, Fleet: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, write := range []struct {
		what string
		err  func() error
	}{
		{"PUT /groups", func() error {
			_, _, err := app.Coordinator.PutGroup(context.Background(), "alt.joining", store.GroupSpec{})
			return err
		}},
		{"POST /groups/{name}/tail", func() error { _, err := app.Coordinator.PlanTail(context.Background(), "alt.joining", 10); return err }},
	} {
		if err := write.err(); leasehold.ErrorKind(err) != leasehold.KindUnavailable {
			t.Errorf("%s: %s while joining: %v (%s); want unavailable (503)", name, write.what, err, leasehold.ErrorKind(err))
		}
	}
	n := &readyNode{name: name, app: app, fleet: f, joined: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { n.joined <- f.Join(ctx, app) }()
	t.Cleanup(func() {
		cancel()
		<-n.joined
		f.Close()
		app.Close()
	})
	return n
}

// waitReady polls nodes' Ready until each has joined (at most 60 s) and
// returns how long each took from start.
func waitReady(t *testing.T, start time.Time, nodes ...*readyNode) {
	t.Helper()
	for _, n := range nodes {
		claimEventually(t, 60*time.Second, n.name+" ready", func() bool { return n.fleet.Ready() == nil })
		t.Logf("%s ready %.1f s after the start", n.name, time.Since(start).Seconds())
	}
}

// TestFleetReady times a fleet forming: three nodes started together are
// ready within seconds (the figure is printed, not asserted: a loaded
// machine is slower). While a node joins, writes on groups are refused
// as unavailable, all alike.
func TestFleetReady(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ports := []int{natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	start := time.Now()
	var nodes []*readyNode
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, startReady(t, name, ports[i], routes))
	}
	waitReady(t, start, nodes...)
	if _, _, err := nodes[0].app.Coordinator.PutGroup(context.Background(), "alt.joined", store.GroupSpec{}); err != nil {
		t.Fatalf("PUT /groups once joined: %v", err)
	}
}
