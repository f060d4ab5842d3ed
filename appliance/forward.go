package appliance

import (
	"context"
	"encoding/json"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// In a fleet a group's state is its owner's; an admin write on a group
// whose state here is a peer's is carried to that peer and answered as if
// it were made here. The fleet carries it (Fleet.Forward) and
// answers other nodes' writes with ApplyAdmin.

// AdminOp is an admin write on a group, as carried to its owner.
type AdminOp struct {
	Op    string     `json:"op"` // "put_group", "plan_tail", "plan_history", "retry", "lift_quarantine", "watermarks", "source_error", "delete_group", "pause_node", "resume_node", "delete_node"
	Group string     `json:"group"`
	Spec  *GroupSpec `json:"spec,omitempty"`
	// High (plan_tail, watermarks), Low (plan_history, watermarks) or Start (retry: the range's
	// start, since range ids are each node's own).
	High  int64 `json:"high,omitempty"`
	Low   int64 `json:"low,omitempty"`
	Start int64 `json:"start,omitempty"`
	// Error and Node (source_error; Node also watermarks) are what the
	// source said and the node whose worker reported it.
	Error string `json:"error,omitempty"`
	Node  string `json:"node,omitempty"`
	// Force and By are a carried deletion's force and a carried pause's
	// operator (pause_node, resume_node, delete_node: Node names the node
	// at its home).
	Force bool   `json:"force,omitempty"`
	By    string `json:"by,omitempty"`
}

// AdminResult is an AdminOp's answer.
type AdminResult struct {
	Group   *leasehold.Group `json:"group,omitempty"`
	Created bool             `json:"created,omitempty"`
	Planned int64            `json:"planned,omitempty"`
	Range   *leasehold.Range `json:"range,omitempty"`
	Node    *leasehold.Node  `json:"node,omitempty"`
}

// ensureOwned makes sure this node holds group's claim in its fleet
// before an admin write on it (nil for a node alone).
func (c *Coordinator) ensureOwned(ctx context.Context, group string) error {
	return c.fleet.Ensure(ctx, group)
}

// ensureKnown is ensureOwned for a group that exists here; a missing one
// is left to the write to refuse (not found).
func (c *Coordinator) ensureKnown(ctx context.Context, group string) error {
	if c.alone {
		return nil
	}
	if _, err := c.db.GroupByName(ctx, group); err != nil {
		return nil
	}
	return c.ensureOwned(ctx, group)
}

// ForwardFunc carries op to origin and returns its answer, or the error
// origin answered with (its kind kept).
type ForwardFunc func(ctx context.Context, origin string, op AdminOp) (AdminResult, error)

// originOf names the peer whose state group is here, "" when it is this
// node's own, unknown, or the node runs alone. Every admin write on a
// group asks it first, so a node still joining its fleet refuses them all
// alike (unavailable): a group made before the join could not be claimed,
// and a write on a peer's group could not be carried. Errors:
// unavailable (not joined yet).
func (c *Coordinator) originOf(ctx context.Context, group string) (string, ForwardFunc, error) {
	if c.alone {
		return "", nil, nil
	}
	if err := c.fleet.Ready(); err != nil {
		return "", nil, err
	}
	g, err := c.db.GroupByName(ctx, group)
	if leasehold.KindOf(err) == leasehold.KindNotFound {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	origin, err := c.db.GroupOrigin(ctx, g.ID)
	return origin, c.fleet.Forward, err
}

// ApplyAdmin makes an admin write carried here by a peer, on a group this
// node owns. A group whose state is another peer's here is a conflict: it
// is never carried on, so a write cannot go round the fleet.
func (c *Coordinator) ApplyAdmin(ctx context.Context, op AdminOp) (AdminResult, error) {
	if nodeOp(op.Op) {
		return c.applyNodeOp(ctx, op)
	}
	g, err := c.db.GroupByName(ctx, op.Group)
	if err != nil && !(op.Op == "put_group" && leasehold.KindOf(err) == leasehold.KindNotFound) {
		return AdminResult{}, err
	}
	if err == nil {
		origin, err := c.db.GroupOrigin(ctx, g.ID)
		if err != nil {
			return AdminResult{}, err
		}
		if origin != "" {
			return AdminResult{}, leasehold.Errorf(leasehold.KindConflict, "group %q is owned by node %q, not here", op.Group, origin)
		}
		if err := c.ensureOwned(ctx, op.Group); err != nil {
			return AdminResult{}, err
		}
	}
	var res AdminResult
	switch op.Op {
	case "put_group":
		spec := GroupSpec{}
		if op.Spec != nil {
			spec = *op.Spec
		}
		g, created, err := c.putGroup(ctx, op.Group, spec)
		res.Group, res.Created = &g, created
		return res, err
	case "plan_tail":
		res.Planned, err = c.planTail(ctx, op.Group, op.High)
	case "plan_history":
		res.Planned, err = c.planHistory(ctx, op.Group, op.Low)
	case "retry":
		var r leasehold.Range
		err = c.db.Write(ctx, func(tx *store.Tx) error {
			id, err := tx.RangeAt(g.ID, op.Start)
			if err != nil {
				return err
			}
			r, err = tx.Retry(id)
			return err
		})
		res.Range = &r
	case "watermarks":
		res.Planned, err = c.reportWatermarks(ctx, op.Group, op.Node, op.Low, op.High)
	case "source_error":
		err = c.reportSourceError(ctx, op.Group, op.Node, op.Error)
	case "delete_group":
		err = c.deleteGroup(ctx, op.Group)
	case "lift_quarantine":
		var g leasehold.Group
		g, err = c.liftQuarantine(ctx, op.Group)
		res.Group = &g
	default:
		return res, leasehold.Errorf(leasehold.KindInvalid, "unknown admin write %q", op.Op)
	}
	return res, err
}

// String is the write as carried, for logs.
func (op AdminOp) String() string {
	b, _ := json.Marshal(op)
	return string(b)
}
