package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// LeaseRequest is what the lease rule needs to know beyond the node's row.
type LeaseRequest struct {
	NodeID int64
	// TTL is how long a holder may be quiet before its group is free.
	TTL time.Duration
	// TailOnly restricts the lease to tail work (the history cap).
	TailOnly bool
	// MaxAttempts fails a range leased this many times without finishing.
	MaxAttempts int64
	// OwnsFunc, when set, says whether this node may lease the named group
	// now (in a fleet: whether it holds the group's ownership claim at
	// claimRev, the revision the catalog owns the group under). A chosen
	// group it refuses is disowned (DisownGroup) and passed over.
	OwnsFunc func(group string, claimRev uint64) bool
}

// maxDisownedPerLease bounds how many refused groups one lease passes
// over before answering that there is nothing to lease; the next lease
// goes on where it stopped, since refused groups leave the choice.
const maxDisownedPerLease = 16

var (
	qNodeLeaseInfo = wq(`SELECT paused, capacity, priority_min, priority_max, kinds FROM nodes WHERE id = ?`)
	qNodeHeldLive  = wq(`SELECT count(*) FROM group_leases WHERE node_id = ? AND heartbeat_at >= ?`)
	// The free group of kind ?3 with the most urgent work in the band, one
	// seek a lane and kind.
	qChooseFreeTail = wq(`SELECT id, urgent_tail, free_since, priority FROM groups
		WHERE kind = ?3 AND held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_tail BETWEEN ?1 AND ?2
		ORDER BY urgent_tail, free_since, priority, id LIMIT 1`)
	qChooseFreeHist = wq(`SELECT id, urgent_hist, free_since, priority FROM groups
		WHERE kind = ?3 AND held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_hist BETWEEN ?1 AND ?2
		ORDER BY urgent_hist, free_since, priority, id LIMIT 1`)
	// Held groups whose holder went quiet: bounded by the leases held, not
	// the catalog. ?2..?3 is the band's tail part, ?4..?5 its history part,
	// ?6 the node's kinds (a JSON array). CROSS JOIN keeps the held leases
	// the outer loop: the kinds are a filter, never a walk of a kind's
	// groups.
	qChooseQuiet = wq(`SELECT id, urgent, heartbeat_at, priority, node_id FROM (
		SELECT g.id, CASE WHEN g.urgent_tail BETWEEN ?2 AND ?3 THEN g.urgent_tail ELSE g.urgent_hist END AS urgent, l.heartbeat_at, g.priority, l.node_id
		FROM group_leases l CROSS JOIN groups g ON g.id = l.group_id
		WHERE l.node_id IS NOT NULL AND l.heartbeat_at < ?1 AND g.active = 1 AND g.owned = 1 AND g.quarantine_at IS NULL
		AND g.kind IN (SELECT value FROM json_each(?6)) AND (g.urgent_tail BETWEEN ?2 AND ?3 OR g.urgent_hist BETWEEN ?4 AND ?5))
		ORDER BY urgent, heartbeat_at, priority, id LIMIT 1`)
	qLeaseRow = wq(`SELECT l.node_id, l.fence, l.snapshot_next, l.snapshot_size, l.snapshot_sha256, l.snapshot_at, l.snapshot_file, coalesce(n.name, '')
		FROM group_leases l LEFT JOIN nodes n ON n.id = l.node_id WHERE l.group_id = ?`)
	// The snapshot columns are not changed by the take, so RETURNING reads
	// them as they were.
	qLeaseTake = wq(`UPDATE group_leases SET node_id = ?2, fence = fence + 1, leased_at = ?3, heartbeat_at = ?3, range_id = NULL, progressed = 0
		WHERE group_id = ?1 RETURNING fence, snapshot_next, snapshot_size, snapshot_sha256, snapshot_at, snapshot_file`)
	qNodeName  = wq(`SELECT name FROM nodes WHERE id = ?`)
	qGroupHeld = wq(`UPDATE groups SET held = 1 WHERE id = ? RETURNING ` + groupReturning)
	// A lease end counts as a flap unless a range progressed under it
	// (the lease row's progressed, read before the next take resets it).
	qGroupFree = wq(`UPDATE groups SET held = 0, free_since = ?2, ` + flapSet + ` WHERE id = ?1`)
	qGroupFlap = wq(`UPDATE groups SET ` + flapSet + ` WHERE id = ?1`)
	// qGroupFree and qGroupUrgent in one statement, for a release that
	// replanned ranges.
	qGroupFreeUrgent = wq(`UPDATE groups SET held = 0, free_since = ?2, ` + flapSet + `,
		urgent_tail = (SELECT min(priority) FROM ranges WHERE group_id = ?1 AND status IN ('planned', 'leased') AND priority < 0),
		urgent_hist = (SELECT min(priority) FROM ranges WHERE group_id = ?1 AND status IN ('planned', 'leased') AND priority >= 0)
		WHERE id = ?1`)
	qGroupUrgent = wq(`UPDATE groups SET
		urgent_tail = (SELECT min(priority) FROM ranges WHERE group_id = ?1 AND status IN ('planned', 'leased') AND priority < 0),
		urgent_hist = (SELECT min(priority) FROM ranges WHERE group_id = ?1 AND status IN ('planned', 'leased') AND priority >= 0)
		WHERE id = ?1`)
	qLeaseDrop       = wq(`UPDATE group_leases SET node_id = NULL, range_id = NULL WHERE group_id = ?`)
	qLeaseBeat       = wq(`UPDATE group_leases SET heartbeat_at = ?4 WHERE group_id = ?1 AND node_id = ?2 AND fence = ?3 RETURNING range_id`)
	qLeaseHolder     = wq(`SELECT node_id, fence FROM group_leases WHERE group_id = ?`)
	qLeaseProgressed = wq(`UPDATE group_leases SET progressed = 1 WHERE group_id = ? AND progressed = 0`)
	qLeaseSetWork    = wq(`UPDATE group_leases SET range_id = ?2 WHERE group_id = ?1`)
	// The holder check and the release in one statement.
	qLeaseRelease = wq(`UPDATE group_leases SET node_id = NULL, range_id = NULL WHERE group_id = ?1 AND node_id = ?2 AND fence = ?3`)

	// Rule 2 with a snapshot at S (?3): leased or done ranges ending at or after S.
	qReplanCovered = wq(`UPDATE ranges SET
		status = CASE WHEN status = 'leased' AND attempts >= ?4 THEN 'failed' ELSE 'planned' END,
		next_id = CASE WHEN status = 'leased' AND attempts >= ?4 THEN next_id ELSE max(start_id, ?3) END,
		attempts = CASE WHEN status = 'done' THEN 0 ELSE attempts END,
		node_id = NULL, updated_at = ?2
		WHERE group_id = ?1 AND status IN ('leased', 'done') AND end_id >= ?3 RETURNING id, status`)
	// …and planned ranges already progressed past S.
	qReplanProgressed = wq(`UPDATE ranges INDEXED BY ranges_progressed SET next_id = max(start_id, ?3), updated_at = ?2
		WHERE group_id = ?1 AND status = 'planned' AND next_id > start_id AND next_id > ?3 AND end_id >= ?3`)
	// Leased ranges back to planned at their own resume point (release, takeover without a snapshot).
	qReplanLeased = wq(`UPDATE ranges SET
		status = CASE WHEN attempts >= ?3 THEN 'failed' ELSE 'planned' END,
		node_id = CASE WHEN attempts >= ?3 THEN node_id ELSE NULL END, updated_at = ?2
		WHERE group_id = ?1 AND status = 'leased' RETURNING id, status`)

	qRangeInWork = wq(`SELECT ` + rangeColumns + ` FROM ranges WHERE id = ? AND status = 'leased' AND node_id = ?`)
	qRangeNext   = wq(`SELECT id, attempts FROM ranges WHERE group_id = ? AND status = 'planned' AND priority BETWEEN ? AND ? ORDER BY start_id LIMIT 1`)
	qRangeFail   = wq(`UPDATE ranges SET status = 'failed', updated_at = ? WHERE id = ?`)
	// next(group) and its lease in one statement, for the usual case: the
	// lowest planned range in band has attempts left (?5 is maxAttempts).
	qRangeLeaseNext = wq(`UPDATE ranges SET status = 'leased', node_id = ?4, leased_at = ?6, heartbeat_at = ?6, attempts = attempts + 1,
		rule_version = ?7, updated_at = ?6
		WHERE id = (SELECT id FROM ranges WHERE group_id = ?1 AND status = 'planned' AND priority BETWEEN ?2 AND ?3 ORDER BY start_id LIMIT 1)
		AND attempts < ?5 RETURNING ` + rangeColumns)
	qRangeLease = wq(`UPDATE ranges SET status = 'leased', node_id = ?2, leased_at = ?3, heartbeat_at = ?3, attempts = attempts + 1,
		rule_version = ?4, updated_at = ?3 WHERE id = ?1 RETURNING ` + rangeColumns)
	qRangeByID     = wq(`SELECT ` + rangeColumns + ` FROM ranges WHERE id = ?`)
	qRangeProgress = wq(`UPDATE ranges SET next_id = ?2, heartbeat_at = ?3, updated_at = ?3 WHERE id = ?1 RETURNING ` + rangeColumns)
	qRangeBeat     = wq(`UPDATE ranges SET heartbeat_at = ?2 WHERE id = ?1 AND status = 'leased'`)
	// A clean stop's range gives back the attempt its lease counted.
	qRangeAttemptBack = wq(`UPDATE ranges SET attempts = max(attempts - 1, 0) WHERE id = ?1 AND status = 'leased' AND node_id = ?2`)
	qRangeRetry       = wq(`UPDATE ranges SET status = 'planned', attempts = 0, node_id = NULL, updated_at = ?2 WHERE id = ?1 RETURNING ` + rangeColumns)
)

