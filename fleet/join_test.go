package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/node"
	"github.com/leasehold/leasehold/store"
)

// openApp assembles a node alone as cmd/leasehold does (node.Assemble),
// without HTTP, and returns its appliance and catalog: the fleet's tests
// read and write the catalog as the fleet does. A fleet the test wires by
// hand is cfg.Fleet.
func openApp(cfg appliance.Config) (*appliance.Appliance, *store.DB, error) {
	p, _, err := assembleNode(cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	return p.App, p.DB, nil
}

// assembleNode assembles a node as cmd/leasehold does (node.Assemble),
// without HTTP: in the fleet of gate, whose Fleet it returns too, or
// alone when gate is nil. Nothing is started.
func assembleNode(appCfg appliance.Config, gate *Gate) (*node.Parts, *Fleet, error) {
	cfg := node.Config{Appliance: appCfg}
	var f *Fleet
	if gate != nil {
		cfg.Fleet = &node.Fleet{Gate: gate, New: func(app *appliance.Appliance, db *store.DB) (node.Peers, error) {
			var err error
			if f, err = New(gate, Local{DB: db, Coordinator: app.Coordinator, Snapshots: app.Snapshots, MaxAttempts: app.Config.MaxAttempts}); err != nil {
				return nil, err
			}
			return f, nil
		}}
	}
	p, err := node.Assemble(cfg)
	return p, f, err
}

// joinNode assembles a node in its fleet (assembleNode), starts it and
// waits until it has joined, as cmd/leasehold does.
func joinNode(ctx context.Context, appCfg appliance.Config, cfg Config) (*appliance.Appliance, *store.DB, *Fleet, error) {
	gate, err := NewGate(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	p, f, err := assembleNode(appCfg, gate)
	if err != nil {
		return nil, nil, nil, err
	}
	if err = p.Start(ctx); err == nil {
		select {
		case <-f.Joined():
			return p.App, p.DB, f, nil
		case <-f.Done():
			err = cmp.Or(f.Err(), errors.New("the fleet ended before it joined"))
		}
	}
	p.Stop()
	return nil, nil, nil, err
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

func (f *ownFleet) Idle(node int64) {
	if o := f.own.Load(); o != nil {
		o.Idle(node)
	}
}

func (f *ownFleet) Forward(context.Context, string, appliance.AdminOp) (appliance.AdminResult, error) {
	return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "no admin forwarding in this test")
}

func (f *ownFleet) Ready() error { return nil }

// TestFleetJoinRefused: a fleet that cannot join for good (its NATS
// address in use) ends by itself with a JoinError naming the node, its
// gate still closed to the coordinator; Stop after that is safe.
func TestFleetJoinRefused(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	_, _, _, err = joinNode(context.Background(), appliance.Config{DataDir: dir, Logger: claimQuiet},
		Config{Name: "node-a", Listen: taken.Addr().String(), Dir: filepath.Join(dir, "nats"), Logger: claimQuiet})
	var je *JoinError
	if !errors.As(err, &je) || je.Node != "node-a" || !strings.Contains(err.Error(), "--nats-listen") {
		t.Fatalf("joining on an address in use: %v, want a JoinError naming node-a and --nats-listen", err)
	}
}

// TestFleetStopWhileJoining: a fleet stopped while it still waits for
// NATS (nothing listens where it connects) stops at once, with no error,
// and its gate never opened.
func TestFleetStopWhileJoining(t *testing.T) {
	t.Parallel()
	free := natstest.FreePort(t)
	gate, err := NewGate(Config{Name: "node-a", NATS: fmt.Sprintf("nats://127.0.0.1:%d", free), Logger: claimQuiet})
	if err != nil {
		t.Fatal(err)
	}
	p, f, err := assembleNode(appliance.Config{DataDir: t.TempDir(), Logger: claimQuiet}, gate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the fleet waits for NATS", func() bool {
		return strings.Contains(fmt.Sprint(gate.Ready()), "NATS at")
	})
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not end a join under way")
	}
	if err := f.Err(); err != nil {
		t.Fatalf("a fleet stopped while joining ended with %v", err)
	}
	if _, ok := gate.Holds("g"); ok || gate.Ready() == nil {
		t.Fatal("the gate opened for a fleet that never joined")
	}
}

// startReady opens node name of a fleet routed on routes and starts its
// fleet, and returns it without waiting for the join (no worker is
// registered); its gate's Ready says when it has joined. A group write made before the join
// is checked to be refused as unavailable, as every write during the join
// is. Everything it logs goes to logs when given.
func startReady(t *testing.T, name string, cluster int, routes []string, logs ...io.Writer) *fleetNode {
	t.Helper()
	dir := t.TempDir()
	log := claimQuiet
	if len(logs) > 0 {
		log = slog.New(slog.NewJSONHandler(io.MultiWriter(logs...), &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
	}
	gate, err := NewGate(Config{Name: name, Listen: "127.0.0.1:0", ClusterListen: fmt.Sprintf("127.0.0.1:%d", cluster), Routes: routes,
		Dir: dir + "/nats", ClaimTTL: 30 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	p, f, err := assembleNode(appliance.Config{DataDir: dir, Logger: claimQuiet}, gate)
	if err != nil {
		t.Fatal(err)
	}
	app := p.App
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
		if err := write.err(); leasehold.KindOf(err) != leasehold.KindUnavailable {
			t.Errorf("%s: %s while joining: %v (%s); want unavailable (503)", name, write.what, err, leasehold.KindOf(err))
		}
	}
	n := &fleetNode{name: name, dir: dir, app: app, db: p.DB, fleet: f, stop: p.Stop}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return n
}

// waitReady polls nodes' Ready until each has joined (at most 60 s) and
// returns how long each took from start.
func waitReady(t *testing.T, start time.Time, nodes ...*fleetNode) {
	t.Helper()
	for _, n := range nodes {
		poll.Eventually(t, 60*time.Second, n.name+" ready", func() bool { return n.fleet.gate.Ready() == nil })
		t.Logf("%s ready %.1f s after the start", n.name, time.Since(start).Seconds())
	}
}

// readyRoutes are the cluster ports of a fleet of three on loopback and
// the routes each node is given.
func readyRoutes(t *testing.T) ([]int, []string) {
	ports := []int{natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return ports, routes
}

// TestFleetReady times a fleet forming: three nodes started together are
// ready within seconds (the figure is printed, not asserted: a loaded
// machine is slower). While a node joins, writes on groups are refused
// as unavailable, all alike.
func TestFleetReady(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ports, routes := readyRoutes(t)
	start := time.Now()
	var nodes []*fleetNode
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, startReady(t, name, ports[i], routes))
	}
	waitReady(t, start, nodes...)
	if _, _, err := nodes[0].app.Coordinator.PutGroup(context.Background(), "alt.joined", store.GroupSpec{}); err != nil {
		t.Fatalf("PUT /groups once joined: %v", err)
	}
}
