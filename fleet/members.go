package fleet

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
)

// Member states, as GET /api/v1/peers gives them.
const (
	// MemberUp is a member whose life in the fleet was renewed within the
	// claim TTL.
	MemberUp = "up"
	// MemberDown is a member whose life was not seen for the claim TTL:
	// its claims have lapsed and its groups go to the others.
	MemberDown = "down"
	// MemberJoining was a member whose life stands but none of whose
	// events had been folded here yet; such a member is up now. The
	// members gauge still serves its series (0), for the alerts that
	// name it.
	MemberJoining = "joining"
	// MemberUnknown is a member this node cannot tell about: its life
	// was not seen for the claim TTL and the lives bucket cannot be read
	// (this node cut off from NATS, or its leader unreachable). Its
	// groups are not taken over on this node's say-so.
	MemberUnknown = "unknown"
)

// membersMax bounds the members and the claims remembered: a fleet is a
// handful of nodes, so past it a bucket written by strangers cannot grow
// this node's memory without end.
const (
	membersMax = 1024
	ownersMax  = 1 << 20
)

// Members follows who is in the fleet: every node's life in LivesBucket
// (up while it is renewed, down once it was not seen for the claim TTL)
// and who owns which group in ClaimsBucket. It logs one line per
// member's change of state. The lives bucket drops an unrenewed life
// silently (its TTL leaves no marker), so a member is found down by a
// tick, not by an event.
type Members struct {
	lives, claims jetstream.KeyValue
	self          string
	ttl           time.Duration
	now           func() time.Time
	log           *slog.Logger

	mu      sync.Mutex
	members map[string]*member
	owners  map[string]string // group → the node whose claim names it
	// began is when the lives were first read: a member known from the
	// catalog whose life was not among them is down since then at the
	// latest.
	began time.Time
	// downs is signalled when a member is found down: its groups are to
	// be taken over (Orphans); unseenTold once claims naming a node never
	// seen here were told of.
	downs      chan struct{}
	unseenTold bool
	// readLife, when set, reads a member's life from the lives bucket's
	// leader before the member is found down: a watch that fell behind
	// (a loaded machine, a reconnect) is no proof that a life lapsed.
	readLife func(context.Context, string) (lifeRead, error)
	// ring checks that a life or claim is signed by the node it names:
	// a forged one is passed over, and the member's view stays as the
	// last believed value left it.
	ring *Keyring
	// gone, when set, names the members removed from the fleet: not
	// listed, not counted (their lives are still followed, for the
	// takeover of their groups).
	gone func(string) bool
	// signed, when set, says whether a claim's value is one this node
	// signed and wrote (Claims.Signed): its own, believed unchecked.
	signed func(key string, val []byte) bool

	service.Base
}

// member is one node's life as this node saw it.
type member struct {
	state string
	since time.Time
	seen  time.Time // this node's clock when its life was last seen
	found time.Time // this node's clock when it was last found down
}

// NewMembers follows the fleet's members in lives and claims; self is
// this node, never listed.
func NewMembers(lives, claims jetstream.KeyValue, self string, ttl time.Duration, log *slog.Logger) *Members {
	return &Members{lives: lives, claims: claims, self: self, ttl: ttl, now: time.Now, log: log, ring: memoryKeyring(log),
		members: map[string]*member{}, owners: map[string]string{}, downs: make(chan struct{}, 1)}
}

// Start watches the lives and the claims and ticks for lapsed lives until
// ctx ends or Stop. Errors: service.ErrStarted.
func (m *Members) Start(ctx context.Context) error {
	return m.Begin(ctx,
		func(ctx context.Context) error { m.watch(ctx, m.lives, m.life); return nil },
		func(ctx context.Context) error { m.watch(ctx, m.claims, m.claim); return nil },
		func(ctx context.Context) error { m.tick(ctx); return nil })
}

// watch follows every key of kv with seen, starting over while NATS is
// unreachable.
func (m *Members) watch(ctx context.Context, kv jetstream.KeyValue, seen func(jetstream.KeyValueEntry)) {
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(m.ttl / 6):
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				m.mu.Lock()
				if m.began.IsZero() && kv == m.lives {
					m.began = m.now()
				}
				m.mu.Unlock()
				continue
			}
			seen(e)
		}
		w.Stop()
	}
}

