package appliance

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Coordinator applies the leasing rules and the planner to the catalog.
// Every method that changes something runs as one queued write, so it is
// durable when it returns.
type Coordinator struct {
	db          *store.DB
	ttl         time.Duration
	maxAttempts int64
	// tailOnlyFunc reports whether only tail work may be leased now (the
	// history cap on a short disk).
	tailOnlyFunc func() bool
	recorder     Recorder
	rules        atomic.Pointer[leasehold.RuleSet]
	// fleet is the fleet this node is part of (Alone without one), and
	// fence rule 6 in it.
	fleet  Fleet
	alone  bool
	claims claimCheck
	// now and unseen tell a node's state (leasehold.NodeState).
	now    func() time.Time
	unseen time.Duration
	// deleteOwned deletes a group this node owns in its fleet, with its
	// window's file (Snapshots.deleteOwned).
	deleteOwned func(ctx context.Context, name string) error
}

// withState sets the state of nodes as of now.
func (c *Coordinator) withState(nodes ...*leasehold.Node) {
	now := c.now()
	for _, n := range nodes {
		n.State = leasehold.NodeState(*n, now, c.unseen)
	}
}

// Own lets this node lease the named group: its claim was won at
// claimRev. A group whose state was a peer's is adopted (store.OwnGroup).
// Errors: not found.
// A claim no longer held at claimRev when the write runs (lost, or won
// anew at another revision since) is passed over: owning the group under
// it would fence every call out.
func (c *Coordinator) Own(ctx context.Context, group string, claimRev uint64) error {
	return c.db.Write(ctx, func(tx *store.Tx) error {
		if rev, ok := c.fleet.Holds(group); !c.alone && (!ok || rev != claimRev) {
			return nil
		}
		return tx.OwnGroup(group, claimRev, c.maxAttempts)
	})
}

// Disown stops this node leasing the named groups at once, in one write,
// ending leases held here (their claims were lost or are about to lapse).
// Groups not found are passed over, and so are those unless (if set)
// answers true for inside the write: a claim won again since it was lost.
func (c *Coordinator) Disown(ctx context.Context, groups []string, unless func(group string) bool) error {
	return c.db.Write(ctx, func(tx *store.Tx) error {
		for _, g := range groups {
			if unless != nil && unless(g) {
				continue
			}
			if err := tx.DisownGroup(g, c.maxAttempts); err != nil && leasehold.KindOf(err) != leasehold.KindNotFound {
				return err
			}
		}
		return nil
	})
}

// TTL is how long a holder may be quiet before its group is free.
func (c *Coordinator) TTL() time.Duration { return c.ttl }

// NodeSpec is a node to register (the API's request type); nil fields
// take defaults.
type NodeSpec = leasehold.NodeSpec

// Defaults of a registered node: every priority, four groups at once.
const (
	DefaultPriorityMin = -1 << 31
	DefaultPriorityMax = 1<<31 - 1
	DefaultCapacity    = 4
)

// HashToken is how tokens are kept: only their sha-256.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// TokenEqual compares a presented token with a known one in constant time
// (by their hashes, so lengths leak nothing either).
func TokenEqual(presented, known string) bool {
	return subtle.ConstantTimeCompare(HashToken(presented), HashToken(known)) == 1
}