// flapSet counts a lease end of group ?1 at ?2 as a flap, or ends the run
// of flaps when a range progressed under the lease.
const flapSet = `flaps = CASE WHEN (SELECT progressed FROM group_leases WHERE group_id = ?1) THEN 0 ELSE flaps + 1 END,
	flapped_at = CASE WHEN (SELECT progressed FROM group_leases WHERE group_id = ?1) THEN flapped_at ELSE ?2 END`

const rangeColumns = `id, group_id, start_id, end_id, next_id, status, priority, node_id, attempts, rule_version, headers, updated_at, last_error, last_error_at`

func scanRange(s scanner, more ...any) (leasehold.Range, error) {
	var r leasehold.Range
	var node, errAt sql.NullInt64
	var updated int64
	var lastErr sql.NullString
	err := s.Scan(append([]any{&r.ID, &r.GroupID, &r.Start, &r.End, &r.Next, &r.Status, &r.Priority, &node, &r.Attempts, &r.RuleVersion, &r.Headers, &updated,
		&lastErr, &errAt}, more...)...)
	r.NodeID, r.UpdatedAt, r.LastErrorAt = nullInt(node), fromMS(updated), fromNullMS(errAt)
	if lastErr.Valid {
		r.LastError = &lastErr.String
	}
	return r, err
}

