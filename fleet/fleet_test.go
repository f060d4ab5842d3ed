package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/store"
)

// fleetTTL is the claim TTL of the fleet tests: short, so a dead owner's
// groups move within seconds.
const fleetTTL = 3 * time.Second

// fleetNode is one node of a test fleet: its appliance, its fleet and a
// worker registered at it.
type fleetNode struct {
	name   string
	dir    string
	app    *appliance.Appliance
	db     *store.DB
	fleet  *Fleet
	worker int64
	stop   func()
}

// fleetStart opens node name on dir and joins it to the fleet whose
// embedded servers route to each other on routes.
func fleetStart(t *testing.T, name, dir string, cluster int, routes []string) *fleetNode {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)
	return fleetUp(t, dir, appliance.Config{DataDir: dir, LeaseTTL: 2 * time.Second, Logger: log}, Config{
		Name: name, Listen: "127.0.0.1:0", ClusterListen: fmt.Sprintf("127.0.0.1:%d", cluster), Routes: routes,
		Dir: dir + "/nats", ClaimTTL: fleetTTL, Logger: log,
	})
}

// fleetUp is the fleet tests' one node: assembled as cmd/leasehold
// assembles one (joinNode), joined, stopped with the test (or by its
// stop, once), with a worker registered at it (the one its catalog in
// dir holds already, when restarted on it).
func fleetUp(t *testing.T, dir string, appCfg appliance.Config, cfg Config) *fleetNode {
	t.Helper()
	app, db, f, err := joinNode(context.Background(), appCfg, cfg)
	if err != nil {
		t.Fatalf("%s joining: %v", cfg.Name, err)
	}
	n := &fleetNode{name: cfg.Name, dir: dir, app: app, db: db, fleet: f}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			f.Stop()
			app.Close()
		})
	}
	t.Cleanup(n.stop)
	nodes, err := app.Coordinator.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) > 0 {
		n.worker = nodes[0].ID
	} else {
		w, err := app.Coordinator.RegisterNode(context.Background(), appliance.NodeSpec{Name: "w-" + cfg.Name})
		if err != nil {
			t.Fatal(err)
		}
		n.worker = w.ID
	}
	return n
}

// fleetOf starts three clustered nodes at once (a clustered JetStream
// needs its quorum to set up the stream).
func fleetOf(t *testing.T) ([]*fleetNode, []int, []string) {
	t.Helper()
	ports := []int{natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	nodes := make([]*fleetNode, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i] = fleetStart(t, name, t.TempDir(), ports[i], routes)
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		if n == nil {
			t.FailNow()
		}
	}
	return nodes, ports, routes
}

// window is a worker's index of a group: one byte per id from 1, set once
// the id is indexed. Its snapshot is the gzip of the bytes up to next.
type window []byte

func (w window) next() int64 {
	for i, b := range w {
		if b == 0 {
			return int64(i) + 1
		}
	}
	return int64(len(w)) + 1
}

// fleetHistory records who held the group when, for the exclusivity check.
type fleetHistory struct {
	mu    sync.Mutex
	spans []fleetSpan
}

type fleetSpan struct {
	node        string
	fence       int64
	from, until time.Time
}

func (h *fleetHistory) add(s fleetSpan) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spans = append(h.spans, s)
}

