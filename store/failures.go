package store

import (
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold"
)

// Rule 10, failures speak: a worker that cannot index a range says why,
// and a worker whose window will not load quarantines its group.

// Event kinds of rule 10.
const (
	// EventRangeErrored is a range a worker failed with an error and that
	// was planned again to be retried (a range failed for good is
	// EventRangeFailed, with the error in its body).
	EventRangeErrored     = "range_errored"
	EventGroupQuarantined = "group_quarantined"
	EventQuarantineLifted = "quarantine_lifted"
	EventSnapshotDropped  = "snapshot_dropped"
)

var (
	// The failed range: back to planned at its resume point while it has
	// attempts left and the worker asked for a retry (?3), else failed;
	// its error kept either way. A failed range keeps its node, as one
	// failed by max attempts does, for the finding.
	qRangeFailWith = wq(`UPDATE ranges SET
		status = CASE WHEN ?3 AND attempts < ?4 THEN 'planned' ELSE 'failed' END,
		node_id = CASE WHEN ?3 AND attempts < ?4 THEN NULL ELSE node_id END,
		last_error = ?5, last_error_at = ?2, updated_at = ?2
		WHERE id = ?1 RETURNING ` + rangeColumns)
	qLeaseWorkDone   = wq(`UPDATE group_leases SET range_id = NULL WHERE group_id = ?1 AND range_id = ?2`)
	qNodeNameOf      = wq(`SELECT name FROM nodes WHERE id = ?`)
	qGroupQuarantine = wq(`UPDATE groups SET quarantine_error = ?2, quarantine_node = ?3, quarantine_at = ?4, updated_at = ?4
		WHERE id = ?1`)
	qGroupUnquarantine = wq(`UPDATE groups SET quarantine_error = NULL, quarantine_node = NULL, quarantine_at = NULL, updated_at = ?2
		WHERE id = ?1 AND quarantine_at IS NOT NULL`)
	qSnapshotDrop = wq(`UPDATE group_leases SET snapshot_next = NULL, snapshot_size = NULL, snapshot_sha256 = NULL, snapshot_at = NULL,
		snapshot_file = NULL WHERE group_id = ?1`)
)

// errorText checks a worker's error text: 1 to leasehold.MaxErrorBytes
// bytes. Errors: unprocessable.
func errorText(field, text string) error {
	if len(text) == 0 || len(text) > leasehold.MaxErrorBytes {
		return leasehold.Errorf(leasehold.KindUnprocessable, "%s must be 1 to %d bytes, not %d", field, leasehold.MaxErrorBytes, len(text))
	}
	return nil
}

// FailRange is rule 10 for a range: the holder could not index it and
// says why. With retry the range goes back to planned at its resume point
// (the attempt it was leased with counted), or failed once its attempts
// reach maxAttempts; without retry it is failed at once. Its last error is
// kept either way. It is a holder call, fenced as Finish (rule 6).
// Errors: unprocessable (the text), not found, lease lost, conflict (the
// range is not in this holder's work).
func (tx *Tx) FailRange(h leasehold.RangeHolder, text string, retry bool, maxAttempts int64) (leasehold.Range, error) {
	rangeID, nodeID, fence := h.RangeID, h.NodeID, h.Fence
	if err := errorText("error", text); err != nil {
		return leasehold.Range{}, err
	}
	r, err := tx.heldRange(rangeID, nodeID, fence)
	if err != nil {
		return r, err
	}
	if r.Status != leasehold.StatusLeased || !leasedTo(r, nodeID) {
		return r, leasehold.Errorf(leasehold.KindConflict, "range %d is %s, not in your work", rangeID, r.Status)
	}
	if r, err = scanRange(tx.queryRow(qRangeFailWith, rangeID, ms(tx.now), retry, maxAttempts, text)); err != nil {
		return r, mapError(err, "failing a range")
	}
	if _, err := tx.exec(qLeaseWorkDone, r.GroupID, rangeID); err != nil {
		return r, mapError(err, "failing a range")
	}
	if _, err := tx.exec(qGroupUrgent, r.GroupID); err != nil {
		return r, mapError(err, "failing a range")
	}
	body := map[string]any{"reason": "worker", "error": text, "retry": retry, "attempts": r.Attempts}
	kind := EventRangeErrored
	if r.Status == leasehold.StatusFailed {
		kind = EventRangeFailed
	}
	return r, tx.event(kind, r.GroupID, rangeID, nodeID, body)
}

