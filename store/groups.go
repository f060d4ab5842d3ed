package store

import (
	"context"
	"database/sql"
	"errors"
	"math"

	"github.com/leasehold/leasehold"
)

const groupColumns = `g.id, g.name, g.priority, g.active, g.range_size, g.start_id, g.tail_end, g.history_floor, g.created_at,
	g.quarantine_error, g.quarantine_node, g.quarantine_at, g.marks_low, g.marks_high, g.marks_at,
	g.kind, g.source_error, g.source_error_node, g.source_error_at`

// groupReturning is groupColumns for a RETURNING clause, which takes no
// table alias.
const groupReturning = `id, name, priority, active, range_size, start_id, tail_end, history_floor, created_at,
	quarantine_error, quarantine_node, quarantine_at, marks_low, marks_high, marks_at,
	kind, source_error, source_error_node, source_error_at`

// scanGroup scans groupColumns, then more.
func scanGroup(s scanner, more ...any) (leasehold.Group, error) {
	var g leasehold.Group
	var created int64
	var qErr, qNode, sErr, sNode sql.NullString
	var qAt, low, high, marksAt, sAt sql.NullInt64
	err := s.Scan(append([]any{&g.ID, &g.Name, &g.Priority, &g.Active, &g.RangeSize, &g.Start, &g.TailEnd, &g.HistoryFloor, &created,
		&qErr, &qNode, &qAt, &low, &high, &marksAt, &g.Kind, &sErr, &sNode, &sAt}, more...)...)
	if sAt.Valid {
		g.SourceError = &leasehold.SourceError{Error: sErr.String, Node: sNode.String, At: fromMS(sAt.Int64)}
	}
	g.CreatedAt = fromMS(created)
	if marksAt.Valid {
		g.Low, g.High, g.MarksAt = &low.Int64, &high.Int64, fromNullMS(marksAt)
	}
	if qAt.Valid {
		g.Quarantine = &leasehold.Quarantine{Error: qErr.String, Node: qNode.String, At: fromMS(qAt.Int64)}
	}
	return g, err
}

// GroupSpec is what an admin sets on a group, the API's request type
// itself: one type from the wire to the catalog.
type GroupSpec = leasehold.GroupSpec

// Defaults for a new group.
const (
	DefaultRangeSize = 100000
	DefaultStart     = 1
)

var (
	qGroupByName = wq(`SELECT ` + groupColumns + ` FROM groups g WHERE g.name = ?`)
	qGroupByID   = wq(`SELECT ` + groupColumns + ` FROM groups g WHERE g.id = ?`)
	qGroupInsert = wq(`INSERT INTO groups (name, priority, active, range_size, start_id, tail_end, history_floor, free_since, created_at, updated_at,
		start_from_low, kind) VALUES (?1, ?2, ?3, ?4, ?5, ?5 - 1, ?5, ?6, ?6, ?6, ?7, ?8)`)
	qLeaseInsert = wq(`INSERT INTO group_leases (group_id) VALUES (?)`)
	qGroupUpdate = wq(`UPDATE groups SET priority = ?, active = ?, range_size = ?, updated_at = ?, kind = ? WHERE id = ?`)
	qGroupHeldBy = wq(`SELECT held FROM groups WHERE id = ?`)
	qRangeInsert = wq(`INSERT INTO ranges (group_id, start_id, end_id, next_id, priority, updated_at) VALUES (?1, ?2, ?3, ?2, ?4, ?5)`)
	qRangeBefore = wq(`SELECT end_id FROM ranges WHERE group_id = ?1 AND start_id < ?2 ORDER BY start_id DESC LIMIT 1`)
	qRangesFrom  = wq(`SELECT start_id, end_id FROM ranges WHERE group_id = ?1 AND start_id BETWEEN ?2 AND ?3 ORDER BY start_id`)
	qTailSet     = wq(`UPDATE groups SET tail_end = ?2, history_floor = min(history_floor, ?3), updated_at = ?4,
		urgent_tail = CASE WHEN urgent_tail IS NULL OR urgent_tail > ?5 THEN ?5 ELSE urgent_tail END WHERE id = ?1`)
	qFloorSet = wq(`UPDATE groups SET history_floor = ?2, updated_at = ?3,
		urgent_hist = CASE WHEN urgent_hist IS NULL OR urgent_hist > ?4 THEN ?4 ELSE urgent_hist END WHERE id = ?1`)
)