// LeaseGroup is rule 1: it gives the node the free group with the most
// urgent planned work inside its band, taking it over from a quiet holder
// when that one is the most urgent. It returns nil when there is nothing to
// lease: the node is paused, at capacity, or nothing is planned in band.
func (tx *Tx) LeaseGroup(req LeaseRequest) (*leasehold.Grant, error) {
	var paused bool
	var capacity, pmin, pmax int64
	var kindsText string
	err := tx.queryRow(qNodeLeaseInfo, req.NodeID).Scan(&paused, &capacity, &pmin, &pmax, &kindsText)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, leasehold.Errorf(leasehold.KindNotFound, "node %d not found", req.NodeID)
	}
	if err != nil {
		return nil, mapError(err, "leasing")
	}
	if paused || capacity <= 0 {
		return nil, nil
	}
	cutoff := ms(tx.now.Add(-req.TTL))
	var held int64
	if err := tx.queryRow(qNodeHeldLive, req.NodeID, cutoff).Scan(&held); err != nil {
		return nil, mapError(err, "leasing")
	}
	if held >= capacity {
		return nil, nil
	}
	if req.TailOnly {
		pmax = min(pmax, leasehold.TailPriority)
	}
	if pmin > pmax {
		return nil, nil
	}
	// The band split into its lanes; an empty lane is lo > hi.
	tailLo, tailHi := pmin, min(pmax, -1)
	histLo, histHi := max(pmin, 0), pmax
	// Rule 12: only groups of the node's kinds, the best of one seek a
	// kind (a node reads one kind or a few).
	kinds := parseKinds(kindsText)
	choose := func(q *query, lo, hi int64) (candidate, error) {
		var best candidate
		if lo > hi {
			return best, nil
		}
		for _, kind := range kinds {
			var c candidate
			err := tx.queryRow(q, lo, hi, kind).Scan(&c.id, &c.urgent, &c.since, &c.priority)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return best, mapError(err, "leasing")
			}
			c.ok = true
			if !best.ok || c.before(best) {
				best = c
			}
		}
		return best, nil
	}
	for range maxDisownedPerLease {
		pick, err := tx.chooseGroup(req, cutoff, tailLo, tailHi, histLo, histHi, kindsText, choose)
		if err != nil || pick == nil {
			return nil, err
		}
		if req.OwnsFunc != nil {
			name, _, claimRev, err := tx.GroupClaim(pick.id)
			if err != nil {
				return nil, err
			}
			if !req.OwnsFunc(name, claimRev) {
				if err := tx.disown(pick.id, req.MaxAttempts); err != nil {
					return nil, err
				}
				continue
			}
		}
		return tx.takeGroup(pick.id, pick.holder, req.NodeID, req.MaxAttempts)
	}
	return nil, nil
}