// work leases at n until it holds group and then indexes up to max ranges
// of it into w (nil: resume from the lease's snapshot), uploading a
// snapshot after each range. It returns the window and whether the group
// was finished.
func (n *fleetNode) work(t *testing.T, ctx context.Context, size int64, max int, h *fleetHistory) (window, bool) {
	t.Helper()
	c := n.app.Coordinator
	g, err := c.Lease(ctx, n.worker)
	if err != nil {
		t.Fatalf("%s lease: %v", n.name, err)
	}
	if g == nil {
		return nil, false
	}
	span := fleetSpan{node: n.name, fence: g.Fence, from: time.Now()}
	defer func() { span.until = time.Now(); h.add(span) }()
	w := make(window, size)
	if g.Snapshot != nil {
		f, snap, err := n.app.Snapshots.Open(ctx, g.Group.ID)
		if err != nil {
			t.Fatalf("%s opening its snapshot: %v", n.name, err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		f.Close()
		if err != nil || int64(len(b)) != snap.Next-1 {
			t.Fatalf("%s snapshot: %d bytes for next %d, %v", n.name, len(b), snap.Next, err)
		}
		copy(w, b)
	}
	for done := 0; done < max; done++ {
		r, err := c.Next(ctx, leasehold.GroupHolder{NodeID: n.worker, GroupID: g.Group.ID, Fence: g.Fence})
		if err != nil {
			t.Fatalf("%s next: %v", n.name, err)
		}
		if r == nil {
			span.until = time.Now()
			c.Release(ctx, leasehold.GroupHolder{NodeID: n.worker, GroupID: g.Group.ID, Fence: g.Fence})
			return w, true
		}
		for id := r.Next; id <= r.End; id++ {
			if w[id-1] != 0 {
				t.Fatalf("%s indexed id %d twice (range %d..%d)", n.name, id, r.Start, r.End)
			}
			w[id-1] = 1
		}
		if _, err := c.Finish(ctx, leasehold.RangeHolder{NodeID: n.worker, RangeID: r.ID, Fence: g.Fence}, r.End-r.Next+1); err != nil {
			t.Fatalf("%s finish: %v", n.name, err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(w[:w.next()-1])
		zw.Close()
		if _, err := n.app.Snapshots.Put(ctx, appliance.Upload{GroupID: g.Group.ID, NodeID: n.worker, Fence: g.Fence,
			Next: w.next(), Body: &buf, Gzip: true}); err != nil {
			t.Fatalf("%s snapshot: %v", n.name, err)
		}
		span.until = time.Now()
	}
	return w, false
}

// TestFleet: three nodes with clustered embedded servers share one
// catalog. A group made on A is seen on B and C and leased only through
// its owner; A's progress shows on B. A is killed (no release): after the
// claim TTL another node owns the group, resumes from the replicated
// snapshot, and the final window equals an uninterrupted one. A restarted
// finds its claim gone, leases nothing of the group and folds the new
// owner's state. No two nodes ever held the group at once.
//
// Serial: in parallel, on a fresh-clone run's loaded machine, node-a's
// life once went unrenewed as the group was made, and the write was
// answered unavailable (try again).
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ctx := context.Background()
	nodes, ports, routes := fleetOf(t)
	a, b, c := nodes[0], nodes[1], nodes[2]
	// Two of the three may have placed two copies before the third was
	// up: the copy raiser raises them.
	poll.Until(t, 60*time.Second, "three copies on three routed nodes", func() error { return copiesAre(a.fleet.js, 3) })
	// A node joining through a's server knows no routes (it would set up
	// one copy): the fleet's three stay.
	{
		app, _, d, err := joinNode(ctx, appliance.Config{DataDir: t.TempDir(), Logger: claimQuiet},
			Config{Name: "node-d", NATS: a.fleet.url, ClaimTTL: fleetTTL, Logger: claimQuiet})
		if err != nil {
			t.Fatal(err)
		}
		d.Stop()
		app.Close()
		fleetReplicas(t, a, "after a node without routes joined", 3)
	}
	const size, rangeSize = 200, 10
	const total = size + 50 // planned further through b, carried to a
	rs := int64(rangeSize)
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.fleet", store.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.app.Coordinator.PlanTail(ctx, "alt.fleet", size); err != nil {
		t.Fatal(err)
	}
	ranges := func(n *fleetNode, status leasehold.RangeStatus) int {
		g, err := n.db.GroupByName(ctx, "alt.fleet")
		if err != nil {
			return -1
		}
		rs, err := n.db.Ranges(ctx, g.ID, status, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}
	for _, n := range []*fleetNode{b, c} {
		poll.Eventually(t, 10*time.Second, n.name+" sees the group and its ranges", func() bool { return ranges(n, "planned") == size/rangeSize })
		if origin, err := n.db.GroupOrigin(ctx, mustGroup(t, n, "alt.fleet").ID); err != nil || origin != "node-a" {
			t.Fatalf("%s: the group's origin is %q, %v; want node-a", n.name, origin, err)
		}
	}

	// Only A, which claims it at its first lease, leases the group.
	h := &fleetHistory{}
	var wA window
	poll.Eventually(t, 10*time.Second, "a leases the group", func() bool {
		var done bool
		wA, done = a.work(t, ctx, total, 6, h)
		if done {
			t.Fatal("a finished the group early")
		}
		return wA != nil
	})
	for _, n := range []*fleetNode{b, c} {
		if w, _ := n.work(t, ctx, total, 1, h); w != nil {
			t.Fatalf("%s leased the group a owns", n.name)
		}
	}
	// An admin write at a node that does not own the group is carried to
	// its owner and answered as if made there.
	if n, err := b.app.Coordinator.PlanTail(ctx, "alt.fleet", size+50); err != nil || n != 5 {
		t.Fatalf("planning a's group at b: %d ranges, %v; want 5 planned at a", n, err)
	}
	if _, err := c.app.Coordinator.PlanTail(ctx, "alt.fleet", -1); leasehold.KindOf(err) != leasehold.KindInvalid {
		t.Fatalf("a bad plan carried to the owner: %v; want invalid", err)
	}
	poll.Eventually(t, 10*time.Second, "b sees the ranges a planned for it", func() bool {
		return ranges(b, "planned")+ranges(b, "done")+ranges(b, "leased") == total/rangeSize
	})
	poll.Eventually(t, 10*time.Second, "b sees a's finished ranges", func() bool {
		if ranges(b, "done") == 6 {
			return true
		}
		return false
	})

	// A is killed while it holds the group: no release, no goodbye.
	poll.Eventually(t, 10*time.Second, "a's snapshot is replicated", func() bool {
		info, err := b.fleet.snapshots.obs.GetInfo(ctx, "alt.fleet")
		return err == nil && info != nil && strings.Contains(fmt.Sprint(info.Metadata, info.Headers), "61")
	})
	// A still holds the group (it never released it): its span runs to
	// the kill.
	heldFrom := time.Now()
	a.fleet.claims.mu.Lock()
	lastRenewal := a.fleet.claims.lifeFrom // the start of a's last renewal of its life
	a.fleet.claims.mu.Unlock()
	a.fleet.Stop()
	a.stop()
	killed := time.Now()
	h.add(fleetSpan{node: "node-a", from: heldFrom, until: killed})

	// B or C takes over after the claim TTL and finishes from the snapshot.
	var final window
	var owner *fleetNode
	poll.Eventually(t, 30*time.Second, "another node takes the group over and finishes it", func() bool {
		for _, n := range []*fleetNode{b, c} {
			w, done := n.work(t, ctx, total, 100, h)
			if w != nil {
				// a's life, and its claim with it, stands until a TTL after
				// the server stamped a's last renewal, which started at
				// lastRenewal (about TTL/3 before the kill, later under load).
				if since := time.Since(lastRenewal); since < fleetTTL-50*time.Millisecond {
					t.Fatalf("%s leased the group %s after a's last renewal (%s after the kill), before a's life could lapse",
						n.name, since, time.Since(killed))
				}
				if !done {
					t.Fatalf("%s did not finish the group", n.name)
				}
				final, owner = w, n
				return true
			}
		}
		return false
	})
	if final.next() != total+1 {
		t.Fatalf("the final window stops at %d; want all %d ids", final.next(), total)
	}

	// A restarted on its catalog: the claim is gone, and so is the group.
	a2 := fleetStart(t, "node-a", a.dir, ports[0], routes)
	// Never leased, so checked over a window rather than once.
	claimThroughout(t, time.Second, 50*time.Millisecond, func() error {
		if w, _ := a2.work(t, ctx, total, 1, h); w != nil {
			return errors.New("restarted a leased the group another node owns")
		}
		return nil
	})
	poll.Eventually(t, 15*time.Second, "restarted a folds the new owner's state", func() bool {
		g, err := a2.db.GroupByName(ctx, "alt.fleet")
		if err != nil {
			return false
		}
		origin, _ := a2.db.GroupOrigin(ctx, g.ID)
		return origin == owner.name && ranges(a2, "done") == total/rangeSize
	})

	// Exclusivity: no two nodes' holding spans overlap.
	for i, x := range h.spans {
		for _, y := range h.spans[i+1:] {
			if x.node != y.node && x.from.Before(y.until) && y.from.Before(x.until) {
				t.Errorf("%s (fence %d, %s–%s) and %s (fence %d, %s–%s) held the group at once",
					x.node, x.fence, x.from.Format("15:04:05.000"), x.until.Format("15:04:05.000"),
					y.node, y.fence, y.from.Format("15:04:05.000"), y.until.Format("15:04:05.000"))
			}
		}
	}
}

// fleetReplicas checks the copies of the events stream and the buckets,
// as n's server reports them.
func fleetReplicas(t *testing.T, n *fleetNode, when string, want int) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{StreamName, "KV_" + PublishedBucket, "KV_" + ClaimsBucket, "KV_" + LivesBucket, snapshotStream} {
		s, err := n.fleet.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s: stream %s: %v", when, name, err)
		}
		if got := s.CachedInfo().Config.Replicas; got != want {
			t.Errorf("%s: stream %s has %d replicas, want %d", when, name, got, want)
		}
	}
}

func mustGroup(t *testing.T, n *fleetNode, name string) leasehold.Group {
	t.Helper()
	g, err := n.db.GroupByName(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// publishedAndFolded is a's and b's fleet status and how far b folded
// node-a's stream.
func publishedAndFolded(t *testing.T, ctx context.Context, a, b *fleetNode) (sa, sb leasehold.FleetStatus, folded uint64) {
	t.Helper()
	sa, err := a.fleet.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = b.fleet.Peers(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range sb.Peers {
		if p.Name == "node-a" {
			folded = p.Folded
		}
	}
	return sa, sb, folded
}

// fleetJoin joins node name, on a data dir of its own, to the fleet of the
// NATS server at url, and registers a worker there. Its warnings go to
// stderr, and everything it logs to logs when given.
func fleetJoin(t *testing.T, url, name string, logs ...io.Writer) *fleetNode {
	t.Helper()
	return fleetJoinWith(t, Config{Name: name, NATS: url, ClaimTTL: fleetTTL}, logs...)
}

// fleetJoinWith is fleetJoin with the node's fleet config as given.
func fleetJoinWith(t *testing.T, cfg Config, logs ...io.Writer) *fleetNode {
	t.Helper()
	var h slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	if len(logs) > 0 {
		h = slog.NewJSONHandler(io.MultiWriter(logs...), &slog.HandlerOptions{Level: slog.LevelInfo})
	}
	cfg.Logger = slog.New(h).With("node", cfg.Name)
	dir := t.TempDir()
	return fleetUp(t, dir, appliance.Config{DataDir: dir, LeaseTTL: time.Minute, Logger: cfg.Logger}, cfg)
}

// TestFleetStatusOutbox: a node's fleet status says how many of its events
// the stream has not acknowledged and where its last acknowledged one
// stands, so whoever watches a fleet (an operator, the fault harness's
// drain) can tell that every change made anywhere has been seen
// everywhere, and that a node cut off still holds changes no peer has.
func TestFleetStatusOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	a, b := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-b")
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.outbox", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	var last string
	poll.Eventually(t, 20*time.Second, "a's changes published and folded at b", func() bool {
		sa, _, folded := publishedAndFolded(t, ctx, a, b)
		last = fmt.Sprintf("a: unpublished %d, published %d; b folded a's to %d", sa.Unpublished, sa.Published, folded)
		return sa.Unpublished == 0 && sa.Published > 0 && folded == sa.Published
	})
	t.Log(last)

	s.Shutdown()
	s.WaitForShutdown()
	if _, err := a.app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "w-cut-off"}); err != nil {
		t.Fatal(err)
	}
	st, err := a.fleet.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unpublished < 1 {
		t.Fatalf("a registered a worker with NATS gone: %d event(s) unpublished, want at least 1", st.Unpublished)
	}
}

// TestFleetTakeoverLogLine: a node that takes a group over from a peer
// whose life lapsed says so in one structured line (the operator's record
// of an ownership change): the group, the peer it came from and the
// claim's revision.
//
// Serial: in parallel with the package's other tests, on a fresh-clone
// run's loaded machine, the takeover once took longer than 6 claim TTLs.
func TestFleetTakeoverLogLine(t *testing.T) {
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	a := fleetJoin(t, s.ClientURL(), "node-a")
	var logs syncbuf.Buffer
	b := fleetJoin(t, s.ClientURL(), "node-b", &logs)
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.moved", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.app.Coordinator.PlanTail(ctx, "alt.moved", 10000); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "b sees a's group", func() bool {
		_, err := b.db.GroupByName(ctx, "alt.moved")
		return err == nil
	})
	a.stop() // its life lapses a claim TTL later
	var g *leasehold.Grant
	if err := poll.Wait(10*fleetTTL, poll.Every, func() error {
		var err error
		if g, err = b.app.Coordinator.Lease(ctx, b.worker); err != nil {
			t.Fatal(err)
		}
		if g == nil {
			return errors.New("no grant yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("b did not lease the group a left within %s: %v; b's log:\n%s", 10*fleetTTL, err, logs.String())
	}
	// The line comes just after the group is owned (and leasable), so it
	// is waited for too.
	var lines []map[string]any
	poll.Eventually(t, 10*time.Second, "b's takeover line", func() bool {
		lines = nil
		for _, l := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == LogGroupTakenOver {
				lines = append(lines, m)
			}
		}
		return len(lines) > 0
	})
	rev := b.fleet.claims.Rev("alt.moved")
	if len(lines) != 1 || lines[0]["group"] != "alt.moved" || lines[0]["from"] != "node-a" || lines[0]["claim_rev"] != float64(rev) {
		t.Fatalf("b's takeover lines %v; want one naming alt.moved, node-a and the claim's revision %d\n%s", lines, rev, logs.String())
	}
}

// TestFleetNATSUnreachable: a node cut off from NATS keeps serving the
// group it owns until just before its claim could lapse, then stops;
// reconnected, it sends what it did meanwhile and owns the group again.
// The nodes' logs are shown when it fails: whether each reconnected,
// lost its claims and began a new life.
func TestFleetNATSUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a claim TTL")
	}
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	url := s.ClientURL()
	var logs syncbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the nodes' logs:\n%s", logs.String())
		}
	})
	a, b := fleetJoin(t, url, "node-a", &logs), fleetJoin(t, url, "node-b", &logs)
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.cut", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.app.Coordinator.PlanTail(ctx, "alt.cut", 1000000); err != nil {
		t.Fatal(err)
	}
	var g *leasehold.Grant
	poll.Eventually(t, 10*time.Second, "a leases its group", func() bool {
		var err error
		g, err = a.app.Coordinator.Lease(ctx, a.worker)
		if err != nil {
			t.Fatal(err)
		}
		return g != nil
	})
	poll.Eventually(t, 10*time.Second, "b sees a's group", func() bool {
		_, err := b.db.GroupByName(ctx, "alt.cut")
		return err == nil
	})
	// Renewed just now, so a's life, and the claim with it, stands a full
	// TTL from here at least on the server's clock.
	if err := a.fleet.claims.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	s.Shutdown()
	s.WaitForShutdown()
	cut := time.Now()

	// a's worker goes on heartbeating the lease: served until the claim
	// reaches its margin, then refused, before the claim could lapse.
	var stopped time.Time
	poll.Wait(2*fleetTTL, 20*time.Millisecond, func() error {
		err := a.app.Coordinator.Heartbeat(ctx, leasehold.GroupHolder{NodeID: a.worker, GroupID: g.Group.ID, Fence: g.Fence})
		if err == nil {
			return errors.New("still served")
		}
		if leasehold.KindOf(err) != leasehold.KindLeaseLost {
			t.Fatalf("heartbeat while cut off: %v; want lease lost", err)
		}
		stopped = time.Now()
		return nil
	})
	if stopped.IsZero() {
		t.Fatalf("a still served its group %s after NATS went away (claim TTL %s)", 2*fleetTTL, fleetTTL)
	}
	held := stopped.Sub(renewed)
	t.Logf("cut off %s after the last renewal, a served its group %s more; the claim lapses %s after that renewal",
		cut.Sub(renewed).Round(time.Millisecond), stopped.Sub(cut).Round(time.Millisecond), fleetTTL)
	if held >= fleetTTL {
		t.Fatalf("a served its group %s after its last renewal, past the claim TTL %s", held, fleetTTL)
	}
	if held < fleetTTL/3 {
		t.Fatalf("a stopped serving its group %s after its last renewal, long before its margin (TTL %s)", held, fleetTTL)
	}
	if g2, err := a.app.Coordinator.Lease(ctx, a.worker); err != nil || g2 != nil {
		t.Fatalf("a leased %v (%v) while cut off from NATS", g2, err)
	}

	// While cut off, a takes a new group; back on NATS it sends it and
	// owns its groups again.
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.while-cut", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	s2 := natstest.Start(t, opts)
	t.Cleanup(func() { s2.Shutdown(); s2.WaitForShutdown() })
	poll.Until(t, 20*time.Second, "b folds what a did while cut off", func() error {
		if _, err := b.db.GroupByName(ctx, "alt.while-cut"); err == nil {
			return nil
		}
		sa, sb, folded := publishedAndFolded(t, ctx, a, b)
		return fmt.Errorf("a connected %v, %d event(s) unpublished, published through %d; b connected %v, folded a's through %d",
			sa.Connected, sa.Unpublished, sa.Published, sb.Connected, folded)
	})
	// A worker told its lease was lost leases again: its group is a's once
	// a's claims were given up and claimed again in a new life.
	poll.Until(t, 20*time.Second, "a leases its group again", func() error {
		g, err := a.app.Coordinator.Lease(ctx, a.worker)
		if err != nil {
			t.Fatal(err)
		}
		if g != nil {
			return nil
		}
		return fmt.Errorf("the group's claim held by a: %v, by b: %v", a.fleet.claims.Held("alt.cut"), b.fleet.claims.Held("alt.cut"))
	})
}