// PutGroup creates the named group or updates it. start is taken only on
// creation; a different start on an existing group is a conflict. It
// reports whether the group was created.
func (tx *Tx) PutGroup(name string, s GroupSpec) (leasehold.Group, bool, error) {
	if s.Kind != nil && !leasehold.ValidSourceKind(*s.Kind) {
		return leasehold.Group{}, false, leasehold.Errorf(leasehold.KindInvalid, "kind %q is not valid: 1-32 bytes of a-z, 0-9 and -", *s.Kind)
	}
	g, err := tx.GroupByName(name)
	switch {
	case errors.Is(err, leasehold.ErrNotFound):
		pri, active, size, start := int64(0), true, int64(DefaultRangeSize), int64(DefaultStart)
		if s.Priority != nil {
			pri = *s.Priority
		}
		if s.Active != nil {
			active = *s.Active
		}
		if s.RangeSize != nil {
			size = *s.RangeSize
		}
		if s.Start != nil {
			start = *s.Start
		}
		kind := leasehold.DefaultSourceKind
		if s.Kind != nil {
			kind = *s.Kind
		}
		// Without a start given, the source's low mark sets it (rule 11).
		res, err := tx.exec(qGroupInsert, name, pri, active, size, start, ms(tx.now), s.Start == nil, kind)
		if err != nil {
			return g, false, mapError(err, "creating a group")
		}
		id, _ := res.LastInsertId()
		if _, err := tx.exec(qLeaseInsert, id); err != nil {
			return g, false, mapError(err, "creating a group")
		}
		if err := tx.event(EventGroupCreated, id, 0, 0, map[string]any{"name": name, "priority": pri, "active": active, "range_size": size, "start": start, "kind": kind}); err != nil {
			return g, false, err
		}
		g, err = tx.Group(id)
		return g, true, err
	case err != nil:
		return g, false, err
	}
	if s.Start != nil && *s.Start != g.Start {
		return g, false, leasehold.Errorf(leasehold.KindConflict, "group %s starts at %d; start is set only when a group is created", name, g.Start)
	}
	if s.Priority != nil {
		g.Priority = *s.Priority
	}
	if s.Active != nil {
		g.Active = *s.Active
	}
	if s.RangeSize != nil {
		g.RangeSize = *s.RangeSize
	}
	if s.Kind != nil && *s.Kind != g.Kind {
		// A holder leased the group as one kind: it must not go on
		// indexing it as another.
		var held bool
		if err := tx.queryRow(qGroupHeldBy, g.ID).Scan(&held); err != nil {
			return g, false, mapError(err, "updating a group")
		}
		if held {
			return g, false, leasehold.Errorf(leasehold.KindConflict,
				"group %s is held by a worker of kind %s: its kind changes only while nobody holds it (pause the node or wait for its release)", name, g.Kind)
		}
		g.Kind = *s.Kind
	}
	if _, err := tx.exec(qGroupUpdate, g.Priority, g.Active, g.RangeSize, ms(tx.now), g.Kind, g.ID); err != nil {
		return g, false, mapError(err, "updating a group")
	}
	err = tx.event(EventGroupUpdated, g.ID, 0, 0, map[string]any{"priority": g.Priority, "active": g.Active, "range_size": g.RangeSize, "kind": g.Kind})
	return g, false, err
}

// GroupByName reads a group inside the transaction.
func (tx *Tx) GroupByName(name string) (leasehold.Group, error) {
	g, err := scanGroup(tx.queryRow(qGroupByName, name))
	if errors.Is(err, sql.ErrNoRows) {
		return g, leasehold.Errorf(leasehold.KindNotFound, "group %s not found", name)
	}
	return g, mapError(err, "reading a group")
}