// chooseGroup is rule 1's choice: the free group with the most urgent work
// in band, or a quiet holder's group when that is more urgent; nil when
// there is none.
func (tx *Tx) chooseGroup(req LeaseRequest, cutoff, tailLo, tailHi, histLo, histHi int64, kinds string, choose func(*query, int64, int64) (candidate, error)) (*candidate, error) {
	free, err := choose(qChooseFreeTail, tailLo, tailHi)
	if err != nil {
		return nil, err
	}
	if !free.ok {
		// Tail work always comes first; look at history only without it.
		if free, err = choose(qChooseFreeHist, histLo, histHi); err != nil {
			return nil, err
		}
	}
	var quiet candidate
	err = tx.queryRow(qChooseQuiet, cutoff, tailLo, tailHi, histLo, histHi, kinds).Scan(&quiet.id, &quiet.urgent, &quiet.since, &quiet.priority, &quiet.holder)
	quiet.ok = err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, mapError(err, "leasing")
	}
	// A quiet holder's group has been unheld since its lease lapsed.
	quiet.since += req.TTL.Milliseconds()
	pick := free
	switch {
	case !free.ok && !quiet.ok:
		return nil, nil
	case !free.ok:
		pick = quiet
	case quiet.ok && quiet.before(free):
		pick = quiet
	}
	return &pick, nil
}

// before reports whether c comes before d in rule 1's order: the most
// urgent, then unheld the longest, then the group's own priority.
func (c candidate) before(d candidate) bool {
	a, b := [4]int64{c.urgent, c.since, c.priority, c.id}, [4]int64{d.urgent, d.since, d.priority, d.id}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// candidate is a group lease choice found, with its sort key.
type candidate struct {
	id, urgent, since, priority int64
	holder                      int64 // the quiet holder; 0 for a free group
	ok                          bool
}

// leaseRow is a group's lease row with its snapshot.
type leaseRow struct {
	holder   sql.NullInt64
	fence    int64
	snapshot *leasehold.Snapshot
	name     string
}

func (tx *Tx) leaseRow(groupID int64) (leaseRow, error) {
	var l leaseRow
	var next, size, at, file sql.NullInt64
	var sha sql.NullString
	err := tx.queryRow(qLeaseRow, groupID).Scan(&l.holder, &l.fence, &next, &size, &sha, &at, &file, &l.name)
	if errors.Is(err, sql.ErrNoRows) {
		return l, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return l, mapError(err, "reading a lease")
	}
	if next.Valid {
		l.snapshot = &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64), File: file.Int64}
	}
	return l, nil
}

// takeGroup leases the group to node at a new fence and applies rule 2:
// whatever the group's snapshot does not cover is planned again. from is
// the quiet holder it takes over from, 0 for a free group (a free group's
// lease row has no holder: release and take keep groups.held and
// group_leases.node_id together).
func (tx *Tx) takeGroup(groupID, from, nodeID, maxAttempts int64) (*leasehold.Grant, error) {
	if from != 0 {
		// A takeover ends the quiet holder's lease: a flap unless it
		// progressed.
		if _, err := tx.exec(qGroupFlap, groupID, ms(tx.now)); err != nil {
			return nil, mapError(err, "leasing")
		}
	}
	var fence int64
	var next, size, at, file sql.NullInt64
	var sha sql.NullString
	err := tx.queryRow(qLeaseTake, groupID, nodeID, ms(tx.now)).Scan(&fence, &next, &size, &sha, &at, &file)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return nil, mapError(err, "leasing")
	}
	var snap *leasehold.Snapshot
	if next.Valid {
		snap = &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64), File: file.Int64}
	}
	g, err := scanGroup(tx.queryRow(qGroupHeld, groupID))
	if err != nil {
		return nil, mapError(err, "leasing")
	}
	var snapNext *int64
	if snap != nil {
		snapNext = &snap.Next
	}
	if err := tx.replan(groupID, snapNext, maxAttempts); err != nil {
		return nil, err
	}
	takeover := from != 0
	body := map[string]any{"fence": fence, "takeover": takeover}
	var fromName string
	if takeover {
		body["from_node"] = from
		// For the takeover's log line; a holder deleted since has no name.
		if err := tx.queryRow(qNodeName, from).Scan(&fromName); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, mapError(err, "leasing")
		}
	}
	if err := tx.event(EventLeaseGranted, groupID, 0, nodeID, body); err != nil {
		return nil, err
	}
	return &leasehold.Grant{Group: g, Fence: fence, Snapshot: snap, Takeover: takeover, TakenFrom: fromName}, nil
}

