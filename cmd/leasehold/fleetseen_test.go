package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/poll"
)

// fleetMember is one node of a test fleet as a fleet check looks at it:
// its name, its admin client and its log as they are now (a procNode gets
// a new port, client and log buffer at each start, so they are asked for,
// not kept).
type fleetMember struct {
	name  string
	admin func() *client.Client
	log   func() string
}

// procMembers are a fleet of node processes as fleet checks see them; a
// process that has exited says so above its log.
func procMembers(nodes []*procNode) []fleetMember {
	ms := make([]fleetMember, len(nodes))
	for i, n := range nodes {
		ms[i] = fleetMember{name: n.name, admin: func() *client.Client { return n.admin }, log: func() string {
			select {
			case <-n.exited:
				return "(its process has exited)\n" + n.log.String()
			default:
				return n.log.String()
			}
		}}
	}
	return ms
}

// servedMembers are a fleet of nodes served in the test's process as
// fleet checks see them.
func servedMembers(nodes []*fleetNode) []fleetMember {
	ms := make([]fleetMember, len(nodes))
	for i, n := range nodes {
		ms[i] = fleetMember{name: n.name, admin: func() *client.Client { return n.admin }, log: n.log.String}
	}
	return ms
}

// fleetSeen is what each member saw, for a failure message: its GET
// /api/v1/peers (its view of the fleet) and the last lines of its log.
func fleetSeen(ms []fleetMember) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "\n--- %s ---\n", m.name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := m.admin().Peers(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "peers: %v\n", err)
		} else {
			fmt.Fprintf(&b, "peers: connected %v, offline %q, unpublished %d, published %d\n", st.Connected, st.Offline, st.Unpublished, st.Published)
			for _, p := range st.Peers {
				fmt.Fprintf(&b, "  %s: %s, folded %d, lag %.1fs, groups %d, nodes %d, owns %d\n", p.Name, p.State, p.Folded, p.LagS, p.Groups, p.Nodes, p.Owns)
			}
		}
		lines := strings.Split(strings.TrimRight(m.log(), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "log tail:\n%s\n", strings.Join(lines, "\n"))
	}
	return b.String()
}

// untilFleet is poll.Until for a step of a fleet: it fails with cond's
// last error and what each member saw.
func untilFleet(t *testing.T, within time.Duration, what string, ms []fleetMember, cond func() error) {
	t.Helper()
	if err := poll.Wait(within, poll.Every, cond); err != nil {
		t.Fatalf("waited %s for %s: %v\nwhat each node saw:%s", within, what, err, fleetSeen(ms))
	}
}

// waitFleetFormed waits until every member is connected to NATS and lists
// every other member up in GET /api/v1/peers: the fleet is formed, each
// node's events reach the others. A node is ready (/readyz) before its
// routes to the others are up; a step that needs a peer to see what it
// does waits for this first.
func waitFleetFormed(t *testing.T, within time.Duration, ms []fleetMember) {
	t.Helper()
	untilFleet(t, within, "the fleet to form (every member up at every node)", ms, func() error {
		for _, m := range ms {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := m.admin().Peers(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%s's peers: %w", m.name, err)
			}
			if !st.Connected || st.Offline != "" {
				return fmt.Errorf("%s: connected %v, offline %q", m.name, st.Connected, st.Offline)
			}
			for _, o := range ms {
				if o.name == m.name {
					continue
				}
				i := slices.IndexFunc(st.Peers, func(p leasehold.Peer) bool { return p.Name == o.name })
				if i < 0 || st.Peers[i].State != "up" {
					return fmt.Errorf("%s does not see %s up: %+v", m.name, o.name, st.Peers)
				}
			}
		}
		return nil
	})
}

// formedWithin bounds how long a test fleet may take to form (or a
// member to rejoin it), in the fleet's own claim TTL: a member is up once
// its life is renewed within one TTL, so a fleet forms in a few; thirty
// allow for a machine loaded many times over (the suite's packages in
// parallel under -race) and still end a test whose fleet never forms.
func formedWithin(claimTTL time.Duration) time.Duration { return 30 * claimTTL }

// stepWithin bounds one step of a formed test fleet (an event folded at
// a peer, a reload, a worker's write), in the fleet's claim TTL: in a
// healthy fleet each takes well under one, and one that takes fifteen is
// stuck, not slow.
func stepWithin(claimTTL time.Duration) time.Duration { return 15 * claimTTL }
