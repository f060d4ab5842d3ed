package fleet

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// ownNode is one node of an ownership test: its own catalog holding group
// "g", its claims on a shared NATS, and a registered worker.
type ownNode struct {
	*dumpNode
	claims *Claims
	own    *Ownership
	worker int64
	stop   func()
}

func ownStart(t *testing.T, url, name, dir string) *ownNode {
	t.Helper()
	ctx := context.Background()
	fleet := &ownFleet{}
	n := &ownNode{dumpNode: dumpOpenIn(t, name, dir, fleet)}
	app, db := n.app, n.db
	// The catalog is set up before claims are wired (as each node's own).
	if nodes, _ := app.Coordinator.Nodes(ctx); len(nodes) == 0 {
		w, err := app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := app.Coordinator.PutGroup(ctx, "g", store.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
		if _, err := app.Coordinator.PlanTail(ctx, "g", 100000); err != nil {
			t.Fatal(err)
		}
		n.worker = w.ID
	} else {
		n.worker = nodes[0].ID
	}
	n.claims = claimNew(t, natstest.Connect(t, url), ClaimsConfig{Node: name})
	n.own = NewOwnership(OwnershipConfig{Owner: app.Coordinator, DB: db, Claims: n.claims, Every: 100 * time.Millisecond, Logger: claimQuiet})
	fleet.own.Store(n.own)
	runCtx, cancel := context.WithCancel(context.Background())
	n.claims.Start(runCtx)
	n.own.Start(runCtx)
	n.stop = func() { n.claims.Stop(); cancel(); n.own.Stop() }
	t.Cleanup(n.stop)
	return n
}

// lease asks for a lease and releases what it gets, reporting whether a
// group was granted.
func (n *ownNode) lease(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	g, err := n.app.Coordinator.Lease(ctx, n.worker)
	if err != nil {
		t.Fatal(err)
	}
	if g == nil {
		return false
	}
	if err := n.app.Coordinator.Release(ctx, leasehold.GroupHolder{NodeID: n.worker, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestOwnershipLeasesOnlyClaimed: two nodes have group "g"; only the one
// holding its claim leases it. Killed (claims closed, no release), the
// owner stops leasing at once and the other node leases "g" once the
// claim lapses; restarted, the old owner finds the claim gone and leases
// nothing.
func TestOwnershipLeasesOnlyClaimed(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	dirA := t.TempDir()
	a := ownStart(t, url, "node-a", dirA)
	poll.Eventually(t, 5*time.Second, "a leases g", func() bool { return a.lease(t) })
	b := ownStart(t, url, "node-b", t.TempDir())
	// b is refused all along while a holds the claim: checked again and
	// again over a window, since a single early refusal shows nothing.
	claimThroughout(t, 500*time.Millisecond, 25*time.Millisecond, func() error {
		if b.lease(t) {
			return errors.New("b leased g while a holds its claim")
		}
		return nil
	})
	if !a.lease(t) {
		t.Fatal("a, the owner, was refused g")
	}
	// a is killed: its claim is no longer held, and it leases nothing.
	a.stop()
	killed := time.Now()
	if a.lease(t) {
		t.Fatal("a leased g after its claims closed")
	}
	poll.Eventually(t, 10*time.Second, "b leases g after a's claim lapsed", func() bool { return b.lease(t) })
	if since := time.Since(killed); since < claimTestTTL*3/4 {
		t.Fatalf("b leased g %s after a was killed, before a's claim could lapse (TTL %s)", since, claimTestTTL)
	}
	// a restarted on its catalog: g is b's now.
	a.app.Close()
	a2 := ownStart(t, url, "node-a", dirA)
	claimThroughout(t, 500*time.Millisecond, 25*time.Millisecond, func() error {
		if a2.lease(t) {
			return errors.New("restarted a leased g, which b owns")
		}
		return nil
	})
	if got, err := b.db.OwnedGroups(context.Background()); err != nil || len(got) != 1 {
		t.Fatalf("b owns %v, %v; want [g]", got, err)
	}
	if got, err := a2.db.OwnedGroups(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("restarted a owns %v, %v; want none", got, err)
	}
}

// TestOwnershipReleasesIdleClaims: a claim on a group no longer in work
// here is released at its next renewal instead of renewed (the group
// disowned here first), and an idle worker's leases claim it back.
func TestOwnershipReleasesIdleClaims(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	ctx := context.Background()
	fleet := &ownFleet{}
	app, db, err := openApp(appliance.Config{DataDir: t.TempDir(), HistoryMinFreeBytes: 0, Logger: claimQuiet, Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	var settled atomic.Bool // the group's events and snapshot have left the node
	keeper := NewKeeper(db, 50*time.Millisecond, settledFunc(func(group string) bool { return group != "g" || settled.Load() }))
	claims := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "node-a", Keeper: keeper})
	own := NewOwnership(OwnershipConfig{Owner: app.Coordinator, DB: db, Claims: claims, Keeper: keeper, Every: 50 * time.Millisecond, Logger: claimQuiet})
	fleet.own.Store(own)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	claims.Start(runCtx)
	own.Start(runCtx)
	defer own.Stop()
	w, err := app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := app.Coordinator.PutGroup(ctx, "g", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Coordinator.PlanTail(ctx, "g", 100000); err != nil {
		t.Fatal(err)
	}

	// The first lease claims the group at once: no empty answer first.
	g, err := app.Coordinator.Lease(ctx, w.ID)
	if err != nil || g == nil {
		t.Fatalf("the first lease of a group of this node's own: %v, %v; want it granted", g, err)
	}
	// Held, the claim is renewed and kept: over a TTL's renewals, so
	// checked across that window.
	claimThroughout(t, claimTestTTL, 10*time.Millisecond, func() error {
		if !claims.Held("g") {
			return errors.New("the claim of a held group was not kept")
		}
		return nil
	})
	if err := app.Coordinator.Release(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		t.Fatal(err)
	}
	// Idle but not settled, it is kept: a peer claiming it now would take
	// up an older window than this node's newest. Kept means through
	// several renewals, each of which could release it: a window.
	claimThroughout(t, 3*claimTestTTL, 10*time.Millisecond, func() error {
		if !claims.Held("g") {
			return errors.New("the claim of an idle group not yet settled was released")
		}
		return nil
	})
	settled.Store(true)
	poll.Eventually(t, 3*claimTestTTL, "the idle group's claim is released", func() bool { return !claims.Held("g") })
	// Held no more comes first (nothing is leased on it from here), then
	// the claim leaves the bucket.
	poll.Eventually(t, 5*time.Second, "the released claim gone from the bucket", func() bool {
		_, _, err := claims.Owner(ctx, "g")
		return leasehold.KindOf(err) == leasehold.KindNotFound
	})
	// Released, it is disowned here: an idle worker's lease offers it and
	// claims it back.
	poll.Eventually(t, 5*time.Second, "an idle worker gets the group back", func() bool {
		g, err := app.Coordinator.Lease(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		return g != nil
	})
}

// TestOwnershipRestartRefusesOldFences: a node killed while its worker
// holds a group and restarted on its catalog answers that worker's holder
// calls at its old fence with lease lost, from the moment it is back and
// for good, whether the group's claim then goes to a peer or back to the
// restarted node (a claim won anew ends every lease of the earlier one).
func TestOwnershipRestartRefusesOldFences(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	dirA := t.TempDir()
	a := ownStart(t, url, "node-a", dirA)
	var held *leasehold.Grant
	poll.Eventually(t, 5*time.Second, "a leases g", func() bool {
		g, err := a.app.Coordinator.Lease(ctx, a.worker)
		if err != nil {
			t.Fatal(err)
		}
		held = g
		return g != nil
	})
	if err := a.app.Coordinator.Heartbeat(ctx, leasehold.GroupHolder{NodeID: a.worker, GroupID: held.Group.ID, Fence: held.Fence}); err != nil {
		t.Fatalf("the holder's heartbeat before the kill: %v", err)
	}
	// Killed: the catalog closed with the lease row still in it (closed
	// first, so the claims' ending disowns nothing), the claims left to
	// lapse.
	a.app.Close()
	a.stop()
	a2 := ownStart(t, url, "node-a", dirA)
	b := ownStart(t, url, "node-b", t.TempDir())
	oldFenceRefused := func(when string) {
		t.Helper()
		err := a2.app.Coordinator.Heartbeat(ctx, leasehold.GroupHolder{NodeID: a2.worker, GroupID: held.Group.ID, Fence: held.Fence})
		if leasehold.KindOf(err) != leasehold.KindLeaseLost {
			t.Fatalf("%s: the old holder's heartbeat at fence %d answered %v, want lease lost", when, held.Fence, err)
		}
	}
	oldFenceRefused("at once after the restart")
	poll.Eventually(t, 6*claimTestTTL, "g leased again after the restart", func() bool {
		oldFenceRefused("while the claim is open")
		return b.lease(t) || a2.lease(t)
	})
	oldFenceRefused("after the group was leased again")
}

// settledFunc is an Adoption that adopts nothing and says a group is
// settled as its function does.
type settledFunc func(group string) bool

func (settledFunc) Adopt(context.Context, string) error { return nil }

func (f settledFunc) Settled(_ context.Context, group string) bool { return f(group) }
