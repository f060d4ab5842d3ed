package store

import (
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold"
)

// Finishing a range (rule 4's end), alone or in the worker's steady call,
// next with the range it finished. A range's finish is the catalog's most
// frequent write, so its usual case is two statements: the range's update,
// whose WHERE is Finish's checks, then the lease's, whose WHERE is rule 6.
// Anything else (a range done already, not in the holder's work, too many
// headers, a lease lost first) takes the checked path, which reads the
// range and answers as it always has.

var (
	// The usual finish: the range is leased to the node, of the group
	// (?5; 0 for any) and headers (?2) fit its ids. No row: not the usual
	// case, and nothing changed.
	qRangeFinishHeld = wq(`UPDATE ranges SET status = 'done', next_id = end_id + 1, headers = ?2, heartbeat_at = ?3, updated_at = ?3
		WHERE id = ?1 AND status = 'leased' AND node_id = ?4 AND (?5 = 0 OR group_id = ?5) AND ?2 <= end_id - start_id + 1
		RETURNING ` + rangeColumns)
	// The holder check, its heartbeat and the finish's counts in one
	// statement: no row means the caller is not the holder at that fence.
	// It returns the range still in work (none once the finished one was).
	qLeaseFinish = wq(`UPDATE group_leases SET heartbeat_at = ?5, range_id = CASE WHEN range_id = ?4 THEN NULL ELSE range_id END,
		progressed = 1, ranges_done = ranges_done + 1, headers = CASE WHEN headers > 9223372036854775807 - ?6 THEN 9223372036854775807 ELSE headers + ?6 END
		WHERE group_id = ?1 AND node_id = ?2 AND fence = ?3 RETURNING range_id`)
	qRangeFinish = wq(`UPDATE ranges SET status = 'done', next_id = end_id + 1, headers = ?2, heartbeat_at = ?3, updated_at = ?3
		WHERE id = ?1 RETURNING ` + rangeColumns)
)

// Finish is rule 4's end: the range is done with headers counted on the
// lease. Finishing a range this holder already finished answers it again.
func (tx *Tx) Finish(h leasehold.RangeHolder, headers int64) (leasehold.Range, error) {
	r, _, ok, err := tx.finishHeld(h, 0, headers)
	if err != nil {
		return r, err
	}
	if !ok {
		return tx.finishChecked(h, headers)
	}
	if _, err := tx.exec(qGroupUrgent, r.GroupID); err != nil {
		return r, mapError(err, "finishing a range")
	}
	return r, nil
}

// FinishNext is Finish of f.Range, a range of the holder's group, then
// NextRange: the worker's steady call, in one write. Its errors are
// Finish's, with unprocessable for a range of another group, then
// NextRange's; on any of them the caller's write undoes the whole call.
func (tx *Tx) FinishNext(p NextParams, f leasehold.FinishedRange) (*leasehold.Range, error) {
	groupID := p.Holder.GroupID
	h := leasehold.RangeHolder{NodeID: p.Holder.NodeID, RangeID: f.Range, Fence: p.Holder.Fence}
	done, inWork, ok, err := tx.finishHeld(h, groupID, f.Headers)
	if err != nil {
		return nil, err
	}
	if !ok {
		gid, err := tx.RangeGroup(f.Range)
		if err != nil {
			return nil, err
		}
		if gid != groupID {
			return nil, leasehold.Errorf(leasehold.KindUnprocessable, "range %d is not of group %d", f.Range, groupID)
		}
		if _, err := tx.finishChecked(h, f.Headers); err != nil {
			return nil, err
		}
		return tx.NextRange(p)
	}
	r, err := tx.nextRange(p, inWork)
	if err != nil {
		return nil, err
	}
	// The group's urgency is the least priority of its planned and leased
	// ranges, a lane each. The finish took one of priority p out; if the
	// range now in work has p too, the least is what it was (it was at
	// most p, and if it was p, p is still there), and the group's row and
	// its two choice indexes are left alone. Otherwise count again.
	if r == nil || r.Priority != done.Priority {
		if _, err := tx.exec(qGroupUrgent, groupID); err != nil {
			return nil, mapError(err, "finishing a range")
		}
	}
	return r, nil
}