// life is one watched write of a node's life: the node is up.
func (m *Members) life(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return // a life deleted: found down by the tick, a TTL after it was seen
	}
	var l Life
	if err := m.ring.openValue(kvSubject(LivesBucket, e.Key()), e.Value(), &l); err != nil {
		if _, ok := errors.AsType[*RefusedError](err); ok {
			m.ring.refuse("life", kvSubject(LivesBucket, e.Key()), err)
		}
		return
	}
	if l.Node == m.self || !leasehold.ValidNodeName(l.Node) || ClaimKey(l.Node) != e.Key() {
		return
	}
	now := m.now()
	m.mu.Lock()
	mb := m.members[l.Node]
	if mb == nil {
		if len(m.members) >= membersMax {
			m.mu.Unlock()
			return
		}
		mb = &member{}
		m.members[l.Node] = mb
	}
	was, since := mb.state, mb.since
	mb.seen = now
	if mb.state != MemberUp {
		mb.state, mb.since = MemberUp, now
	}
	m.mu.Unlock()
	switch was {
	case MemberUp:
	case MemberDown:
		m.log.Info("peers: peer up again", "peer", l.Node, "down_since", since.UTC().Format(time.RFC3339),
			leasehold.TimelineAttr, leasehold.TimelinePeerUp)
	default:
		m.log.Info("peers: peer in the fleet", "peer", l.Node, leasehold.TimelineAttr, leasehold.TimelinePeerUp)
	}
}

// claim is one watched write or delete of a group's claim.
func (m *Members) claim(e jetstream.KeyValueEntry) {
	group := claimGroup(e.Key())
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.owners, group)
		return
	}
	if m.signed != nil && m.signed(e.Key(), e.Value()) {
		// This node's own claim, as it signed it: named without a check.
		if _, ok := m.owners[group]; ok || len(m.owners) < ownersMax {
			m.owners[group] = m.self
		}
		return
	}
	var cl Claim
	if err := m.ring.openValue(kvSubject(ClaimsBucket, e.Key()), e.Value(), &cl); err != nil {
		// A forged claim names no owner: the group's owner is the one
		// its last believed claim named, or none.
		if _, ok := errors.AsType[*RefusedError](err); ok {
			m.ring.refuse("claim", kvSubject(ClaimsBucket, e.Key()), err)
		}
		return
	}
	if _, ok := m.owners[group]; ok || len(m.owners) < ownersMax {
		m.owners[group] = cl.Node
	}
}

// membersTickMax bounds the time between looks for lapsed lives: a
// member found down has its groups taken over at once, so the look's
// period adds to every takeover (a look is a pass over the members, a
// handful).
const membersTickMax = 500 * time.Millisecond

// tick finds, every TTL/6 or membersTickMax if sooner, members whose life
// was not seen for the TTL.
func (m *Members) tick(ctx context.Context) {
	t := time.NewTicker(min(m.ttl/6, membersTickMax))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.lapse(m.now())
	}
}

// lapse marks down, at now, the members not seen for the TTL, logging
// each with the groups its claims still name (those the others adopt).
// A member not seen is first looked up at the lives bucket's leader
// (readLife): a life that stands there keeps it up, and a bucket that
// cannot be read makes it unknown, never down.
func (m *Members) lapse(now time.Time) {
	type down struct {
		node   string
		since  time.Time
		groups int
	}
	m.mu.Lock()
	var due []string
	for node, mb := range m.members {
		if (mb.state == MemberUp || mb.state == MemberUnknown) && now.Sub(mb.seen) >= m.ttl {
			due = append(due, node)
		}
	}
	m.mu.Unlock()
	verdicts := make(map[string]lifeVerdict, len(due))
	for _, node := range due {
		verdicts[node] = m.lookUp(node, now)
	}
	var downs []down
	var unknown []string
	m.mu.Lock()
	for node, v := range verdicts {
		mb := m.members[node]
		if mb == nil || now.Sub(mb.seen) < m.ttl {
			continue // seen by the watch meanwhile
		}
		switch mb.judge(v, now) {
		case MemberUnknown:
			unknown = append(unknown, node)
		case MemberDown:
			downs = append(downs, down{node: node, since: mb.seen})
		}
	}
	for i, d := range downs {
		for _, owner := range m.owners {
			if owner == d.node {
				downs[i].groups++
			}
		}
	}
	// Claims naming a node whose life was never seen here (it died before
	// this node began watching) are orphans a TTL after the watch began:
	// told once.
	unseen := false
	if !m.unseenTold && !m.began.IsZero() && now.Sub(m.began) >= m.ttl {
		m.unseenTold = true
		for _, owner := range m.owners {
			if owner != m.self && m.members[owner] == nil {
				unseen = true
				break
			}
		}
	}
	m.mu.Unlock()
	if len(downs) > 0 || unseen {
		select {
		case m.downs <- struct{}{}:
		default:
		}
	}
	for _, d := range downs {
		m.log.Warn("peers: peer down", "peer", d.node, "since", d.since.UTC().Format(time.RFC3339),
			"groups_to_adopt", d.groups, leasehold.TimelineAttr, leasehold.TimelinePeerDown)
	}
	for _, node := range unknown {
		m.log.Warn("peers: peer state unknown: its life was not seen for the claim TTL and the lives bucket cannot be read from here; its groups stay where they are", "peer", node)
	}
}

