package appliance

import (
	"context"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Fleet is what the coordinator asks of the fleet a node is part of. It is
// given at Open (Config.Fleet); a node alone gets Alone, which owns every
// group. In a fleet a group is the business of the node that holds its
// ownership claim, and that node alone leases it and answers its holder
// calls (see fenced).
type Fleet interface {
	// Holds reports whether this node holds group's ownership claim now,
	// and the claim's revision. It asks no one (it is answered from
	// memory, on every holder call), and it is false from the moment the
	// claim could be taken over by another node: a node cut off, paused or
	// restarted stops answering in time by itself.
	Holds(group string) (rev uint64, ok bool)
	// Want is told of a group a lease chose but this node holds no claim
	// on: its claim is tried in the background.
	Want(group string)
	// ClaimNow claims groups of this node's own at once, for a lease that
	// found nothing else, and reports whether one was won and owned. It
	// honours ctx.
	ClaimNow(ctx context.Context, groups []string) bool
	// Ensure makes sure this node holds group's claim before an admin write
	// on it. Errors: conflict (another node owns it), unavailable.
	Ensure(ctx context.Context, group string) error
	// Idle is told that a lease of worker node found nothing to lease: in
	// a fleet, the moment to take on groups no live node owns, and to ask
	// peers for groups in that worker's band they leave unleased. Idle
	// workers poll, so it is called often and must limit itself; it must
	// not block.
	Idle(node int64)
	// Forward carries an admin write on a peer's group to origin, its
	// owner, and returns origin's answer (its error kind kept).
	Forward(ctx context.Context, origin string, op AdminOp) (AdminResult, error)
	// Ready is nil once the node has joined its fleet; until then it
	// leases nothing and answers no holder call. Errors: unavailable, with
	// what the node waits for.
	Ready() error
}

// Engine is a Fleet on an engine that can be offline while the node has
// joined (NATS without a leader for the fleet's streams): the node is
// then not ready, though its own catalog is.
type Engine interface {
	// EngineOffline is nil while the engine serves the fleet. Errors:
	// unavailable, naming what is offline.
	EngineOffline(ctx context.Context) error
}

// Alone is the Fleet of a node that runs alone: it owns every group,
// forwards nothing and is always ready.
type Alone struct{}

// Holds is always true: a node alone owns every group.
func (Alone) Holds(string) (uint64, bool) { return 0, true }

// Want does nothing.
func (Alone) Want(string) {}

// ClaimNow wins nothing: a node alone owns every group already.
func (Alone) ClaimNow(context.Context, []string) bool { return false }

// Ensure is nil: a node alone owns every group.
func (Alone) Ensure(context.Context, string) error { return nil }

// Idle does nothing.
func (Alone) Idle(int64) {}

// Forward is never asked: a node alone has no peers' groups to forward.
func (Alone) Forward(_ context.Context, origin string, _ AdminOp) (AdminResult, error) {
	return AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "this node runs alone: no peer %q to carry the write to", origin)
}

// Ready is nil: a node alone has nothing to join.
func (Alone) Ready() error { return nil }

// claimCheck is rule 6 in a fleet, written once: a holder call (next,
// heartbeat, progress, finish, release, a snapshot upload or download) is
// answered only while this node holds the group's ownership claim at the
// revision the catalog owns the group under, which is the revision its
// leases were granted under (store.Tx.OwnGroup ends every lease of an
// earlier claim when a claim is won anew). It is checked twice:
//
//   - inside the write, before the call changes anything, so a node whose
//     claim is gone changes nothing;
//   - once the write is committed, before the answer is sent, so an answer
//     that would land after the claim could lapse (a node paused, or a
//     write queued behind a slow commit) is a refusal instead.
//
// Either refusal is lease lost (409 lease_lost). A node restarted holds no
// claim until it has joined and claimed anew, so every lease of its
// earlier life is lost before it answers a holder call. A node alone
// checks nothing here: the catalog's fence is the whole rule.
type claimCheck struct {
	fleet Fleet
	alone bool
}

// holding is what the first check found: the claim the call is answered
// under.
type holding struct {
	group string
	rev   uint64
}

