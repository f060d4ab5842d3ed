package appliance

import (
	"context"

	"github.com/leasehold/leasehold"
)

// Visitors revoked anywhere. A visitor is a worker node registered at
// another node of the fleet (its home) that works here with the token it
// has there; it follows its home's events of it. A pause, resume or
// deletion of a visitor made here is carried to its home, as an admin
// write on a peer's group is carried to its owner: the home makes it on
// its own node, and its event carries it to every node, this one too.

// Admin writes on a worker node, carried to its home.
const (
	opPauseNode  = "pause_node"
	opResumeNode = "resume_node"
	opDeleteNode = "delete_node"
)

// nodeOp reports whether op is an admin write on a worker node.
func nodeOp(op string) bool {
	return op == opPauseNode || op == opResumeNode || op == opDeleteNode
}

// visitorHome is the home of node id when it is a visitor here, "" when
// it is registered here or the node runs alone.
func (c *Coordinator) visitorHome(ctx context.Context, id int64) (name, home string, err error) {
	if c.alone {
		return "", "", nil
	}
	return c.db.NodeHome(ctx, id)
}

// carryToHome carries op on visitor name to its home and answers with
// the node as the home holds it, under its id here. Errors: the home's;
// unavailable when it cannot be reached.
func (c *Coordinator) carryToHome(ctx context.Context, id int64, name, home string, op AdminOp) (leasehold.Node, error) {
	op.Node = name
	res, err := c.fleet.Forward(ctx, home, op)
	if leasehold.KindOf(err) == leasehold.KindUnavailable {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindUnavailable,
			"node %s is registered at %s, which cannot be reached now to revoke it there: %s; if %s is gone for good, remove it from the fleet (leasehold admin fleet remove %s): the nodes registered at it are then refused at every node",
			name, home, leasehold.ErrorMessage(err), home, home)
	}
	if err != nil {
		return leasehold.Node{}, err
	}
	var n leasehold.Node
	if res.Node != nil {
		n = *res.Node
	}
	n.ID, n.Home = id, home
	return n, nil
}

// applyNodeOp makes a pause, resume or deletion of a node registered
// here that a peer carried here (its visitor there).
func (c *Coordinator) applyNodeOp(ctx context.Context, op AdminOp) (AdminResult, error) {
	id, err := c.db.OwnNodeID(ctx, op.Node)
	if err != nil {
		return AdminResult{}, err
	}
	var res AdminResult
	switch op.Op {
	case opDeleteNode:
		return res, c.DeleteNode(ctx, id, op.Force)
	default:
		n, err := c.SetPaused(ctx, id, op.Op == opPauseNode, op.By)
		res.Node = &n
		return res, err
	}
}