// replan is rule 2. With a snapshot at next = S, every range ending at or
// after S that is leased or done, or whose resume point is past S, is
// planned again from max(start, S); without one, leased ranges go back to
// planned at their own resume point. A leased range that has used up its
// attempts is failed instead. Failed ranges are left to the operator.
func (tx *Tx) replan(groupID int64, snapshotNext *int64, maxAttempts int64) error {
	now := ms(tx.now)
	var changed int64
	if snapshotNext != nil {
		n, err := tx.replanReturning(qReplanCovered, groupID, now, *snapshotNext, maxAttempts)
		if err != nil {
			return err
		}
		res, err := tx.exec(qReplanProgressed, groupID, now, *snapshotNext)
		if err != nil {
			return mapError(err, "replanning")
		}
		m, _ := res.RowsAffected()
		changed += n + m
	}
	// Leased ranges the snapshot covers whole (or all of them, without a
	// snapshot) resume where they were.
	n, err := tx.replanReturning(qReplanLeased, groupID, now, maxAttempts)
	if err != nil {
		return err
	}
	changed += n
	if changed == 0 {
		// No range changed, so neither did the group's urgency.
		return nil
	}
	body := map[string]any{"ranges": changed}
	if snapshotNext != nil {
		body["from"] = *snapshotNext
	}
	if err := tx.event(EventRangesReplan, groupID, 0, 0, body); err != nil {
		return err
	}
	_, err = tx.exec(qGroupUrgent, groupID)
	return mapError(err, "replanning")
}