// check is the first check, inside the write, for a call on groupID.
// Errors: not found, lease lost.
func (f claimCheck) check(tx *store.Tx, groupID int64) (holding, error) {
	if f.alone {
		return holding{}, nil
	}
	name, owned, claimRev, err := tx.GroupClaim(groupID)
	if err != nil {
		return holding{}, err
	}
	if err := f.fleet.Ready(); err != nil {
		return holding{}, leasehold.Errorf(leasehold.KindLeaseLost, "group %q: this node has not joined its fleet yet, so no lease of its earlier life stands (%s)", name, leasehold.ErrorMessage(err))
	}
	rev, ok := f.fleet.Holds(name)
	switch {
	case !owned:
		return holding{}, leasehold.Errorf(leasehold.KindLeaseLost, "group %q is not this node's: another node of the fleet owns it", name)
	case !ok:
		return holding{}, leasehold.Errorf(leasehold.KindLeaseLost, "group %q: this node no longer holds its claim in the fleet", name)
	case rev != claimRev:
		return holding{}, leasehold.Errorf(leasehold.KindLeaseLost, "group %q: this node's claim changed (revision %d, the lease was granted under %d)", name, rev, claimRev)
	}
	return holding{group: name, rev: rev}, nil
}

// checkRange is check for a call on a range, by its group. Errors: not
// found, lease lost.
func (f claimCheck) checkRange(tx *store.Tx, rangeID int64) (holding, error) {
	if f.alone {
		return holding{}, nil
	}
	gid, err := tx.RangeGroup(rangeID)
	if err != nil {
		return holding{}, err
	}
	return f.check(tx, gid)
}

// still is the second check, once the write is committed: the claim the
// call was answered under must still be held now. Errors: lease lost.
func (f claimCheck) still(h holding) error {
	if f.alone {
		return nil
	}
	if rev, ok := f.fleet.Holds(h.group); !ok || rev != h.rev {
		return leasehold.Errorf(leasehold.KindLeaseLost, "group %q: this node's claim in the fleet lapsed before the answer could be given; the call may have been recorded but the lease is lost", h.group)
	}
	return nil
}

// early refuses, before a long upload is read, a call this node would
// refuse at its write: the fleet not joined, or the group's claim not held
// here. An operator's call (holder false) first makes sure this node holds
// the claim, as admin writes do. It is only a courtesy to the caller: the
// write checks again. Errors: not found, lease lost, and Ensure's.
func (f claimCheck) early(ctx context.Context, db *store.DB, groupID int64, holder bool) error {
	if f.alone {
		return nil
	}
	g, err := db.GroupByID(ctx, groupID)
	if err != nil {
		return err
	}
	if !holder {
		if err := f.fleet.Ensure(ctx, g.Name); err != nil {
			return err
		}
	}
	if err := f.fleet.Ready(); err != nil {
		return leasehold.Errorf(leasehold.KindLeaseLost, "group %q: this node has not joined its fleet yet (%s)", g.Name, leasehold.ErrorMessage(err))
	}
	if _, ok := f.fleet.Holds(g.Name); !ok {
		return leasehold.Errorf(leasehold.KindLeaseLost, "group %q: this node does not hold its claim in the fleet", g.Name)
	}
	return nil
}

// writeGroup runs a holder call on groupID as one queued write fenced by
// ownership: fn runs only after the first check and its answer stands
// only after the second.
func (f claimCheck) writeGroup(ctx context.Context, db *store.DB, groupID int64, fn func(tx *store.Tx) error) error {
	return f.write(ctx, db, func(tx *store.Tx) (holding, error) { return f.check(tx, groupID) }, fn)
}

// writeRange is writeGroup for a holder call on a range: the checks are of
// the range's group.
func (f claimCheck) writeRange(ctx context.Context, db *store.DB, rangeID int64, fn func(tx *store.Tx) error) error {
	return f.write(ctx, db, func(tx *store.Tx) (holding, error) { return f.checkRange(tx, rangeID) }, fn)
}

// write is writeGroup and writeRange: check is the first check.
func (f claimCheck) write(ctx context.Context, db *store.DB, check func(tx *store.Tx) (holding, error), fn func(tx *store.Tx) error) error {
	var h holding
	err := db.Write(ctx, func(tx *store.Tx) error {
		var err error
		if h, err = check(tx); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil {
		return err
	}
	return f.still(h)
}
