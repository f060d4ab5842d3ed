package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// TestTokenTravels: in a fleet of two real nodes, a worker node registered
// at node-a (one token) leases, heartbeats, finishes ranges at node-b
// without being registered there, and is not listed among node-b's own
// nodes. Its token changed at node-a: the old one is refused at node-b
// within seconds, and the new one holds the same lease there. Deleted at
// node-a: refused at node-b, and what it held there released. A name
// registered at both nodes keeps node-a's node of it out at node-b.
func TestTokenTravels(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a two-node fleet takes a while")
	}
	secret := natsSecret(t, "token-travels-secret-0123456789")
	routes := freePorts(t, 2)
	dataA, dataB := t.TempDir(), t.TempDir()
	a := serveNode(t, pairArgs(secret, dataA, "node-a", routes[0], routes[1])...)
	b := serveNode(t, pairArgs(secret, dataB, "node-b", routes[1], routes[0])...)
	const claimTTL = 4 * time.Second // pairArgs'
	pollReady(t, a.url, formedWithin(claimTTL))
	pollReady(t, b.url, formedWithin(claimTTL))
	adminOf := func(url, data string) *client.Client {
		token, err := os.ReadFile(filepath.Join(data, "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		return client.New(url, strings.TrimSpace(string(token)))
	}
	adminA, adminB := adminOf(a.url, dataA), adminOf(b.url, dataB)
	fleet := []fleetMember{
		{name: "node-a", admin: func() *client.Client { return adminA }, log: a.log.String},
		{name: "node-b", admin: func() *client.Client { return adminB }, log: b.log.String},
	}
	// Each node is ready alone first: a token made at node-a works at
	// node-b once the fleet is formed and node-b folds node-a's events.
	waitFleetFormed(t, formedWithin(claimTTL), fleet)
	step := stepWithin(claimTTL)
	// fatalf is t.Fatalf with what each node saw.
	fatalf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nwhat each node saw:%s", append(args, fleetSeen(fleet))...)
	}
	// eventually is poll.Eventually failing with what each node saw.
	eventually := func(what string, cond func() bool) {
		t.Helper()
		untilFleet(t, step, what, fleet, func() error {
			if !cond() {
				return errors.New("not yet")
			}
			return nil
		})
	}
	ctx := context.Background()

	rs := int64(100)
	if _, _, err := adminB.PutGroup(ctx, "alt.travel", client.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := adminB.PlanTail(ctx, "alt.travel", 300); err != nil {
		t.Fatal(err)
	}
	w, err := adminA.RegisterNode(ctx, client.NodeSpec{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	registered := time.Now()

	// At b with a's token: let in once b folds a's event of w.
	atB := client.New(b.url, w.Token)
	var g *client.Grant
	untilFleet(t, step, "a lease at node-b with node-a's token", fleet, func() error {
		var err error
		g, err = atB.Lease(ctx)
		if err == nil && g == nil {
			err = errors.New("nothing granted")
		}
		return err
	})
	t.Logf("node-a's token worked at node-b %v after its registration", time.Since(registered).Round(time.Millisecond))
	if _, err := atB.Heartbeat(ctx, g.Group.ID, g.Fence); err != nil {
		fatalf("heartbeat at node-b: %v", err)
	}
	r, err := atB.Next(ctx, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		fatalf("next at node-b: %+v, %v", r, err)
	}
	if f, err := atB.Finish(ctx, r.ID, g.Fence, 7); err != nil || f.Status != leasehold.StatusDone {
		fatalf("finish at node-b: %+v, %v", f, err)
	}
	if d, err := adminB.Group(ctx, "alt.travel"); err != nil || d.Lease == nil || d.Lease.Node != "w" || d.Ranges[leasehold.StatusDone] != 1 {
		fatalf("alt.travel at node-b: %+v, %v; want held by w, one range done", d, err)
	}
	if ns, err := adminB.Nodes(ctx); err != nil || len(ns) != 1 || ns[0].Name != "w" || ns[0].Home != "node-a" {
		fatalf("node-b's nodes: %+v, %v; want w, a visitor from node-a", ns, err)
	}

	// A pause of w at b (where it is node 1, b having none of its own)
	// is carried to a, its home, and comes back to b from there; so is
	// its resume. Its token is changed only at a.
	if n, err := adminB.PauseNode(ctx, 1, "ops"); err != nil || !n.Paused || n.Home != "node-a" || n.ID != 1 {
		fatalf("pausing w at node-b: %+v, %v; want paused, carried to node-a", n, err)
	}
	for _, c := range []struct {
		at     *client.Client
		id     int64
		paused bool
	}{{adminA, w.ID, true}, {adminB, 1, true}} {
		untilFleet(t, step, "w paused at both nodes", fleet, func() error {
			n, err := nodeByID(ctx, c.at, c.id)
			if err == nil && (!n.Paused || n.PausedBy != "ops") {
				err = fmt.Errorf("w: paused %v by %q", n.Paused, n.PausedBy)
			}
			return err
		})
	}
	if _, err := adminB.ResumeNode(ctx, 1, "ops"); err != nil {
		fatalf("resuming w at node-b: %v", err)
	}
	untilFleet(t, step, "w resumed at node-b", fleet, func() error {
		n, err := nodeByID(ctx, adminB, 1)
		if err == nil && n.Paused {
			err = errors.New("w still paused")
		}
		return err
	})
	if _, err := atB.RotateNodeToken(ctx, 1); !errors.Is(err, leasehold.ErrConflict) {
		t.Errorf("w's own new token at node-b: %v; want a conflict", err)
	}

	// A new token at a: the old one is refused at b, the new one holds
	// the same lease there.
	fresh, err := adminA.RotateNodeToken(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	eventually("the old token refused at node-b", func() bool {
		_, err := atB.Heartbeat(ctx, g.Group.ID, g.Fence)
		return errors.Is(err, leasehold.ErrUnauthorized)
	})
	t.Logf("the old token was refused at node-b %v after the new one was made at node-a", time.Since(rotated).Round(time.Millisecond))
	atB = client.New(b.url, fresh)
	if _, err := atB.Heartbeat(ctx, g.Group.ID, g.Fence); err != nil {
		fatalf("the new token at node-b: %v", err)
	}

	// Deleted at a: refused at b, its group there released.
	if err := adminA.DeleteNode(ctx, w.ID, false); err != nil {
		t.Fatal(err)
	}
	eventually("the deleted node's token refused at node-b", func() bool {
		_, err := atB.Heartbeat(ctx, g.Group.ID, g.Fence)
		return errors.Is(err, leasehold.ErrUnauthorized)
	})
	if d, err := adminB.Group(ctx, "alt.travel"); err != nil || d.Lease != nil {
		fatalf("alt.travel at node-b after w's deletion: %+v, %v; want released", d.Lease, err)
	}

	// A visitor deleted at b (revoked where it works): deleted at a, its
	// home, and its token refused at both.
	v, err := adminA.RegisterNode(ctx, client.NodeSpec{Name: "v"})
	if err != nil {
		t.Fatal(err)
	}
	vAtB := client.New(b.url, v.Token)
	untilFleet(t, step, "v let in at node-b", fleet, func() error { _, err := vAtB.Lease(ctx); return err })
	var vid int64
	ns, err := adminB.Nodes(ctx)
	for _, n := range ns {
		if n.Name == "v" {
			vid = n.ID
		}
	}
	if err != nil || vid == 0 {
		fatalf("v among node-b's nodes: %+v, %v", ns, err)
	}
	// It holds alt.travel at b (its lease above): forced, as at its home.
	if err := adminB.DeleteNode(ctx, vid, false); !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "force") {
		fatalf("deleting the visitor v at node-b while it holds a group there: %v; want a conflict asking for force", err)
	}
	if err := adminB.DeleteNode(ctx, vid, true); err != nil {
		fatalf("deleting the visitor v at node-b: %v", err)
	}
	if _, err := nodeByID(ctx, adminA, v.ID); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("v at node-a, its home, after its deletion at node-b: %v; want not found", err)
	}
	for _, at := range []*client.Client{vAtB, client.New(a.url, v.Token)} {
		eventually("v's token refused", func() bool {
			_, err := at.Lease(ctx)
			return errors.Is(err, leasehold.ErrUnauthorized)
		})
	}

	// A name registered at both: a's node of that name is kept out at b,
	// and its worker is told why.
	if _, err := adminB.RegisterNode(ctx, client.NodeSpec{Name: "twice"}); err != nil {
		t.Fatal(err)
	}
	twice, err := adminA.RegisterNode(ctx, client.NodeSpec{Name: "twice"})
	if err != nil {
		t.Fatal(err)
	}
	eventually("a's twice refused at node-b, saying why", func() bool {
		_, err := client.New(b.url, twice.Token).Lease(ctx)
		return errors.Is(err, leasehold.ErrUnauthorized) && strings.Contains(err.Error(), "a name is one node in a fleet")
	})
}

// nodeByID is node id as c lists it. Errors: c's, not found.
func nodeByID(ctx context.Context, c *client.Client, id int64) (leasehold.Node, error) {
	ns, err := c.Nodes(ctx)
	if err != nil {
		return leasehold.Node{}, err
	}
	for _, n := range ns {
		if n.ID == id {
			return n, nil
		}
	}
	return leasehold.Node{}, fmt.Errorf("node %d: %w", id, leasehold.ErrNotFound)
}