func (tx *Tx) replanReturning(q *query, groupID int64, args ...any) (int64, error) {
	rows, err := tx.query(q, append([]any{groupID}, args...)...)
	if err != nil {
		return 0, mapError(err, "replanning")
	}
	var n int64
	var failed []int64
	for rows.Next() {
		var id int64
		var status leasehold.RangeStatus
		if err := rows.Scan(&id, &status); err != nil {
			rows.Close()
			return 0, mapError(err, "replanning")
		}
		if status == leasehold.StatusFailed {
			failed = append(failed, id)
		}
		n++
	}
	if err := rows.Close(); err != nil {
		return 0, mapError(err, "replanning")
	}
	for _, id := range failed {
		if err := tx.failedAtLimit(groupID, id); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// failedAtLimit records a range this write failed because it had used up
// its attempts (rule 10): the event of the finding, and the range as it
// now is, kept for Options.AttemptLimitFunc once the write commits, so the
// operator hears of it whichever write it was.
func (tx *Tx) failedAtLimit(groupID, rangeID int64) error {
	r, err := scanRange(tx.queryRow(qRangeByID, rangeID))
	if err != nil {
		return mapError(err, "failing a range")
	}
	if err := tx.event(EventRangeFailed, groupID, rangeID, 0, map[string]any{"reason": "max attempts", "attempts": r.Attempts}); err != nil {
		return err
	}
	if tx.cur != nil {
		tx.cur.atLimit = append(tx.cur.atLimit, r)
	}
	return nil
}

// holder checks rule 6 for a holder call and counts it as a heartbeat. It
// returns the range in work, if any. A missing group is not found; anyone
// but the holder at that fence gets lease lost.
func (tx *Tx) holder(groupID, nodeID, fence int64) (sql.NullInt64, error) {
	var inWork sql.NullInt64
	err := tx.queryRow(qLeaseBeat, groupID, nodeID, fence, ms(tx.now)).Scan(&inWork)
	if err == nil {
		return inWork, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return inWork, mapError(err, "checking the lease")
	}
	var holder sql.NullInt64
	var current int64
	err = tx.queryRow(qLeaseHolder, groupID).Scan(&holder, &current)
	if errors.Is(err, sql.ErrNoRows) {
		return inWork, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return inWork, mapError(err, "checking the lease")
	}
	return inWork, leaseLost(groupID, holder, current, fence)
}

// leaseLost is rule 6's refusal of a call at fence on a group held by
// holder (none when not valid) at current: it says who holds it.
func leaseLost(groupID int64, holder sql.NullInt64, current, fence int64) error {
	if !holder.Valid {
		return leasehold.Errorf(leasehold.KindLeaseLost, "group %d is not held (fence %d, you named %d)", groupID, current, fence)
	}
	return leasehold.Errorf(leasehold.KindLeaseLost, "group %d is held by node %d at fence %d", groupID, holder.Int64, current)
}

// CheckHolder asks rule 6 of a call about to start outside the writer (a
// snapshot upload, before its body is read): nil when nodeID holds the
// group at fence now. The write that follows asks again. Errors: not
// found, lease lost (as every holder call words it).
func (db *DB) CheckHolder(ctx context.Context, groupID, nodeID, fence int64) error {
	var holder sql.NullInt64
	var current int64
	err := db.queryRow(ctx, `SELECT node_id, fence FROM group_leases WHERE group_id = ?`, groupID).Scan(&holder, &current)
	if errors.Is(err, sql.ErrNoRows) {
		return leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return mapError(err, "checking the lease")
	}
	if holder.Valid && holder.Int64 == nodeID && current == fence {
		return nil
	}
	return leaseLost(groupID, holder, current, fence)
}

// NextParams is what leasing a group's next range takes (NextRange,
// FinishNext): the holder asking, the band of range priorities its node
// works in, the version of the rules the range is leased under, and the
// attempts a range may use before it is failed.
type NextParams struct {
	Holder           leasehold.GroupHolder
	BandMin, BandMax int64
	RuleVersion      int64
	MaxAttempts      int64
}

// NextRange is rule 3: the holder's range in work, or else the group's
// lowest planned range by start inside [p.BandMin, p.BandMax], leased to
// it. A range that has used up p.MaxAttempts is failed and passed over.
// It returns nil when the group is caught up.
func (tx *Tx) NextRange(p NextParams) (*leasehold.Range, error) {
	inWork, err := tx.holder(p.Holder.GroupID, p.Holder.NodeID, p.Holder.Fence)
	if err != nil {
		return nil, err
	}
	return tx.nextRange(p, inWork)
}

// nextRange is NextRange once rule 6 has passed: inWork is the lease's
// range in work as the holder check read it.
func (tx *Tx) nextRange(p NextParams, inWork sql.NullInt64) (*leasehold.Range, error) {
	groupID, nodeID := p.Holder.GroupID, p.Holder.NodeID
	bandMin, bandMax, ruleVersion, maxAttempts := p.BandMin, p.BandMax, p.RuleVersion, p.MaxAttempts
	now := ms(tx.now)
	if inWork.Valid {
		r, err := scanRange(tx.queryRow(qRangeInWork, inWork.Int64, nodeID))
		if err == nil {
			if _, err := tx.exec(qRangeBeat, r.ID, now); err != nil {
				return nil, mapError(err, "heartbeating a range")
			}
			return &r, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, mapError(err, "reading the range in work")
		}
	}
	r, err := scanRange(tx.queryRow(qRangeLeaseNext, groupID, bandMin, bandMax, nodeID, maxAttempts, now, ruleVersion))
	switch {
	case err == nil:
		return tx.rangeLeased(groupID, nodeID, ruleVersion, r)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, mapError(err, "leasing a range")
	}
	// Caught up, or the next range has used up its attempts.
	for {
		var id, attempts int64
		err := tx.queryRow(qRangeNext, groupID, bandMin, bandMax).Scan(&id, &attempts)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := tx.exec(qLeaseSetWork, groupID, nil); err != nil {
				return nil, mapError(err, "leasing a range")
			}
			return nil, nil
		}
		if err != nil {
			return nil, mapError(err, "leasing a range")
		}
		if attempts >= maxAttempts {
			if _, err := tx.exec(qRangeFail, now, id); err != nil {
				return nil, mapError(err, "failing a range")
			}
			if err := tx.failedAtLimit(groupID, id); err != nil {
				return nil, err
			}
			if _, err := tx.exec(qGroupUrgent, groupID); err != nil {
				return nil, mapError(err, "failing a range")
			}
			continue
		}
		r, err := scanRange(tx.queryRow(qRangeLease, id, nodeID, now, ruleVersion))
		if err != nil {
			return nil, mapError(err, "leasing a range")
		}
		return tx.rangeLeased(groupID, nodeID, ruleVersion, r)
	}
}

// rangeLeased records r, just leased, as the holder's range in work.
func (tx *Tx) rangeLeased(groupID, nodeID, ruleVersion int64, r leasehold.Range) (*leasehold.Range, error) {
	if _, err := tx.exec(qLeaseSetWork, groupID, r.ID); err != nil {
		return nil, mapError(err, "leasing a range")
	}
	if err := tx.event(EventRangeLeased, groupID, r.ID, nodeID, map[string]any{"attempts": r.Attempts, "rule_version": ruleVersion}); err != nil {
		return nil, err
	}
	return &r, nil
}

// NodeBand reads the band of range priorities a node works in. A node's
// band never changes after it registers, so it is remembered like its
// authentication: until a node deletion raises the generation.
func (tx *Tx) NodeBand(nodeID int64) (bandMin, bandMax int64, err error) {
	gen := tx.db.nodeGen.Load()
	if v, ok := tx.db.bands.Load(nodeID); ok {
		if e := v.(bandEntry); e.gen == gen {
			return e.min, e.max, nil
		}
	}
	var paused bool
	var capacity int64
	var kinds string
	err = tx.queryRow(qNodeLeaseInfo, nodeID).Scan(&paused, &capacity, &bandMin, &bandMax, &kinds)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, leasehold.Errorf(leasehold.KindNotFound, "node %d not found", nodeID)
	}
	if err == nil {
		tx.db.bands.Store(nodeID, bandEntry{min: bandMin, max: bandMax, gen: gen})
	}
	return bandMin, bandMax, mapError(err, "reading a node")
}

type bandEntry struct{ min, max, gen int64 }