// Group reads a group by id inside the transaction.
func (tx *Tx) Group(id int64) (leasehold.Group, error) {
	g, err := scanGroup(tx.queryRow(qGroupByID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return g, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", id)
	}
	return g, mapError(err, "reading a group")
}

// MaxPlanRanges bounds the ranges one planning call may create, so a typo
// in high or low cannot stall the writer for minutes.
const MaxPlanRanges = 100000

// PlanTail plans ranges of the group's range size from the tail's end up
// to high, at TailPriority. It is idempotent: a high at or below the tail's
// end plans nothing. More than MaxPlanRanges is unprocessable.
func (tx *Tx) PlanTail(groupID, high int64) (int64, error) {
	g, err := tx.Group(groupID)
	if err != nil {
		return 0, err
	}
	if high <= g.TailEnd {
		return 0, nil
	}
	first := g.TailEnd + 1
	if rangeCount(first, high, g.RangeSize) > MaxPlanRanges {
		return 0, leasehold.Errorf(leasehold.KindUnprocessable,
			"planning %d..%d in ranges of %d would make more than %d ranges, the most a call may plan", first, high, g.RangeSize, MaxPlanRanges)
	}
	// Ranges may stand past the tail already: a peer's plan this node's
	// copy had taken, whose tail a later state under the same claim set
	// lower (an older message folded again keeps the ranges it has
	// outgrown). Only the ids between them are planned, in ranges from the
	// start of each gap, so a late plan replayed over them neither collides
	// with them nor leaves a hole.
	gaps, top, err := tx.tailGaps(g.ID, first, high)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, gap := range gaps {
		// The loop ends on e == gap.end, never on an id past it: near the
		// top of int64, s += size would wrap round.
		for s := gap.start; ; s += g.RangeSize {
			e := s + int64(min(uint64(g.RangeSize-1), uint64(gap.end-s)))
			if _, err := tx.exec(qRangeInsert, g.ID, s, e, leasehold.TailPriority, ms(tx.now)); err != nil {
				return 0, mapError(err, "planning the tail")
			}
			n++
			if e == gap.end {
				break
			}
		}
	}
	high = max(high, top)
	if _, err := tx.exec(qTailSet, g.ID, high, first, ms(tx.now), leasehold.TailPriority); err != nil {
		return 0, mapError(err, "planning the tail")
	}
	return n, tx.event(EventTailPlanned, g.ID, 0, 0, map[string]any{"from": first, "high": high, "planned": n})
}

// span is the ids lo..hi of a gap to plan.
type span struct{ start, end int64 }

// tailGaps returns the stretches of first..high no range of the group
// covers, in order, and the end of the last range that reaches into
// first..high (first − 1 when none does): one seek for the range before
// first and a walk of those starting in first..high.
func (tx *Tx) tailGaps(groupID, first, high int64) ([]span, int64, error) {
	cursor, top := first, first-1
	var prevEnd int64
	switch err := tx.queryRow(qRangeBefore, groupID, first).Scan(&prevEnd); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, 0, mapError(err, "planning the tail")
	case prevEnd >= first:
		cursor, top = after(prevEnd), prevEnd
	}
	rows, err := tx.query(qRangesFrom, groupID, first, high)
	if err != nil {
		return nil, 0, mapError(err, "planning the tail")
	}
	defer rows.Close()
	var gaps []span
	for rows.Next() {
		var s, e int64
		if err := rows.Scan(&s, &e); err != nil {
			return nil, 0, mapError(err, "planning the tail")
		}
		if s > cursor {
			gaps = append(gaps, span{cursor, s - 1})
		}
		cursor, top = max(cursor, after(e)), max(top, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, mapError(err, "planning the tail")
	}
	if cursor <= high && top < high {
		gaps = append(gaps, span{cursor, high})
	}
	return gaps, top, nil
}

// after is the id after id, or id itself at the top of int64 (a range
// ending there leaves nothing after it to plan).
func after(id int64) int64 {
	if id == math.MaxInt64 {
		return id
	}
	return id + 1
}

// rangeCount is how many ranges of size cover lo..hi (lo <= hi), counted
// without overflow for any int64 bounds; more than MaxPlanRanges+1 is
// reported as MaxPlanRanges+1.
func rangeCount(lo, hi, size int64) int64 {
	n := uint64(hi-lo)/uint64(size) + 1 // hi-lo fits in uint64 even when it overflows int64
	if n > MaxPlanRanges {
		return MaxPlanRanges + 1
	}
	return int64(n)
}

// PlanHistory plans ranges backwards from below the lowest planned id down
// to low; the range nearest the group's start gets priority 0 and each one
// further down one more. Idempotent like PlanTail.
func (tx *Tx) PlanHistory(groupID, low int64) (int64, error) {
	g, err := tx.Group(groupID)
	if err != nil {
		return 0, err
	}
	top := g.HistoryFloor - 1
	if low > top {
		return 0, nil
	}
	if rangeCount(low, top, g.RangeSize) > MaxPlanRanges {
		return 0, leasehold.Errorf(leasehold.KindUnprocessable,
			"planning %d..%d in ranges of %d would make more than %d ranges, the most a call may plan", low, top, g.RangeSize, MaxPlanRanges)
	}
	var n int64
	floor := g.HistoryFloor
	minPri := int64(-1)
	for e := top; ; e -= g.RangeSize {
		s := e - int64(min(uint64(g.RangeSize-1), uint64(e-low)))
		pri := max((g.Start-1-e)/g.RangeSize, 0)
		if minPri < 0 || pri < minPri {
			minPri = pri
		}
		if _, err := tx.exec(qRangeInsert, g.ID, s, e, pri, ms(tx.now)); err != nil {
			return 0, mapError(err, "planning history")
		}
		floor = s
		n++
		if s == low {
			break
		}
	}
	if _, err := tx.exec(qFloorSet, g.ID, floor, ms(tx.now), minPri); err != nil {
		return 0, mapError(err, "planning history")
	}
	return n, tx.event(EventHistoryPlanned, g.ID, 0, 0, map[string]any{"from": top, "low": low, "planned": n})
}

// GroupByName reads a group.
func (db *DB) GroupByName(ctx context.Context, name string) (leasehold.Group, error) {
	g, err := scanGroup(db.queryRow(ctx, `SELECT `+groupColumns+` FROM groups g WHERE g.name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return g, leasehold.Errorf(leasehold.KindNotFound, "group %s not found", name)
	}
	return g, mapError(err, "reading a group")
}

// Groups lists up to limit groups with ids above after, by id.
func (db *DB) Groups(ctx context.Context, after int64, limit int) ([]leasehold.Group, error) {
	rows, err := db.query(ctx, `SELECT `+groupColumns+` FROM groups g WHERE g.id > ? ORDER BY g.id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []leasehold.Group{}
	for rows.Next() {
		g, err := scanGroup(rows)
		if err != nil {
			return nil, mapError(err, "listing groups")
		}
		out = append(out, g)
	}
	return out, mapError(rows.Err(), "listing groups")
}

// GroupDetail reads a group with its lease and its range counts by status.
func (db *DB) GroupDetail(ctx context.Context, name string) (leasehold.GroupDetail, error) {
	var d leasehold.GroupDetail
	g, err := db.GroupByName(ctx, name)
	if err != nil {
		return d, err
	}
	d.Group = g
	if d.Lease, err = db.Lease(ctx, g.ID); err != nil {
		return d, err
	}
	if d.Snapshot, err = db.Snapshot(ctx, g.ID); err != nil {
		return d, err
	}
	d.Ranges = map[leasehold.RangeStatus]int64{leasehold.StatusPlanned: 0, leasehold.StatusLeased: 0, leasehold.StatusDone: 0, leasehold.StatusFailed: 0}
	// One statement, so the counts are of one moment.
	rows, err := db.query(ctx, `SELECT status, count(*) FROM ranges WHERE group_id = ? GROUP BY status`, g.ID)
	if err != nil {
		return d, err
	}
	defer rows.Close()
	for rows.Next() {
		var st leasehold.RangeStatus
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return d, mapError(err, "counting ranges")
		}
		d.Ranges[st] = n
	}
	if err := rows.Err(); err != nil {
		return d, mapError(err, "counting ranges")
	}
	d.Peer, err = db.peerState(ctx, g.ID)
	return d, err
}

// peerState is the group's state at its owner when that is a peer.
func (db *DB) peerState(ctx context.Context, groupID int64) (*leasehold.PeerState, error) {
	var p leasehold.PeerState
	var beat, next, size, at sql.NullInt64
	var sha sql.NullString
	err := db.queryRow(ctx, `SELECT origin, holder, fence, heartbeat_at, snapshot_next, snapshot_size, snapshot_sha256, snapshot_at, ranges_done
		FROM peer_groups WHERE group_id = ?`, groupID).Scan(&p.Owner, &p.Holder, &p.Fence, &beat, &next, &size, &sha, &at, &p.RangesDone)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mapError(err, "reading a peer's group")
	}
	if p.Holder != "" {
		p.HeartbeatAt = fromNullMS(beat)
	}
	if next.Valid {
		p.Snapshot = &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64)}
	}
	return &p, nil
}