// ReleaseUnreadable is rule 5's release by a holder whose window would not
// load, and rule 10's quarantine: the group is released (its leased range
// planned again at its resume point) and leased to nobody until an
// operator lifts the quarantine, drops the window or restores another.
// Errors: unprocessable (the text), not found, lease lost.
func (tx *Tx) ReleaseUnreadable(h leasehold.GroupHolder, maxAttempts int64, windowError string) error {
	if err := errorText("window_error", windowError); err != nil {
		return err
	}
	if err := tx.Release(h, maxAttempts); err != nil {
		return err
	}
	groupID, nodeID := h.GroupID, h.NodeID
	node, err := tx.nodeName(nodeID)
	if err != nil {
		return err
	}
	if _, err := tx.exec(qGroupQuarantine, groupID, windowError, node, ms(tx.now)); err != nil {
		return mapError(err, "quarantining a group")
	}
	return tx.event(EventGroupQuarantined, groupID, 0, nodeID, map[string]any{"error": windowError, "node": node})
}

// LiftQuarantine lets the named group be leased again with the window it
// has. A group not quarantined is answered as it is. Errors: not found.
func (tx *Tx) LiftQuarantine(name string) (leasehold.Group, error) {
	g, err := tx.GroupByName(name)
	if err != nil || g.Quarantine == nil {
		return g, err
	}
	if err := tx.unquarantine(g.ID); err != nil {
		return g, err
	}
	return tx.Group(g.ID)
}

func (tx *Tx) unquarantine(groupID int64) error {
	res, err := tx.exec(qGroupUnquarantine, groupID, ms(tx.now))
	if err != nil {
		return mapError(err, "lifting a quarantine")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	return tx.event(EventQuarantineLifted, groupID, 0, 0, nil)
}

// DropSnapshot is an operator dropping the named group's window: its
// snapshot record is cleared, so its next holder starts without a window
// (rule 2 without a snapshot: ranges leased go back to planned at their own
// resume point), and its quarantine is lifted. It returns the group and
// the snapshot dropped (nil when it had none), whose file the caller
// removes after the commit. Errors: not found, conflict (the group is
// held).
func (tx *Tx) DropSnapshot(name string, maxAttempts int64) (leasehold.Group, *leasehold.Snapshot, error) {
	g, l, err := tx.unheldGroup(name, "release it first")
	if err != nil {
		return g, nil, err
	}
	if l.snapshot != nil {
		if _, err := tx.exec(qSnapshotDrop, g.ID); err != nil {
			return g, nil, mapError(err, "dropping a snapshot")
		}
		if err := tx.event(EventSnapshotDropped, g.ID, 0, 0, map[string]any{"next": l.snapshot.Next}); err != nil {
			return g, nil, err
		}
	}
	if err := tx.replan(g.ID, nil, maxAttempts); err != nil {
		return g, nil, err
	}
	if err := tx.unquarantine(g.ID); err != nil {
		return g, nil, err
	}
	g, err = tx.Group(g.ID)
	return g, l.snapshot, err
}

// unheldGroup is the named group and its lease row, for an operator's
// write that no holder may see: a held group is refused, the error
// ending with then, what the operator does first. Errors: not found,
// conflict.
func (tx *Tx) unheldGroup(name, then string) (leasehold.Group, leaseRow, error) {
	g, err := tx.GroupByName(name)
	if err != nil {
		return g, leaseRow{}, err
	}
	l, err := tx.leaseRow(g.ID)
	if err != nil {
		return g, l, err
	}
	if l.holder.Valid {
		return g, l, leasehold.Errorf(leasehold.KindConflict, "group %s is held by node %d at fence %d; %s", name, l.holder.Int64, l.fence, then)
	}
	return g, l, nil
}

// nodeName is a node's name; "" when it is gone.
func (tx *Tx) nodeName(nodeID int64) (string, error) {
	var name string
	err := tx.queryRow(qNodeNameOf, nodeID).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return name, mapError(err, "reading a node")
}