// NewToken makes a random bearer token.
func NewToken(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// RegisterNode registers a node and returns it with its token, which is
// never stored or shown again. Errors: invalid, conflict (name taken).
func (c *Coordinator) RegisterNode(ctx context.Context, s NodeSpec) (leasehold.Node, error) {
	if !leasehold.ValidNodeName(s.Name) {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindInvalid, "node name %q: use 1-128 bytes of A-Za-z0-9._+- starting with a letter or digit", s.Name)
	}
	nn := store.NewNode{Name: s.Name, PriorityMin: DefaultPriorityMin, PriorityMax: DefaultPriorityMax, Capacity: DefaultCapacity, Kinds: s.Kinds}
	if s.PriorityMin != nil {
		nn.PriorityMin = *s.PriorityMin
	}
	if s.PriorityMax != nil {
		nn.PriorityMax = *s.PriorityMax
	}
	if s.Capacity != nil {
		nn.Capacity = *s.Capacity
	}
	if nn.PriorityMin > nn.PriorityMax {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindInvalid, "priority_min %d is above priority_max %d", nn.PriorityMin, nn.PriorityMax)
	}
	if nn.Capacity < 0 {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindInvalid, "capacity %d is negative", nn.Capacity)
	}
	token, err := NewToken("lhn_")
	if err != nil {
		return leasehold.Node{}, leasehold.Wrap(leasehold.KindInternal, err, "making a token")
	}
	nn.TokenHash = HashToken(token)
	var n leasehold.Node
	err = c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		n, err = tx.CreateNode(nn)
		return err
	})
	n.Token = token
	c.withState(&n)
	return n, err
}

// RotateNodeToken gives node id a new token and returns it; the old one
// is refused from then on. Errors: not found.
func (c *Coordinator) RotateNodeToken(ctx context.Context, id int64) (string, error) {
	token, err := NewToken("lhn_")
	if err != nil {
		return "", leasehold.Wrap(leasehold.KindInternal, err, "making a token")
	}
	if err := c.db.Write(ctx, func(tx *store.Tx) error { return tx.SetNodeToken(id, HashToken(token)) }); err != nil {
		return "", err
	}
	return token, nil
}

// NodeAuth is the node a bearer token belongs to, as AuthNode finds it.
type NodeAuth = store.NodeAuth

// ErrNameTaken is why AuthNode keeps out a peer's node whose token is
// good: a node of its name is here already (store.ErrNameTaken).
var ErrNameTaken = store.ErrNameTaken

// AuthNode finds the node a bearer token belongs to. In a fleet, a token
// registered at a peer lets its node in as a visitor (store.DB.Visit); a
// node running alone folds no peer's changes, so it lets in none, not
// even one let in before. Errors: unauthorized.
func (c *Coordinator) AuthNode(ctx context.Context, token string) (NodeAuth, error) {
	h := HashToken(token)
	a, err := c.db.NodeByTokenHash(ctx, h)
	if errors.Is(err, leasehold.ErrNotFound) && !c.alone {
		a, err = c.db.Visit(ctx, h)
	}
	if err == nil && a.Home != "" && c.alone {
		err = leasehold.ErrNotFound
	}
	if errors.Is(err, leasehold.ErrNotFound) || err == nil && subtle.ConstantTimeCompare(a.TokenHash, h) != 1 {
		return NodeAuth{}, leasehold.Errorf(leasehold.KindUnauthorized, "unknown token")
	}
	return a, err
}

// Nodes lists the registered nodes.
func (c *Coordinator) Nodes(ctx context.Context) ([]leasehold.Node, error) {
	ns, err := c.db.Nodes(ctx)
	for i := range ns {
		c.withState(&ns[i])
	}
	return ns, err
}

// SetPaused pauses or resumes a node; by names who did it. A visitor's
// is carried to its home (carryToHome). Errors: not found.
func (c *Coordinator) SetPaused(ctx context.Context, id int64, paused bool, by string) (leasehold.Node, error) {
	if len(by) > 255 {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindInvalid, "by: at most 255 bytes")
	}
	if name, home, err := c.visitorHome(ctx, id); err != nil || home != "" {
		if err != nil {
			return leasehold.Node{}, err
		}
		op := AdminOp{Op: opResumeNode, By: by}
		if paused {
			op.Op = opPauseNode
		}
		return c.carryToHome(ctx, id, name, home, op)
	}
	var n leasehold.Node
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		n, err = tx.SetPaused(id, paused, by)
		return err
	})
	c.withState(&n)
	return n, err
}