// finishHeld is Finish's usual case, inside groupID when it is not 0: the
// range, leased to the node, is done and counted on its lease, and the
// lease's range still in work is returned. ok is false, with nothing
// changed, when it is not the usual case. The group's urgency is left to
// the caller.
func (tx *Tx) finishHeld(h leasehold.RangeHolder, groupID, headers int64) (r leasehold.Range, inWork sql.NullInt64, ok bool, err error) {
	rangeID, nodeID, fence := h.RangeID, h.NodeID, h.Fence
	now := ms(tx.now)
	r, err = scanRange(tx.queryRow(qRangeFinishHeld, rangeID, headers, now, nodeID, groupID))
	if errors.Is(err, sql.ErrNoRows) {
		return r, inWork, false, nil
	}
	if err != nil {
		return r, inWork, false, mapError(err, "finishing a range")
	}
	err = tx.queryRow(qLeaseFinish, r.GroupID, nodeID, fence, rangeID, now, headers).Scan(&inWork)
	if errors.Is(err, sql.ErrNoRows) {
		// Lease lost (or the group gone): the range's update is undone
		// with the write.
		return r, inWork, false, tx.leaseNotCounted(r.GroupID, nodeID, fence, rangeID)
	}
	if err != nil {
		return r, inWork, false, mapError(err, "finishing a range")
	}
	return r, inWork, true, tx.event(EventRangeFinished, r.GroupID, rangeID, nodeID, map[string]any{"headers": headers})
}

// finishChecked is Finish read first, for every case: a range done
// already, not found, not in the holder's work, with too many headers.
func (tx *Tx) finishChecked(h leasehold.RangeHolder, headers int64) (leasehold.Range, error) {
	rangeID, nodeID, fence := h.RangeID, h.NodeID, h.Fence
	r, err := scanRange(tx.queryRow(qRangeByID, rangeID))
	if errors.Is(err, sql.ErrNoRows) {
		return r, leasehold.Errorf(leasehold.KindNotFound, "range %d not found", rangeID)
	}
	if err != nil {
		return r, mapError(err, "reading a range")
	}
	if r.Status == leasehold.StatusDone && leasedTo(r, nodeID) {
		_, err := tx.holder(r.GroupID, nodeID, fence)
		return r, err
	}
	// The lease is checked (and counted) first, so a caller that lost it
	// hears lease lost whatever became of the range; the checks after it
	// undo the count with the write's savepoint.
	var inWork sql.NullInt64
	err = tx.queryRow(qLeaseFinish, r.GroupID, nodeID, fence, rangeID, ms(tx.now), headers).Scan(&inWork)
	if errors.Is(err, sql.ErrNoRows) {
		return r, tx.leaseNotCounted(r.GroupID, nodeID, fence, rangeID)
	}
	if err != nil {
		return r, mapError(err, "finishing a range")
	}
	if r.Status != leasehold.StatusLeased || !leasedTo(r, nodeID) {
		return r, leasehold.Errorf(leasehold.KindConflict, "range %d is %s, not in your work", rangeID, r.Status)
	}
	// A range holds at most one header an id; the bound keeps the sums of
	// headers on the lease and the dashboard inside int64.
	if ids := r.End - r.Start + 1; headers > ids {
		return r, leasehold.Errorf(leasehold.KindUnprocessable, "headers %d is more than the %d ids of range %d", headers, ids, rangeID)
	}
	r, err = scanRange(tx.queryRow(qRangeFinish, rangeID, headers, ms(tx.now)))
	if err != nil {
		return r, mapError(err, "finishing a range")
	}
	if _, err := tx.exec(qGroupUrgent, r.GroupID); err != nil {
		return r, mapError(err, "finishing a range")
	}
	return r, tx.event(EventRangeFinished, r.GroupID, rangeID, nodeID, map[string]any{"headers": headers})
}

// leaseNotCounted says why a finish's count on the lease changed no row:
// the holder check's answer (lease lost, the group gone), or, if the
// holder still holds, an internal error, for that cannot be.
func (tx *Tx) leaseNotCounted(groupID, nodeID, fence, rangeID int64) error {
	if _, err := tx.holder(groupID, nodeID, fence); err != nil {
		return err
	}
	return leasehold.Errorf(leasehold.KindInternal, "group %d: finishing range %d changed no lease", groupID, rangeID)
}