// heldRange loads a range for a holder call on it: the range must exist
// (not found), its group must be held by node at fence (lease lost).
func (tx *Tx) heldRange(rangeID, nodeID, fence int64) (leasehold.Range, error) {
	r, err := scanRange(tx.queryRow(qRangeByID, rangeID))
	if errors.Is(err, sql.ErrNoRows) {
		return r, leasehold.Errorf(leasehold.KindNotFound, "range %d not found", rangeID)
	}
	if err != nil {
		return r, mapError(err, "reading a range")
	}
	if _, err := tx.holder(r.GroupID, nodeID, fence); err != nil {
		return r, err
	}
	return r, nil
}

func leasedTo(r leasehold.Range, nodeID int64) bool {
	return r.NodeID != nil && *r.NodeID == nodeID
}

// Progress is rule 4: the range's resume point moves forward to next. A
// next behind the resume point or past end+1 is unprocessable; a range not
// in this holder's work is a conflict.
func (tx *Tx) Progress(h leasehold.RangeHolder, next int64) (leasehold.Range, error) {
	rangeID, nodeID := h.RangeID, h.NodeID
	r, err := tx.heldRange(rangeID, nodeID, h.Fence)
	if err != nil {
		return r, err
	}
	if r.Status != leasehold.StatusLeased || !leasedTo(r, nodeID) {
		return r, leasehold.Errorf(leasehold.KindConflict, "range %d is %s, not in your work", rangeID, r.Status)
	}
	if next < r.Next {
		return r, leasehold.Errorf(leasehold.KindUnprocessable, "next %d goes backwards: range %d resumes at %d", next, rangeID, r.Next)
	}
	if next > r.End+1 {
		return r, leasehold.Errorf(leasehold.KindUnprocessable, "next %d is past the end of range %d (%d..%d)", next, rangeID, r.Start, r.End)
	}
	if next == r.Next {
		return r, nil
	}
	r, err = scanRange(tx.queryRow(qRangeProgress, rangeID, next, ms(tx.now)))
	if err != nil {
		return r, mapError(err, "recording progress")
	}
	// Once a lease: a primary-key seek that writes nothing after.
	if _, err := tx.exec(qLeaseProgressed, r.GroupID); err != nil {
		return r, mapError(err, "recording progress")
	}
	return r, tx.event(EventRangeProgress, r.GroupID, rangeID, nodeID, map[string]any{"next": next})
}

// Heartbeat is rule 5: the holder keeps its lease and its range alive.
func (tx *Tx) Heartbeat(h leasehold.GroupHolder) error {
	inWork, err := tx.holder(h.GroupID, h.NodeID, h.Fence)
	if err != nil {
		return err
	}
	if inWork.Valid {
		if _, err := tx.exec(qRangeBeat, inWork.Int64, ms(tx.now)); err != nil {
			return mapError(err, "heartbeating a range")
		}
	}
	return nil
}

// Release is rule 5: the holder gives the group up; its leased range goes
// back to planned at its resume point.
func (tx *Tx) Release(h leasehold.GroupHolder, maxAttempts int64) error {
	return tx.release(h, maxAttempts, false)
}

// ReleaseStopped is Release by a holder that stops cleanly (SIGINT or
// SIGTERM) with its progress and window saved: its range in work gets
// back the attempt its lease counted, so stopping and starting a worker
// again and again never fails a range (rule 10 counts attempts a range
// could not be indexed in; a stop is not one). A range at its limit goes
// back to planned, not failed. The release still counts as a flap when
// nothing progressed under the lease, so a holder that only ever stops
// is still a finding.
func (tx *Tx) ReleaseStopped(h leasehold.GroupHolder, maxAttempts int64) error {
	return tx.release(h, maxAttempts, true)
}

func (tx *Tx) release(h leasehold.GroupHolder, maxAttempts int64, stopped bool) error {
	groupID, nodeID, fence := h.GroupID, h.NodeID, h.Fence
	if stopped {
		inWork, err := tx.holder(groupID, nodeID, fence)
		if err != nil {
			return err
		}
		if inWork.Valid {
			if _, err := tx.exec(qRangeAttemptBack, inWork.Int64, nodeID); err != nil {
				return mapError(err, "releasing")
			}
		}
	}
	res, err := tx.exec(qLeaseRelease, groupID, nodeID, fence)
	if err != nil {
		return mapError(err, "releasing")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := tx.holder(groupID, nodeID, fence); err != nil {
			return err
		}
		return leasehold.Errorf(leasehold.KindInternal, "group %d: release changed no lease", groupID)
	}
	if err := tx.freeGroup(groupID, maxAttempts); err != nil {
		return err
	}
	body := map[string]any{"fence": fence}
	if stopped {
		body["stopped"] = true
	}
	return tx.event(EventLeaseReleased, groupID, 0, nodeID, body)
}