// DeleteNode removes a node and its token; what it held is released at its
// resume points. A visitor's deletion is carried to its home
// (carryToHome). Errors: not found; conflict when the node holds groups,
// unless force.
func (c *Coordinator) DeleteNode(ctx context.Context, id int64, force bool) error {
	if name, home, err := c.visitorHome(ctx, id); err != nil || home != "" {
		if err != nil {
			return err
		}
		// What it holds here is released with it: as at its home, only
		// when forced.
		if n, err := c.db.Node(ctx, id); err == nil && n.Held > 0 && !force {
			return leasehold.Errorf(leasehold.KindConflict,
				"node %s holds %d group(s) here; deleting it releases them from under its worker: force the delete to do it", name, n.Held)
		}
		_, err := c.carryToHome(ctx, id, name, home, AdminOp{Op: opDeleteNode, Force: force})
		return err
	}
	return c.db.Write(ctx, func(tx *store.Tx) error { return tx.DeleteNode(id, c.maxAttempts, force) })
}

// GroupSpec is a group to create or update (the API's request type); nil
// fields keep the group's value, or take the defaults for a new group.
type GroupSpec = leasehold.GroupSpec

// NodeChange is what an admin changes on a node (the API's request
// type): its kinds, its capacity.
type NodeChange = leasehold.NodeChange

// Groups lists up to limit groups with ids above after, by id, a peer's
// groups as folded here too. Errors: unavailable, internal.
func (c *Coordinator) Groups(ctx context.Context, after int64, limit int) ([]leasehold.Group, error) {
	return c.db.Groups(ctx, after, limit)
}

// Group reads the named group. Errors: not found, unavailable, internal.
func (c *Coordinator) Group(ctx context.Context, name string) (leasehold.Group, error) {
	return c.db.GroupByName(ctx, name)
}

// GroupDetail reads the named group with its lease, its snapshot and its
// range counts by status. Errors: not found, unavailable, internal.
func (c *Coordinator) GroupDetail(ctx context.Context, name string) (leasehold.GroupDetail, error) {
	return c.db.GroupDetail(ctx, name)
}

// Ranges lists up to limit of the named group's ranges with ids above
// after, by id, of one status ("" for every status). Errors: not found,
// unavailable, internal.
func (c *Coordinator) Ranges(ctx context.Context, group string, status leasehold.RangeStatus, after int64, limit int) ([]leasehold.Range, error) {
	g, err := c.db.GroupByName(ctx, group)
	if err != nil {
		return nil, err
	}
	return c.db.Ranges(ctx, g.ID, status, after, limit)
}

// PutGroup creates or updates a group; a peer's group is updated at its
// owner. Errors: invalid, conflict, unavailable (the owner cannot be
// reached).
func (c *Coordinator) PutGroup(ctx context.Context, name string, s GroupSpec) (leasehold.Group, bool, error) {
	origin, forward, err := c.originOf(ctx, name)
	if err != nil {
		return leasehold.Group{}, false, err
	}
	if origin != "" {
		res, err := forward(ctx, origin, AdminOp{Op: "put_group", Group: name, Spec: &s})
		if err != nil || res.Group == nil {
			return leasehold.Group{}, false, err
		}
		return *res.Group, res.Created, nil
	}
	if _, err := c.db.GroupByName(ctx, name); err == nil {
		if err := c.ensureOwned(ctx, name); err != nil {
			return leasehold.Group{}, false, err
		}
	}
	g, created, err := c.putGroup(ctx, name, s)
	if err == nil && created {
		// A new group is claimed at once, so its planning is published
		// under its claim; a claim that cannot be made now is made at the
		// first lease or admin write.
		if err := c.ensureOwned(ctx, name); err != nil {
			return g, created, nil
		}
	}
	return g, created, err
}

func (c *Coordinator) putGroup(ctx context.Context, name string, s GroupSpec) (leasehold.Group, bool, error) {
	if !leasehold.ValidGroupName(name) {
		return leasehold.Group{}, false, leasehold.Errorf(leasehold.KindInvalid, "group name %q: use 1-255 bytes of A-Za-z0-9._+- starting with a letter or digit", name)
	}
	if s.RangeSize != nil && *s.RangeSize < 1 {
		return leasehold.Group{}, false, leasehold.Errorf(leasehold.KindInvalid, "range_size must be at least 1")
	}
	if s.Start != nil && *s.Start < 0 {
		return leasehold.Group{}, false, leasehold.Errorf(leasehold.KindInvalid, "start must be 0 or more")
	}
	var g leasehold.Group
	var created bool
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		g, created, err = tx.PutGroup(name, s)
		return err
	})
	return g, created, err
}

