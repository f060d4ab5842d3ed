package appliance

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Deletes that travel. In a fleet a group is deleted by its owner, as any
// admin write on it: a node that holds a peer's state of it carries the
// deletion there. The owner refuses while a worker holds the group, as a
// lone node does; else it deletes it with a tombstone and an event every
// peer folds (store.Tx.DeleteFleetGroup), and gives its claim up, so no
// node takes a deleted group over and no late event makes it again.

// Forgetter is a Fleet that gives a deleted group's claim up.
type Forgetter interface {
	Forget(ctx context.Context, group string) error
}

// DeleteGroup is an operator deleting the named group: alone, at once
// (Snapshots.DeleteGroup); in a fleet at its owner, from which the
// deletion travels to every node. Errors: not found, conflict (held),
// unavailable (the owner cannot be reached, or this node not joined).
func (a *Appliance) DeleteGroup(ctx context.Context, name string) error {
	c := a.Coordinator
	if c.alone {
		return a.Snapshots.DeleteGroup(ctx, name)
	}
	origin, forward, err := c.originOf(ctx, name)
	if err != nil {
		return err
	}
	if origin != "" {
		_, err := forward(ctx, origin, AdminOp{Op: "delete_group", Group: name})
		return err
	}
	return c.deleteGroup(ctx, name)
}

// deleteGroup deletes a group this node owns (or claims first) in its
// fleet, and gives its claim up once the deletion is written.
func (c *Coordinator) deleteGroup(ctx context.Context, name string) error {
	if _, err := c.db.GroupByName(ctx, name); err != nil {
		return err
	}
	if err := c.ensureOwned(ctx, name); err != nil {
		return err
	}
	if err := c.deleteOwned(ctx, name); err != nil {
		return err
	}
	if f, ok := c.fleet.(Forgetter); ok {
		// A claim left standing lapses with this node's life; the
		// tombstone keeps the group deleted meanwhile.
		_ = f.Forget(ctx, name)
	}
	return nil
}

// deleteOwned deletes the named group this node owns in its fleet, in
// one write checked against its claim (rule 6), with its window's file
// once committed. Errors: not found, conflict (held, or not owned here).
func (s *Snapshots) deleteOwned(ctx context.Context, name string) error {
	g, err := s.db.GroupByName(ctx, name)
	if err != nil {
		return err
	}
	var h holding
	err = s.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		if h, err = s.claims.check(tx, g.ID); err != nil {
			return err
		}
		g, old, err := tx.DeleteFleetGroup(name)
		if err == nil && old != nil {
			path := s.path(g.ID, old.File, ".gz")
			tx.AfterCommit(func() { s.remove(path) })
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := s.claims.still(h); err != nil {
		return leasehold.Errorf(leasehold.KindUnavailable, "group %s was deleted here, but this node's claim on it lapsed meanwhile: %s", name, leasehold.ErrorMessage(err))
	}
	return nil
}
