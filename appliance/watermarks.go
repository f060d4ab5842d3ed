package appliance

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Rule 11, sources plan themselves: workers ask the node which groups'
// water marks are oldest, ask their source, and report what it says; the
// node plans the tail up to the high mark.

// MaxWatermarks is the most groups one Watermarks call lists.
const MaxWatermarks = 1000

// Watermarks lists up to limit (1 to MaxWatermarks) active groups this
// node owns of the kinds the calling node reads (rule 12), never reported
// and longest unreported first, and those kinds; a group another node
// holds is left out, since only its holder may report it (holderOnly).
// Errors: invalid, not found (the node), unavailable.
func (c *Coordinator) Watermarks(ctx context.Context, nodeID int64, limit int) ([]leasehold.Watermarks, []string, error) {
	if limit < 1 || limit > MaxWatermarks {
		return nil, nil, leasehold.Errorf(leasehold.KindInvalid, "limit must be 1 to %d", MaxWatermarks)
	}
	n, err := c.db.Node(ctx, nodeID)
	if err != nil {
		return nil, nil, err
	}
	ws, err := c.db.Watermarks(ctx, n.Kinds, limit, nodeID, c.now().Add(-c.ttl))
	return ws, n.Kinds, err
}

// ReportWatermarks records the named group's water marks as its source
// reported them and plans its tail up to high (idempotent, never
// shrinking); a peer's group is reported to its owner. It reports how many
// ranges were planned. Errors: forbidden (the group is of a kind the node
// does not read, or another node holds it: nothing changes), not found,
// unprocessable (inconsistent marks, 0 ≤ low ≤ high+1 is wanted),
// unavailable (the owner cannot be reached).
func (c *Coordinator) ReportWatermarks(ctx context.Context, nodeID int64, name string, low, high int64) (int64, error) {
	node, err := c.readsKind(ctx, nodeID, name)
	if err != nil {
		return 0, err
	}
	if origin, forward, err := c.originOf(ctx, name); err != nil || origin != "" {
		if err != nil {
			return 0, err
		}
		res, err := forward(ctx, origin, AdminOp{Op: "watermarks", Group: name, Low: low, High: high, Node: node})
		return res.Planned, err
	}
	if err := c.ensureKnown(ctx, name); err != nil {
		return 0, err
	}
	return c.reportWatermarks(ctx, name, node, low, high)
}

// ReportSourceError records that the named group's source could not be
// read, as the node's worker said (rule 13): the group's source_error, a
// finding after two in a row. A peer's group is reported to its owner.
// Errors: invalid (1 to 4096 bytes), forbidden (not of the node's
// kinds), not found, unavailable.
func (c *Coordinator) ReportSourceError(ctx context.Context, nodeID int64, name, text string) error {
	if text == "" || len(text) > store.MaxSourceError {
		return leasehold.Errorf(leasehold.KindInvalid, "error must be 1 to %d bytes, not %d", store.MaxSourceError, len(text))
	}
	node, err := c.readsKind(ctx, nodeID, name)
	if err != nil {
		return err
	}
	if origin, forward, err := c.originOf(ctx, name); err != nil || origin != "" {
		if err != nil {
			return err
		}
		_, err = forward(ctx, origin, AdminOp{Op: "source_error", Group: name, Error: text, Node: node})
		return err
	}
	if err := c.ensureKnown(ctx, name); err != nil {
		return err
	}
	return c.reportSourceError(ctx, name, node, text)
}

func (c *Coordinator) reportSourceError(ctx context.Context, name, node, text string) error {
	_, err := c.plan(ctx, name, func(tx *store.Tx, id int64) (int64, error) {
		if err := c.holderOnly(tx, id, name, node); err != nil {
			return 0, err
		}
		return tx.ReportSourceError(id, node, text)
	})
	return err
}

// holderOnly refuses a report on the group from node (its name, as
// carried across the fleet) while another node holds it (a lease beaten
// within the TTL). Workers report groups they do not hold: rule 11 needs
// it, since a group with nothing planned cannot be leased and only a
// report plans it, and every worker of a kind asks its source about the
// groups whose marks are oldest. But a worker that does not hold a group
// has no business with one another worker holds: its holder reports it,
// and a report from elsewhere (a wrong or hostile worker of the kind)
// could otherwise plan its tail past the source's real high (ranges read
// empty and finished, their ids never read when they come), overwrite
// its marks or raise a finding on it. Watermarks leaves such groups out,
// so a worker is not sent to report them. Errors: forbidden.
func (c *Coordinator) holderOnly(tx *store.Tx, id int64, name, node string) error {
	holder, held, err := tx.LiveHolder(id, c.now().Add(-c.ttl))
	if err != nil || !held || (node != "" && holder == node) {
		return err
	}
	// The holder is not named: who holds a lease is told to that holder.
	return leasehold.Errorf(leasehold.KindForbidden,
		"group %s is held by another worker: while it is held, only its holder reports its source", name)
}

// readsKind checks that the node reads the named group's kind (rule 12)
// and returns the node's name. Errors: forbidden, not found.
func (c *Coordinator) readsKind(ctx context.Context, nodeID int64, name string) (string, error) {
	n, err := c.db.Node(ctx, nodeID)
	if err != nil {
		return "", err
	}
	g, err := c.db.GroupByName(ctx, name)
	if err != nil {
		return "", err
	}
	if !leasehold.HasSourceKind(n.Kinds, g.Kind) {
		return "", leasehold.Errorf(leasehold.KindForbidden,
			"group %s is of kind %s and node %s reads %v: only a worker of kind %s reports its source", name, g.Kind, n.Name, n.Kinds, g.Kind)
	}
	return n.Name, nil
}

func (c *Coordinator) reportWatermarks(ctx context.Context, name, node string, low, high int64) (int64, error) {
	return c.plan(ctx, name, func(tx *store.Tx, id int64) (int64, error) {
		if err := c.holderOnly(tx, id, name, node); err != nil {
			return 0, err
		}
		return tx.ReportWatermarks(id, low, high)
	})
}