// PlanTail plans the named group's tail up to high (a peer's group at its
// owner). Errors: invalid, not found, unprocessable (too many ranges for
// one call), unavailable (the owner cannot be reached).
func (c *Coordinator) PlanTail(ctx context.Context, name string, high int64) (int64, error) {
	if origin, forward, err := c.originOf(ctx, name); err != nil || origin != "" {
		if err != nil {
			return 0, err
		}
		res, err := forward(ctx, origin, AdminOp{Op: "plan_tail", Group: name, High: high})
		return res.Planned, err
	}
	if err := c.ensureKnown(ctx, name); err != nil {
		return 0, err
	}
	return c.planTail(ctx, name, high)
}

func (c *Coordinator) planTail(ctx context.Context, name string, high int64) (int64, error) {
	if high < 0 {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "high must be 0 or more")
	}
	return c.plan(ctx, name, func(tx *store.Tx, id int64) (int64, error) { return tx.PlanTail(id, high) })
}

// PlanHistory plans the named group's history down to low (a peer's group
// at its owner). Errors as PlanTail.
func (c *Coordinator) PlanHistory(ctx context.Context, name string, low int64) (int64, error) {
	if origin, forward, err := c.originOf(ctx, name); err != nil || origin != "" {
		if err != nil {
			return 0, err
		}
		res, err := forward(ctx, origin, AdminOp{Op: "plan_history", Group: name, Low: low})
		return res.Planned, err
	}
	if err := c.ensureKnown(ctx, name); err != nil {
		return 0, err
	}
	return c.planHistory(ctx, name, low)
}

func (c *Coordinator) planHistory(ctx context.Context, name string, low int64) (int64, error) {
	if low < 0 {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "low must be 0 or more")
	}
	return c.plan(ctx, name, func(tx *store.Tx, id int64) (int64, error) { return tx.PlanHistory(id, low) })
}

func (c *Coordinator) plan(ctx context.Context, name string, f func(*store.Tx, int64) (int64, error)) (int64, error) {
	var n int64
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		g, err := tx.GroupByName(name)
		if err != nil {
			return err
		}
		n, err = f(tx, g.ID)
		return err
	})
	return n, err
}

// Retry plans a failed range again (of a peer's group, at its owner).
// Errors: not found, conflict, unavailable (the owner cannot be reached).
func (c *Coordinator) Retry(ctx context.Context, rangeID int64) (leasehold.Range, error) {
	if !c.alone {
		r, err := c.db.Range(ctx, rangeID)
		if err != nil {
			return leasehold.Range{}, err
		}
		g, err := c.db.GroupByID(ctx, r.GroupID)
		if err != nil {
			return leasehold.Range{}, err
		}
		if origin, forward, err := c.originOf(ctx, g.Name); err != nil || origin != "" {
			if err != nil {
				return leasehold.Range{}, err
			}
			res, err := forward(ctx, origin, AdminOp{Op: "retry", Group: g.Name, Start: r.Start})
			if err != nil || res.Range == nil {
				return leasehold.Range{}, err
			}
			// The owner's range ids are its own: answer with this node's.
			out := *res.Range
			out.ID, out.GroupID, out.NodeID = r.ID, r.GroupID, nil
			return out, nil
		}
		if err := c.ensureOwned(ctx, g.Name); err != nil {
			return leasehold.Range{}, err
		}
	}
	var r leasehold.Range
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		r, err = tx.Retry(rangeID)
		return err
	})
	return r, err
}