// releaseGroup releases a group whoever holds it.
func (tx *Tx) releaseGroup(groupID, maxAttempts int64) error {
	if _, err := tx.exec(qLeaseDrop, groupID); err != nil {
		return mapError(err, "releasing")
	}
	return tx.freeGroup(groupID, maxAttempts)
}

// freeGroup is the rest of a release once the lease row has no holder:
// leased ranges back to planned, the group free for lease choice.
func (tx *Tx) freeGroup(groupID, maxAttempts int64) error {
	n, err := tx.replanReturning(qReplanLeased, groupID, ms(tx.now), maxAttempts)
	if err != nil {
		return err
	}
	q := qGroupFree
	if n > 0 {
		// Only a range that changed can change the group's urgency.
		q = qGroupFreeUrgent
	}
	_, err = tx.exec(q, groupID, ms(tx.now))
	return mapError(err, "releasing")
}

// Retry plans a failed range again with its attempts reset. A range that
// is not failed is a conflict.
func (tx *Tx) Retry(rangeID int64) (leasehold.Range, error) {
	r, err := scanRange(tx.queryRow(qRangeByID, rangeID))
	if errors.Is(err, sql.ErrNoRows) {
		return r, leasehold.Errorf(leasehold.KindNotFound, "range %d not found", rangeID)
	}
	if err != nil {
		return r, mapError(err, "reading a range")
	}
	if r.Status != leasehold.StatusFailed {
		return r, leasehold.Errorf(leasehold.KindConflict, "range %d is %s, not failed", rangeID, r.Status)
	}
	if r, err = scanRange(tx.queryRow(qRangeRetry, rangeID, ms(tx.now))); err != nil {
		return r, mapError(err, "retrying a range")
	}
	if _, err := tx.exec(qGroupUrgent, r.GroupID); err != nil {
		return r, mapError(err, "retrying a range")
	}
	return r, tx.event(EventRangeRetried, r.GroupID, rangeID, 0, nil)
}

// Lease reads a group's lease; nil when nobody holds it. The snapshot is
// reported on the lease while the group is held.
func (db *DB) Lease(ctx context.Context, groupID int64) (*leasehold.Lease, error) {
	var node, leased, beat, rng, next, size, at, file sql.NullInt64
	var sha sql.NullString
	var name string
	l := &leasehold.Lease{}
	err := db.queryRow(ctx, `SELECT l.node_id, coalesce(n.name, ''), l.fence, l.leased_at, l.heartbeat_at, l.range_id,
		l.snapshot_next, l.snapshot_size, l.snapshot_sha256, l.snapshot_at, l.snapshot_file, l.ranges_done, l.headers
		FROM group_leases l LEFT JOIN nodes n ON n.id = l.node_id WHERE l.group_id = ?`, groupID).
		Scan(&node, &name, &l.Fence, &leased, &beat, &rng, &next, &size, &sha, &at, &file, &l.RangesDone, &l.Headers)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return nil, mapError(err, "reading a lease")
	}
	if !node.Valid {
		return nil, nil
	}
	l.NodeID, l.Node = node.Int64, name
	l.LeasedAt, l.HeartbeatAt = fromMS(leased.Int64), fromMS(beat.Int64)
	l.RangeID = nullInt(rng)
	if next.Valid {
		l.Snapshot = &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64), File: file.Int64}
	}
	return l, nil
}

// HolderOf reports who holds a group and at which fence (0 when free).
func (db *DB) HolderOf(ctx context.Context, groupID int64) (nodeID, fence int64, err error) {
	var node sql.NullInt64
	err = db.queryRow(ctx, `SELECT node_id, fence FROM group_leases WHERE group_id = ?`, groupID).Scan(&node, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	return node.Int64, fence, mapError(err, "reading a lease")
}

// Ranges lists up to limit ranges of a group with ids above after, by id,
// optionally of one status.
func (db *DB) Ranges(ctx context.Context, groupID int64, status leasehold.RangeStatus, after int64, limit int) ([]leasehold.Range, error) {
	rows, err := db.query(ctx, `SELECT `+rangeColumns+` FROM ranges WHERE group_id = ?1 AND id > ?2 AND (?3 = '' OR status = ?3) ORDER BY id LIMIT ?4`,
		groupID, after, status, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []leasehold.Range{}
	for rows.Next() {
		r, err := scanRange(rows)
		if err != nil {
			return nil, mapError(err, "listing ranges")
		}
		out = append(out, r)
	}
	return out, mapError(rows.Err(), "listing ranges")
}

// Range reads one range.
func (db *DB) Range(ctx context.Context, id int64) (leasehold.Range, error) {
	r, err := scanRange(db.queryRow(ctx, `SELECT `+rangeColumns+` FROM ranges WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, leasehold.Errorf(leasehold.KindNotFound, "range %d not found", id)
	}
	return r, mapError(err, "reading a range")
}
