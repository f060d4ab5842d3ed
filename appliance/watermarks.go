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
// node owns, never reported and longest unreported first. Errors:
// invalid, unavailable.
func (c *Coordinator) Watermarks(ctx context.Context, limit int) ([]leasehold.Watermarks, error) {
	if limit < 1 || limit > MaxWatermarks {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "limit must be 1 to %d", MaxWatermarks)
	}
	return c.db.Watermarks(ctx, limit)
}

// ReportWatermarks records the named group's water marks as its source
// reported them and plans its tail up to high (idempotent, never
// shrinking); a peer's group is reported to its owner. It reports how many
// ranges were planned. Errors: not found, unprocessable (inconsistent
// marks, 0 ≤ low ≤ high+1 is wanted), unavailable (the owner cannot be
// reached).
func (c *Coordinator) ReportWatermarks(ctx context.Context, name string, low, high int64) (int64, error) {
	if origin, forward, err := c.originOf(ctx, name); err != nil || origin != "" {
		if err != nil {
			return 0, err
		}
		res, err := forward(ctx, origin, AdminOp{Op: "watermarks", Group: name, Low: low, High: high})
		return res.Planned, err
	}
	if err := c.ensureKnown(ctx, name); err != nil {
		return 0, err
	}
	return c.reportWatermarks(ctx, name, low, high)
}

func (c *Coordinator) reportWatermarks(ctx context.Context, name string, low, high int64) (int64, error) {
	return c.plan(ctx, name, func(tx *store.Tx, id int64) (int64, error) { return tx.ReportWatermarks(id, low, high) })
}