// PutRules stores a new version of the rules (a JSON object) and makes it
// current. Errors: invalid.
func (c *Coordinator) PutRules(ctx context.Context, body json.RawMessage) (int64, error) {
	if t := strings.TrimSpace(string(body)); !strings.HasPrefix(t, "{") || !json.Valid(body) {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "rules must be a JSON object")
	}
	var v int64
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		v, err = tx.PutRules(body)
		return err
	})
	if err == nil {
		c.setRules(leasehold.RuleSet{Version: v, Body: append([]byte(nil), body...)})
	}
	return v, err
}

func (c *Coordinator) setRules(rs leasehold.RuleSet) {
	for {
		old := c.rules.Load()
		if old != nil && old.Version >= rs.Version {
			return
		}
		if c.rules.CompareAndSwap(old, &rs) {
			return
		}
	}
}

// Rules is the current rule set (version 0, {} before any).
func (c *Coordinator) Rules() leasehold.RuleSet { return *c.rules.Load() }

// Lease is rule 1 for the node: a grant, or nil when there is nothing to
// lease. It carries the current rules. In a fleet only groups whose
// claims this node holds are leased, and nothing before the node has
// joined its fleet. Errors: not found (the node), unavailable (not joined
// yet).
func (c *Coordinator) Lease(ctx context.Context, nodeID int64) (*leasehold.Grant, error) {
	if err := c.fleet.Ready(); err != nil {
		return nil, err
	}
	g, h, refused, err := c.lease(ctx, nodeID)
	if err == nil && g == nil && len(refused) > 0 {
		// Groups of this node's own it holds no claim on yet (a group just
		// made, or idle a while): claimed now, briefly, and the lease asked
		// again, so a worker is not sent away from work that is here. Other
		// workers' leases may take what was won first; a few rounds settle it.
		cctx, cancel := context.WithTimeout(ctx, claimWait)
		for range claimRounds {
			if !c.fleet.ClaimNow(cctx, refused) {
				break
			}
			if g, h, refused, err = c.lease(ctx, nodeID); err != nil || g != nil || len(refused) == 0 {
				break
			}
		}
		cancel()
	}
	if err != nil {
		return nil, err
	}
	if g != nil && c.claims.still(h) != nil {
		// The claim lapsed while the grant was written: the grant is not
		// given (the lease it made ends when the group is disowned).
		g = nil
	}
	if g == nil {
		c.fleet.Idle(nodeID)
		return nil, nil
	}
	g.Rules = c.Rules()
	g.TTL = c.ttl
	c.recorder.LeaseGranted(g.Takeover)
	return g, nil
}

// claimWait bounds how long a lease waits on claims for the groups it was
// refused.
const claimWait = 2 * time.Second

// claimRounds bounds the claims a lease makes and asks again after.
const claimRounds = 3

// lease is one lease write; refused names the groups the fleet refused,
// and h is the claim a grant was made under.
func (c *Coordinator) lease(ctx context.Context, nodeID int64) (*leasehold.Grant, holding, []string, error) {
	var g *leasehold.Grant
	var h holding
	var refused []string
	req := store.LeaseRequest{NodeID: nodeID, TTL: c.ttl, MaxAttempts: c.maxAttempts, TailOnly: c.tailOnlyFunc()}
	if !c.alone {
		// Called inside the write, which this goroutine waits on.
		req.OwnsFunc = func(group string, claimRev uint64) bool {
			rev, ok := c.fleet.Holds(group)
			if !ok || rev != claimRev {
				c.fleet.Want(group)
				refused = append(refused, group)
				return false
			}
			h = holding{group: group, rev: rev}
			return true
		}
	}
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		refused = refused[:0]
		if err := tx.TouchNode(nodeID); err != nil {
			return err
		}
		var err error
		g, err = tx.LeaseGroup(req)
		return err
	})
	return g, h, refused, err
}

// Next is rule 3: the holder's range in work or the next planned one, nil
// when the group is caught up. Errors: not found, lease lost.
func (c *Coordinator) Next(ctx context.Context, h leasehold.GroupHolder) (*leasehold.Range, error) {
	return c.NextAfter(ctx, h, nil)
}