var (
	qGroupDeleteRanges = wq(`DELETE FROM ranges WHERE group_id = ?`)
	qGroupDeleteLease  = wq(`DELETE FROM group_leases WHERE group_id = ?`)
	qGroupDeletePeer   = wq(`DELETE FROM peer_groups WHERE group_id = ?`)
	qGroupDelete       = wq(`DELETE FROM groups WHERE id = ?`)
)

// DeleteGroup deletes the named group with its ranges, its lease row and
// the window snapshot it records, all in tx; it returns the group and
// that snapshot (nil for none), whose file the caller removes once tx is
// committed. The tallies follow through their triggers. Errors: not
// found, conflict (held: its holder must release it first).
func (tx *Tx) DeleteGroup(name string) (leasehold.Group, *leasehold.Snapshot, error) {
	g, l, err := tx.unheldGroup(name, "pause or delete the node, or wait for it to release the group, then delete it")
	if err != nil {
		return g, nil, err
	}
	// Children first, explicitly, rather than trusting ON DELETE CASCADE
	// to reach every table a group has rows in.
	for _, q := range []*query{qGroupDeleteRanges, qGroupDeleteLease, qGroupDeletePeer, qGroupDelete} {
		if _, err := tx.exec(q, g.ID); err != nil {
			return g, nil, mapError(err, "deleting a group")
		}
	}
	return g, l.snapshot, nil
}
