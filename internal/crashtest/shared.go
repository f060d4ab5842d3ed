package main

import (
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// model is the shared model of every group, with the calls in flight.
type model struct {
	s     *session
	rules rules

	mu     sync.Mutex
	groups map[int64]*groupState
	order  []int64 // group ids in creation order
	// lastBeat is the send time of the last acknowledged holder call of
	// each held group: its heartbeat_at must be at or after it.
	lastBeat map[int64]time.Time
	// lastSeen is the send time of each client's last acknowledged call.
	lastSeen map[*worker]time.Time
	// releasing is each group's release in flight.
	releasing map[int64]*op
	doubts    []*op
	acks      map[string]int
}

func newModel(s *session, r rules) *model {
	return &model{
		s: s, rules: r, groups: map[int64]*groupState{}, lastBeat: map[int64]time.Time{},
		lastSeen: map[*worker]time.Time{}, releasing: map[int64]*op{}, acks: map[string]int{},
	}
}

func (m *model) add(g *groupState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.groups[g.ID]; !ok {
		m.order = append(m.order, g.ID)
	}
	m.groups[g.ID] = g
}

// heldBy lists the groups the model says node holds.
func (m *model) heldBy(node int64) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int64
	for _, id := range m.order {
		if m.groups[id].Holder == node {
			out = append(out, id)
		}
	}
	return out
}

// groupView is what a holder knows of its group before a call.
type groupView struct {
	fence       int64
	work        *rangeState
	snap        *snapState
	frontier    int64
	predictNext *rangeState // what next must answer
}

func (m *model) view(id int64) groupView {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[id]
	v := groupView{fence: g.Fence, frontier: g.frontier()}
	if g.Snap != nil {
		s := *g.Snap
		v.snap = &s
	}
	if w := g.rangeByID(g.RangeID); g.RangeID != 0 && w != nil && w.Status == leasehold.StatusLeased {
		c := *w
		v.work = &c
	}
	if r := m.rules.next(g.clone()); r != nil {
		c := *r
		v.predictNext = &c
	}
	return v
}

func (m *model) sending(o *op) {
	if o.kind != "release" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releasing[o.group] = o
}

// granted applies a lease answer. A grant of a group the model has held
// by another client is right only if that client's release is in flight:
// then it landed first.
func (m *model) granted(c *worker, o *op, grant *client.Grant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.groups[grant.Group.ID]
	if !ok {
		m.s.violate("answer", "%s was granted group %d, which the load never made", c.name, grant.Group.ID)
		return
	}
	if g.Holder != 0 {
		if r := m.releasing[g.ID]; r != nil && !r.applied && r.client.nodeID == g.Holder {
			m.rules.release(g)
			r.applied = true
		} else {
			m.s.violate("fence", "%s was granted group %d (fence %d) while node %d holds it at fence %d", c.name, g.ID, grant.Fence, g.Holder, g.Fence)
		}
	}
	if grant.Fence != g.Fence+1 || grant.Takeover {
		m.s.violate("fence", "%s was granted group %d at fence %d (takeover %v); the model is at fence %d, no takeover", c.name, g.ID, grant.Fence, grant.Takeover, g.Fence)
	}
	var got *snapState
	if grant.Snapshot != nil {
		got = &snapState{Next: grant.Snapshot.Next, Size: grant.Snapshot.Size, SHA256: grant.Snapshot.SHA256}
	}
	if snapString(got) != snapString(g.Snap) {
		m.s.violate("lost-write", "the grant of group %d carries snapshot %s; the model has %s", g.ID, snapString(got), snapString(g.Snap))
	}
	m.rules.lease(g, c.nodeID)
	g.Fence = grant.Fence // follow the node, so one wrong fence is one violation
	o.applied = true
}

func (m *model) acked(o *op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o.kind != "snapshot" { // uploads do not touch the node's last_seen_at
		m.lastSeen[o.client] = o.sent
	}
	if o.group == 0 {
		m.acks["lease (nothing to lease)"]++
		return
	}
	m.acks[o.kind]++
	g := m.groups[o.group]
	if g == nil {
		return
	}
	if o.kind == "release" {
		m.doneReleasing(o)
	}
	if !o.applied {
		m.rules.apply(g, o)
		o.applied = true
	}
	if g.Holder != 0 {
		m.lastBeat[g.ID] = o.sent
	}
}

// doneReleasing forgets a release once answered or settled, unless the
// group's release in flight is already a later one.
func (m *model) doneReleasing(o *op) {
	if m.releasing[o.group] == o {
		delete(m.releasing, o.group)
	}
}

func (m *model) refused(o *op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o.kind == "release" {
		m.doneReleasing(o)
	}
}

func (m *model) inDoubt(o *op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.doubts = append(m.doubts, o)
}

// acknowledged is the number of acknowledged calls; every one of them
// writes (a heartbeat and a download too: they move heartbeat_at).
func (m *model) acknowledged() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, v := range m.acks {
		n += v
	}
	return n
}
