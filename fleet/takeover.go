package fleet

import (
	"context"
	"hash/fnv"
	"sort"
	"time"
)

// Takeover. A member found down (its life not seen for the claim TTL)
// has lost its claims, and the others take its groups over at once,
// whether or not their workers are idle. Left to the idle workers' offers
// (spread.go), a dead node's groups waited until a survivor's worker
// found nothing to do: with busy workers several claim TTLs, with no
// worker at any survivor for ever.
//
// The survivors share the dead member's groups: each takes first the
// groups it ranks first for among itself and the members up (rendezvous
// hashing of node and group names, so every node ranks alike without
// talking), and any others once the member has been down for
// takeoverGrace, in case the survivor ranked first is slow or gone too.
// A node whose own life is younger than a claim TTL (just started, or
// back from a NATS outage) takes nothing over yet: the peers it finds
// down may have been cut off with it, and are given the time to renew.
//
// Safety is the claims': a group is taken only by the compare-and-set on
// its claim, once the life its claim names is over as the lives stream's
// leader has it (Claims.Claim), so a member wrongly found down here (this
// node's watch behind) loses nothing: its claims are refused as alive.

// takeoverGrace is how long after a member is found down any survivor,
// not only the one ranked first, takes its groups.
const takeoverGrace = 2 * time.Second

// Orphans tells ownership of groups whose claims name members found down
// (Members is one).
type Orphans interface {
	// Downs is signalled when a member is found down.
	Downs() <-chan struct{}
	// Orphans lists up to max groups whose claims name a member found
	// down that this node should try to take over now; later says others
	// are left for now to the survivors ranked first for them.
	Orphans(max int) (groups []string, later bool)
}

// Downs is signalled when a member is found down (Orphans).
func (m *Members) Downs() <-chan struct{} { return m.downs }

// Orphans lists up to max groups whose claims name a member found down
// (or a node never seen here, a TTL after this node began watching),
// sorted: those this node ranks first for among itself and the members
// up, and, once their member has been down for takeoverGrace, the others
// (see Takeover above); later says some were left to others for now. It
// reads memory only.
func (m *Members) Orphans(max int) (groups []string, later bool) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	up := []string{m.self}
	late := map[string]bool{} // down members past the grace
	anyDown := false
	for node, mb := range m.members {
		switch {
		case mb.state == MemberUp:
			up = append(up, node)
		case mb.state == MemberDown:
			anyDown = true
			late[node] = now.Sub(mb.found) >= takeoverGrace
		}
	}
	// A node whose life was never seen here, a TTL after the watch began,
	// is down since then (it died before this node began watching).
	unseenFound := m.began.Add(m.ttl)
	unseen := !m.began.IsZero() && !now.Before(unseenFound)
	if (!anyDown && !unseen) || max <= 0 {
		return nil, false
	}
	for group, owner := range m.owners {
		pastGrace, down := late[owner]
		if !down && unseen && owner != m.self && m.members[owner] == nil {
			pastGrace, down = now.Sub(unseenFound) >= takeoverGrace, true
		}
		if !down {
			continue
		}
		if !pastGrace && takeoverRank(group, up) != m.self {
			later = true
			continue
		}
		groups = append(groups, group)
		if len(groups) >= max {
			break
		}
	}
	sort.Strings(groups)
	return groups, later
}

// takeoverRank is the node of nodes that ranks first for group: the one
// with the highest hash of its name and the group's.
func takeoverRank(group string, nodes []string) string {
	var best string
	var bestHash uint64
	for _, n := range nodes {
		h := fnv.New64a()
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(group))
		if v := mix64(h.Sum64()); best == "" || v > bestHash || (v == bestHash && n < best) {
			best, bestHash = n, v
		}
	}
	return best
}

// mix64 is murmur3's finaliser: FNV alone barely mixes names that differ
// in one letter (node-a, node-b), and one node would rank first for
// nearly every group.
func mix64(v uint64) uint64 {
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	v *= 0xc4ceb9fe1a85ec53
	v ^= v >> 33
	return v
}

// takeoverBehindMax bounds the groups remembered as won but not yet
// adoptable (ErrBehind), to try again at the next pass.
const takeoverBehindMax = ownershipWanted

// takeOver claims and owns the groups of members found down (o.orphans),
// with those won earlier that could not be adopted yet, and reports how
// many it tried, how many it took, and whether others are left to the
// survivors ranked first for them until the grace.
func (o *Ownership) takeOver(ctx context.Context) (tried, took int, later bool) {
	// A node whose own life is younger than a claim TTL (it just started,
	// or is back from being cut off from NATS) may have found its peers
	// down only because it could not see them, or because they were cut
	// off with it (a NATS outage): they are given a TTL to renew before
	// their groups are taken from them.
	if began := o.claims.LifeBegan(); began.IsZero() || time.Since(began) < o.claims.ttl {
		return 0, 0, true
	}
	groups, later := o.orphans.Orphans(ownershipOffer)
	o.mu.Lock()
	for g := range o.behind {
		if len(groups) >= 2*ownershipOffer {
			break
		}
		groups = append(groups, g)
		delete(o.behind, g)
	}
	o.mu.Unlock()
	// Only groups this node's catalog has: one it cannot own would be
	// held here with no one to lease it.
	known := groups[:0]
	for _, g := range groups {
		if _, err := o.db.GroupByName(ctx, g); err == nil {
			known = append(known, g)
		}
	}
	if len(known) == 0 {
		return 0, 0, later
	}
	won, err := o.claims.ClaimFree(ctx, known, len(known))
	if err != nil && ctx.Err() == nil {
		o.log.Warn("ownership: taking over the groups of a peer found down", "err", err)
	}
	failed := false
	for _, g := range won {
		if failed {
			// The first not adoptable (most often: this node has not folded
			// the dead member's last events yet, and each adoption would
			// wait caughtUpWait for them): the rest are let go at once and
			// tried at the next pass, so a pass does not wait on each.
			if err := o.claims.Release(ctx, g); err != nil {
				o.log.Warn("ownership: releasing a claim", "group", g, "err", err)
			}
		} else if o.own(ctx, g, o.claims.Rev(g)) {
			took++
			continue
		}
		failed = true
		// Not adoptable yet (its claim was let go): its claim no longer
		// names the dead member, so it is remembered here to try again.
		o.mu.Lock()
		addBounded(&o.behind, g, takeoverBehindMax)
		o.mu.Unlock()
	}
	if took > 0 {
		o.log.Info("ownership: took over groups of a peer found down", "groups", took, "tried", len(known))
	}
	return len(known), took, later
}

// addBounded adds k to the set *set, made if nil, unless it holds max
// already.
func addBounded[K comparable](set *map[K]bool, k K, max int) {
	if *set == nil {
		*set = map[K]bool{}
	}
	if len(*set) < max {
		(*set)[k] = true
	}
}

// takeoverWait is how long ownership waits before its next takeover pass
// after one that tried tried groups and took took: at once while it takes
// some, a second after one that took none (the server may not have
// removed the dead life yet), doubling up to max while none are taken; a
// second when there was nothing to try but groups left to others until
// the grace, and no pass at all when there was nothing (the next member
// found down starts again).
func takeoverWait(last time.Duration, tried, took int, later bool, max time.Duration) (time.Duration, bool) {
	switch {
	case tried == 0 && later:
		return min(ownershipOfferMax, max), true
	case tried == 0:
		return 0, false
	case took > 0:
		return 0, true
	case last <= 0:
		return min(ownershipOfferMax, max), true
	default:
		return min(2*last, max), true
	}
}