// NextAfter is Next after finishing done, if given, in one write: the
// finish is Finish's, and if it is refused (lease lost, a range of
// another group or not in the holder's work) nothing changes. Errors:
// those of Finish and of Next; invalid for negative headers, unprocessable
// for a range of another group.
func (c *Coordinator) NextAfter(ctx context.Context, h leasehold.GroupHolder, done *leasehold.FinishedRange) (*leasehold.Range, error) {
	if done != nil && done.Headers < 0 {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "finished.headers must be 0 or more")
	}
	var r *leasehold.Range
	p := store.NextParams{Holder: h, RuleVersion: c.Rules().Version, MaxAttempts: c.maxAttempts}
	tailOnly := c.tailOnlyFunc()
	err := c.claims.writeGroup(ctx, c.db, h.GroupID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		var err error
		if p.BandMin, p.BandMax, err = tx.NodeBand(h.NodeID); err != nil {
			return err
		}
		if tailOnly {
			p.BandMax = min(p.BandMax, leasehold.TailPriority)
		}
		if done != nil {
			r, err = tx.FinishNext(p, *done)
		} else {
			r, err = tx.NextRange(p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if done != nil {
		c.recorder.RangeFinished(done.Headers)
	}
	return r, nil
}

// Heartbeat is rule 5. Errors: not found, lease lost.
func (c *Coordinator) Heartbeat(ctx context.Context, h leasehold.GroupHolder) error {
	return c.claims.writeGroup(ctx, c.db, h.GroupID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		return tx.Heartbeat(h)
	})
}

// Release is rule 5. Errors: not found, lease lost.
func (c *Coordinator) Release(ctx context.Context, h leasehold.GroupHolder) error {
	return c.claims.writeGroup(ctx, c.db, h.GroupID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		return tx.Release(h, c.maxAttempts)
	})
}

// ReleaseStopped is Release by a holder stopping cleanly with its progress
// saved: its range in work gets back the attempt its lease counted.
// Errors: not found, lease lost.
func (c *Coordinator) ReleaseStopped(ctx context.Context, h leasehold.GroupHolder) error {
	return c.claims.writeGroup(ctx, c.db, h.GroupID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		return tx.ReleaseStopped(h, c.maxAttempts)
	})
}

// Progress is rule 4. Errors: not found, lease lost, conflict, unprocessable.
func (c *Coordinator) Progress(ctx context.Context, h leasehold.RangeHolder, next int64) (leasehold.Range, error) {
	var r leasehold.Range
	err := c.claims.writeRange(ctx, c.db, h.RangeID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		var err error
		r, err = tx.Progress(h, next)
		return err
	})
	return r, err
}

// Finish is rule 4's end. Errors: invalid, not found, lease lost, conflict.
func (c *Coordinator) Finish(ctx context.Context, h leasehold.RangeHolder, headers int64) (leasehold.Range, error) {
	if headers < 0 {
		return leasehold.Range{}, leasehold.Errorf(leasehold.KindInvalid, "headers must be 0 or more")
	}
	var r leasehold.Range
	err := c.claims.writeRange(ctx, c.db, h.RangeID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		var err error
		r, err = tx.Finish(h, headers)
		return err
	})
	if err == nil {
		c.recorder.RangeFinished(headers)
	}
	return r, err
}

// GroupByID reads a group by its id on this node. Errors: not found,
// unavailable, internal.
func (c *Coordinator) GroupByID(ctx context.Context, id int64) (leasehold.Group, error) {
	return c.db.GroupByID(ctx, id)
}

// ChangeNode sets a node's kinds or capacity (PATCH /nodes/{id}); the
// groups it holds stay its own until released. Errors: invalid, not
// found.
func (c *Coordinator) ChangeNode(ctx context.Context, id int64, ch NodeChange) (leasehold.Node, error) {
	if ch.Capacity != nil && *ch.Capacity < 0 {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindInvalid, "capacity %d is negative", *ch.Capacity)
	}
	if ch.Kinds != nil && len(ch.Kinds) == 0 {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindInvalid, "kinds is empty: a node reads at least one kind")
	}
	var n leasehold.Node
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		n, err = tx.ChangeNode(id, ch)
		return err
	})
	return n, err
}