// judge takes the lives bucket leader's verdict v on a member whose life
// was not seen for a TTL, and returns the state it went to (MemberUnknown
// or MemberDown), or "" when it went to neither.
func (mb *member) judge(v lifeVerdict, now time.Time) string {
	switch v.state {
	case MemberUp:
		// Seen when the leader took the write: a TTL after it, the
		// leader is asked again.
		if seen := v.at; seen.Before(now) && seen.After(mb.seen) {
			mb.seen = seen
		} else if !seen.Before(now) {
			mb.seen = now
		}
		if mb.state != MemberUp {
			mb.state, mb.since = MemberUp, now
		}
		return ""
	case MemberUnknown:
		if mb.state == MemberUnknown {
			return ""
		}
		mb.state, mb.since = MemberUnknown, now
		return MemberUnknown
	}
	mb.state, mb.since, mb.found = MemberDown, mb.seen, now
	return MemberDown
}

// lifeVerdict is what the lives bucket's leader says of a member.
type lifeVerdict struct {
	state string    // MemberUp, MemberDown or MemberUnknown
	at    time.Time // for up: when its life was last written
}

// lookUp asks the lives bucket's leader whether node's life stands at
// now: down without readLife (nothing to ask), unknown when the bucket
// cannot be read.
func (m *Members) lookUp(node string, now time.Time) lifeVerdict {
	if m.readLife == nil {
		return lifeVerdict{state: MemberDown}
	}
	st, err := m.readLife(context.Background(), node)
	switch {
	case err != nil:
		return lifeVerdict{state: MemberUnknown}
	case st.found && st.life.Node == node && now.Before(st.at.Add(m.ttl)):
		return lifeVerdict{state: MemberUp, at: st.at}
	}
	return lifeVerdict{state: MemberDown}
}

// Owned counts the groups each node's claim names, this node's too.
func (m *Members) Owned() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for _, node := range m.owners {
		out[node]++
	}
	return out
}

// Status gives peers, the catalog's view of the fleet, each member's
// state and the groups it owns, and adds the members the catalog does not
// know yet (they published nothing: up all the same while their life is
// renewed), sorted by name. A member of the catalog whose life was never
// seen here is down since its last event (or since this node began
// watching); unknown while this node has not read the lives yet.
func (m *Members) Status(peers []leasehold.Peer) []leasehold.Peer {
	owned := m.Owned()
	peers = m.states(peers)
	for i := range peers {
		peers[i].Owns = owned[peers[i].Name]
	}
	return peers
}

// states is Status without the groups owned (which counts every claim).
func (m *Members) states(peers []leasehold.Peer) []leasehold.Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	known := map[string]bool{}
	if m.gone != nil {
		peers = slices.DeleteFunc(peers, func(p leasehold.Peer) bool { return m.gone(p.Name) })
	}
	for i := range peers {
		p := &peers[i]
		known[p.Name] = true
		mb := m.members[p.Name]
		switch {
		case mb != nil:
			p.State, p.StateSince = mb.state, new(mb.since.UTC())
		case m.began.IsZero():
			p.State = MemberUnknown // the lives not read yet
		case p.LastEventAt != nil:
			p.State, p.StateSince = MemberDown, new(p.LastEventAt.UTC())
		default:
			p.State = MemberDown
			if !m.began.IsZero() {
				p.StateSince = new(m.began.UTC())
			}
		}
	}
	for node, mb := range m.members {
		if known[node] || (m.gone != nil && m.gone(node)) {
			continue
		}
		peers = append(peers, leasehold.Peer{Name: node, State: mb.state, StateSince: new(mb.since.UTC())})
	}
	slices.SortFunc(peers, func(a, b leasehold.Peer) int { return cmp.Compare(a.Name, b.Name) })
	return peers
}

// membersDesc is the members-by-state gauge: one series per state, each
// always served (0 too), so an alert on down members has a series before
// any member goes down.
var membersDesc = prometheus.NewDesc("leasehold_peer_members",
	"Fleet members other than this node by state (up, down, unknown; joining is always 0, kept for the alerts that name it), as GET /api/v1/peers lists them.",
	[]string{"state"}, nil)

// membersReadMax bounds the catalog read of a scrape.
const membersReadMax = 2 * time.Second

// Collector is the members-by-state gauge, counted at scrape time as
// Status lists them over the catalog's peers (read by peers), so it and
// GET /api/v1/peers agree; neither the read nor the count grows with the
// groups, so a scrape costs the same at a million groups as at ten. A
// scrape whose catalog read fails serves no series rather than counts
// missing the catalog's members.
func (m *Members) Collector(peers func(context.Context) ([]leasehold.Peer, error)) prometheus.Collector {
	return membersMetric{m: m, peers: peers}
}

// membersMetric collects membersDesc.
type membersMetric struct {
	m     *Members
	peers func(context.Context) ([]leasehold.Peer, error)
}

func (c membersMetric) Describe(ch chan<- *prometheus.Desc) { ch <- membersDesc }

func (c membersMetric) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), membersReadMax)
	defer cancel()
	known, err := c.peers(ctx)
	if err != nil {
		return
	}
	count := map[string]float64{MemberUp: 0, MemberDown: 0, MemberJoining: 0, MemberUnknown: 0}
	for _, p := range c.m.states(known) {
		count[p.State]++
	}
	for state, n := range count {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, n, state)
	}
}
