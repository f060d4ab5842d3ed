package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/poll"
)

// fleetNode is a served node of a test fleet with its admin client.
type fleetNode struct {
	*servedNode
	name  string
	data  string
	args  []string // its serve flags, to start it again on its data
	token string   // the admin token, for the dashboard
	admin *client.Client
}

// fleetClaimTTL is the claim TTL of a serveFleet fleet, the measure of
// its waits (formedWithin, stepWithin).
const fleetClaimTTL = 4 * time.Second

// serveFleet runs a fleet of real nodes named names on loopback, each
// routed to all the others, and waits until every one is ready.
func serveFleet(t *testing.T, secret string, names ...string) []*fleetNode {
	t.Helper()
	// Every port the nodes listen on is taken in one call, so a node's
	// own listener left to the system cannot be handed a later node's
	// route port (TestRollingStart's node-b was, once).
	k := len(names)
	ports := freePorts(t, 3*k)
	routes, clients, https := ports[:k], ports[k:2*k], ports[2*k:]
	nodes := make([]*fleetNode, len(names))
	for i, name := range names {
		data := t.TempDir()
		args := append([]string{"--data", data, "--name", name, "--nats-secret-file", secret, "--claim-ttl", fleetClaimTTL.String(), "--lease-ttl", "3s",
			"--listen", fmt.Sprintf("127.0.0.1:%d", https[i]), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", clients[i])}, routeArgs(routes, i)...)
		n := serveNode(t, args...)
		token := n.adminToken(t)
		nodes[i] = &fleetNode{servedNode: n, name: name, data: data, args: args, token: token, admin: client.New(n.url, token)}
	}
	for _, n := range nodes {
		pollReady(t, n.url, 120*time.Second)
	}
	return nodes
}

// TestDeleteTravels: in a fleet of two real nodes, a group owned by
// node-b is deleted through node-a: refused while a worker holds it (the
// refusal carried back from its owner), then deleted at both nodes, and
// not made again by the events of it still in the stream; a group made
// anew under the same name afterwards is a group again at both.
func TestDeleteTravels(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a two-node fleet takes a while")
	}
	nodes := serveFleet(t, natsSecret(t, "delete-travels-secret-0123456789"), "node-a", "node-b")
	a, b := nodes[0], nodes[1]
	fleet := servedMembers(nodes)
	// Each node is ready alone first: what one does reaches the other
	// once the fleet is formed.
	waitFleetFormed(t, formedWithin(fleetClaimTTL), fleet)
	ctx := context.Background()
	rs := int64(100)
	const g = "alt.delete.travels"
	if _, _, err := b.admin.PutGroup(ctx, g, client.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.PlanTail(ctx, g, 500); err != nil {
		t.Fatal(err)
	}
	untilFleet(t, stepWithin(fleetClaimTTL), "node-b's group seen at node-a", fleet, func() error {
		d, err := a.admin.Group(ctx, g)
		if err == nil && (d.Peer == nil || d.Peer.Owner != "node-b") {
			err = fmt.Errorf("%s at node-a: peer %+v, want owned by node-b", g, d.Peer)
		}
		return err
	})
	w, err := b.admin.RegisterNode(ctx, client.NodeSpec{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	atB := client.New(b.url, w.Token)
	grant, err := atB.Lease(ctx)
	if err != nil || grant == nil {
		t.Fatalf("a lease at node-b: %+v, %v\nwhat each node saw:%s", grant, err, fleetSeen(fleet))
	}
	if err := a.admin.DeleteGroup(ctx, g); !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "held") {
		t.Fatalf("deleting a held group through node-a: %v; want a conflict saying it is held\nwhat each node saw:%s", err, fleetSeen(fleet))
	}
	if err := atB.Release(ctx, grant.Group.ID, grant.Fence); err != nil {
		t.Fatal(err)
	}
	if err := a.admin.DeleteGroup(ctx, g); err != nil {
		t.Fatalf("deleting node-b's group through node-a: %v\nwhat each node saw:%s", err, fleetSeen(fleet))
	}
	for _, n := range nodes {
		untilFleet(t, stepWithin(fleetClaimTTL), g+" gone at "+n.name, fleet, func() error {
			if _, err := n.admin.Group(ctx, g); !errors.Is(err, leasehold.ErrNotFound) {
				return fmt.Errorf("%s at %s: %v, want not found", g, n.name, err)
			}
			return nil
		})
	}
	// The group's earlier events are in the stream still; a node folding
	// the stream from its start (as one joining does) takes none of them.
	// Each node's own fold has passed them already, so the check is that
	// the group stays gone while the nodes go on folding.
	if _, err := b.admin.PlanTail(ctx, g, 600); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("planning the deleted group at node-b: %v; want not found", err)
	}
	if _, _, err := a.admin.PutGroup(ctx, g, client.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatalf("making %s anew at node-a: %v\nwhat each node saw:%s", g, err, fleetSeen(fleet))
	}
	untilFleet(t, stepWithin(fleetClaimTTL), "the group made anew seen at node-b", fleet, func() error {
		d, err := b.admin.Group(ctx, g)
		if err == nil && (d.Peer == nil || d.Peer.Owner != "node-a") {
			err = fmt.Errorf("%s at node-b: peer %+v, want owned by node-a", g, d.Peer)
		}
		return err
	})
}

// TestFleetRemove: in a fleet of three real nodes, node-c is removed at
// node-a. Removing node-a through itself is refused, a name no member
// has is not found, and node-c while it
// runs unless forced, saying why. Forced: node-c leaves the fleet (its
// run ends saying it was removed), it leaves node-a's and node-b's peers
// and their members gauge, the token of a worker registered at node-c is
// refused at node-a (where it had visited), and node-c's group goes on at
// the others. Approved again, the removal is gone (approving twice is
// not found), and node-c started again is a member again, its worker let
// in at node-a once more.
func TestFleetRemove(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	nodes := serveFleet(t, natsSecret(t, "fleet-remove-secret-0123456789"), "node-a", "node-b", "node-c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	rs := int64(100)
	const g = "alt.remove.c"
	if _, _, err := c.admin.PutGroup(ctx, g, client.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	wc, err := c.admin.RegisterNode(ctx, client.NodeSpec{Name: "wc"})
	if err != nil {
		t.Fatal(err)
	}
	atA := client.New(a.url, wc.Token)
	poll.Until(t, 30*time.Second, "node-c's worker let in at node-a", func() error {
		_, err := atA.Lease(ctx)
		return err
	})
	for _, n := range []*fleetNode{a, b} {
		poll.Until(t, 30*time.Second, "node-c's group seen at "+n.name, func() error {
			_, err := n.admin.Group(ctx, g)
			return err
		})
	}

	if err := a.admin.RemoveMember(ctx, "node-a", false); !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "talking to") {
		t.Errorf("removing node-a through itself: %v; want invalid, saying it is the node talked to", err)
	}
	if err := a.admin.RemoveMember(ctx, "node-z", false); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("removing node-z, no member: %v; want not found", err)
	}
	if err := a.admin.RemoveMember(ctx, "node-c", false); !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "running") {
		t.Fatalf("removing node-c while it runs: %v; want a conflict saying it runs", err)
	}
	if err := a.admin.RemoveMember(ctx, "node-c", true); err != nil {
		t.Fatalf("removing node-c by force: %v", err)
	}
	select {
	case err := <-c.done:
		if err == nil || !strings.Contains(err.Error(), "removed from the fleet") {
			t.Errorf("node-c's run ended with %v; want it removed from the fleet", err)
		}
		c.done <- nil // its cleanup's stop returns at once
	case <-time.After(60 * time.Second):
		t.Fatalf("node-c still runs a minute after its removal\n%s", c.log.String())
	}

	for _, n := range []*fleetNode{a, b} {
		poll.Until(t, 30*time.Second, "node-c gone from "+n.name+"'s peers and members gauge", func() error {
			st, err := n.admin.Peers(ctx)
			if err != nil {
				return err
			}
			for _, p := range st.Peers {
				if p.Name == "node-c" {
					return fmt.Errorf("node-c listed: %+v", p)
				}
			}
			m := metricsText(t, n.url)
			if !strings.Contains(m, `leasehold_peer_members{state="down"} 0`) || !strings.Contains(m, `leasehold_peer_members{state="up"} 1`) {
				return errors.New("the members gauge still counts node-c")
			}
			return nil
		})
	}
	poll.Eventually(t, 15*time.Second, "node-c's worker refused at node-a", func() bool {
		_, err := atA.Lease(ctx)
		return errors.Is(err, leasehold.ErrUnauthorized)
	})
	poll.Until(t, 60*time.Second, "node-c's group planned at node-a once taken over", func() error {
		_, err := a.admin.PlanTail(ctx, g, 300)
		return err
	})
	poll.Until(t, 30*time.Second, "node-c's group owned by another at node-b", func() error {
		d, err := b.admin.Group(ctx, g)
		if err == nil && d.Peer != nil && d.Peer.Owner == "node-c" {
			err = errors.New("still node-c's")
		}
		return err
	})

	if err := b.admin.ApproveMember(ctx, "node-c"); err != nil {
		t.Fatalf("approving node-c again: %v", err)
	}
	if err := a.admin.ApproveMember(ctx, "node-c"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("approving node-c twice: %v; want not found", err)
	}
	// Started again on its data, node-c is a member again: listed at
	// node-a, its worker let in there once more (its part rebuilt from
	// its dump).
	serveNode(t, c.args...)
	poll.Until(t, 60*time.Second, "node-c back among node-a's peers, its worker let in there", func() error {
		st, err := a.admin.Peers(ctx)
		if err != nil {
			return err
		}
		back := false
		for _, p := range st.Peers {
			back = back || (p.Name == "node-c" && p.State == "up")
		}
		if !back {
			return errors.New("node-c not up at node-a")
		}
		_, err = atA.Lease(ctx)
		return err
	})
}

// metricsText is url's /metrics.
func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
