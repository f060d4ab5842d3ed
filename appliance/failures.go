package appliance

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Rule 10, failures speak: a worker says why it cannot index a range, and
// a worker whose window will not load quarantines its group until an
// operator acts.

// Fail is rule 10 for a range: the holder could not index it, and says
// why (text, 1 to leasehold.MaxErrorBytes bytes). With retry the range is
// planned again at its resume point until its attempts reach the maximum,
// then failed; without retry it is failed at once. A holder call, fenced
// as Finish. Errors: unprocessable, not found, lease lost, conflict.
func (c *Coordinator) Fail(ctx context.Context, h leasehold.RangeHolder, text string, retry bool) (leasehold.Range, error) {
	var r leasehold.Range
	err := c.claims.writeRange(ctx, c.db, h.RangeID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		var err error
		r, err = tx.FailRange(h, text, retry, c.maxAttempts)
		return err
	})
	if err == nil {
		c.recorder.RangeFailed(r.Status == leasehold.StatusFailed)
	}
	return r, err
}

// ReleaseUnreadable is rule 5's release by a holder whose window would not
// load (windowError says why, 1 to leasehold.MaxErrorBytes bytes): the
// group is released and quarantined, leased to nobody until an operator
// lifts the quarantine, drops the window or restores another. Errors:
// unprocessable, not found, lease lost.
func (c *Coordinator) ReleaseUnreadable(ctx context.Context, h leasehold.GroupHolder, windowError string) error {
	err := c.claims.writeGroup(ctx, c.db, h.GroupID, func(tx *store.Tx) error {
		if err := tx.TouchNode(h.NodeID); err != nil {
			return err
		}
		return tx.ReleaseUnreadable(h, c.maxAttempts, windowError)
	})
	if err == nil {
		c.recorder.GroupQuarantined()
	}
	return err
}

// LiftQuarantine lets the named group be leased again with the window it
// has (a peer's group at its owner). Errors: not found, conflict,
// unavailable (the owner cannot be reached).
func (c *Coordinator) LiftQuarantine(ctx context.Context, name string) (leasehold.Group, error) {
	if origin, forward, err := c.originOf(ctx, name); err != nil || origin != "" {
		if err != nil {
			return leasehold.Group{}, err
		}
		res, err := forward(ctx, origin, AdminOp{Op: "lift_quarantine", Group: name})
		if err != nil || res.Group == nil {
			return leasehold.Group{}, err
		}
		return *res.Group, nil
	}
	if err := c.ensureKnown(ctx, name); err != nil {
		return leasehold.Group{}, err
	}
	return c.liftQuarantine(ctx, name)
}

func (c *Coordinator) liftQuarantine(ctx context.Context, name string) (leasehold.Group, error) {
	var g leasehold.Group
	err := c.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		g, err = tx.LiftQuarantine(name)
		return err
	})
	return g, err
}

// Drop is an operator dropping the named group's window (rule 2 without a
// snapshot: its next holder starts without one) and lifting its
// quarantine; the file is removed once the catalog no longer points at
// it. A peer's group is dropped at its owner only. Errors: not found,
// conflict (held, or a peer's group), unavailable.
func (s *Snapshots) Drop(ctx context.Context, name string, maxAttempts int64) (leasehold.Group, error) {
	g, err := s.UploadGroup(ctx, name)
	if err != nil {
		return g, err
	}
	if err := s.claims.early(ctx, s.db, g.ID, false); err != nil {
		return g, err
	}
	var h holding
	err = s.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		if h, err = s.claims.check(tx, g.ID); err != nil {
			return err
		}
		var old *leasehold.Snapshot
		g, old, err = tx.DropSnapshot(name, maxAttempts)
		if err == nil && old != nil {
			path := s.path(g.ID, old.File, ".gz")
			tx.AfterCommit(func() { s.remove(path) })
		}
		return err
	})
	if err != nil {
		return leasehold.Group{}, err
	}
	return g, s.claims.still(h)
}

// DropSnapshot is an operator dropping the named group's window and
// lifting its quarantine (Snapshots.Drop). Errors: not found, conflict
// (held, or a peer's group), unavailable.
func (a *Appliance) DropSnapshot(ctx context.Context, name string) (leasehold.Group, error) {
	return a.Snapshots.Drop(ctx, name, a.Coordinator.maxAttempts)
}

// DeleteGroup is an operator deleting the named group on a node alone:
// its ranges, lease row and window snapshot go with it in one write, and
// the snapshot's file once that write is committed. In a fleet the
// deletion is the owner's and travels (Appliance.DeleteGroup). Errors:
// not found, conflict (held, or peer sync on), unavailable.
func (s *Snapshots) DeleteGroup(ctx context.Context, name string) error {
	if !s.claims.alone {
		return leasehold.Errorf(leasehold.KindConflict, "group %s: in a fleet a group is deleted at its owner (Appliance.DeleteGroup)", name)
	}
	return s.db.Write(ctx, func(tx *store.Tx) error {
		g, old, err := tx.DeleteGroup(name)
		if err == nil && old != nil {
			path := s.path(g.ID, old.File, ".gz")
			tx.AfterCommit(func() { s.remove(path) })
		}
		return err
	})
}
