package store

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"time"

	"github.com/leasehold/leasehold"
)

// Rule 11, sources plan themselves: a worker reports a group's water marks
// as its source gives them, and the tail is planned up to the high mark.

// EventGroupMarks is a group's water marks changed (rule 11).
const EventGroupMarks = "group_marks"

// EventGroupStarted is a group created without a start given its start
// by the first water marks reported: their low mark.
const EventGroupStarted = "group_started"

var (
	// A report with marks also clears what the source said before (rule 13).
	qMarksSet = wq(`UPDATE groups SET marks_low = ?2, marks_high = ?3, marks_at = ?4,
		source_error = NULL, source_error_node = NULL, source_error_at = NULL, source_errors = 0 WHERE id = ?1`)
	qSourceErrorSet = wq(`UPDATE groups SET source_error = ?2, source_error_node = ?3, source_error_at = ?4, source_errors = source_errors + 1
		WHERE id = ?1 RETURNING source_errors`)
	// A group created without a start and not planned yet (no range, the
	// tail and floor where creation put them) starts at the low mark
	// instead, when that is higher: one conditional write, so a report
	// after anything is planned never moves it.
	qStartFromLow = wq(`UPDATE groups SET start_id = ?2, tail_end = ?2 - 1, history_floor = ?2, updated_at = ?3
		WHERE id = ?1 AND start_from_low = 1 AND ?2 > start_id AND tail_end = start_id - 1 AND history_floor = start_id
		AND NOT EXISTS (SELECT 1 FROM ranges WHERE group_id = ?1)`)
	// The group's planned ranges, counted no further than the bound: a
	// seek of the group's planned ranges in an index, as long as the bound at most.
	qPlannedUpTo = wq(`SELECT count(*) FROM (SELECT 1 FROM ranges WHERE group_id = ? AND status = 'planned' LIMIT ?)`)
	// The index groups_marks keeps the order within a kind: never
	// reported (NULL) first.
	qMarksOldest = `SELECT g.id, g.name, g.marks_low, g.marks_high, g.marks_at FROM groups g
		WHERE g.kind = ?1 AND g.active = 1 AND g.owned = 1
		AND NOT (g.held = 1 AND EXISTS (SELECT 1 FROM group_leases l WHERE l.group_id = g.id AND l.node_id != ?3 AND l.heartbeat_at >= ?4))
		ORDER BY g.marks_at, g.id LIMIT ?2`
	// The group's holder, when its lease is live (beaten since ?2): its
	// node's name, fleet-wide, so a report carried from a peer is
	// compared by name.
	qLiveHolder = wq(`SELECT coalesce(n.name, '') FROM group_leases l LEFT JOIN nodes n ON n.id = l.node_id
		WHERE l.group_id = ?1 AND l.node_id IS NOT NULL AND l.heartbeat_at >= ?2`)
)

// reportPlanRanges is the most ranges one report plans, and
// reportBacklogRanges the most planned ranges (not leased yet) a report
// tops a group up to: the rest of a source's tail is planned by later
// reports, as workers lease and finish what is planned. Variables so a
// test can see the bounds without planning thousands of ranges.
var (
	reportPlanRanges    int64 = MaxPlanRanges
	reportBacklogRanges int64 = ReportBacklogRanges
)

// ReportBacklogRanges is how many planned ranges a water mark report
// tops a group up to, at most.
const ReportBacklogRanges = 1000

// ReportWatermarks records the water marks the group's source reports
// (low ≤ high+1, both 0 or more; an empty group has low = high+1) and
// plans the tail up to high in the group's range size, and reports how
// many ranges it planned. Planning is idempotent and never shrinks: a high
// at or below the tail's end plans nothing. A report that would plan more
// than MaxPlanRanges plans that many and leaves the rest to the next
// report, so a group far behind its source is caught up over a few
// reports instead of refused. A group created without a start and not
// planned yet starts at low when low is above its start: ids below low
// have expired at the source. Errors: unprocessable (inconsistent marks),
// not found.
func (tx *Tx) ReportWatermarks(groupID, low, high int64) (int64, error) {
	if low < 0 || high < -1 || low > high+1 {
		return 0, leasehold.Errorf(leasehold.KindUnprocessable,
			"water marks low %d, high %d are inconsistent: want 0 ≤ low ≤ high+1", low, high)
	}
	g, err := tx.Group(groupID)
	if err != nil {
		return 0, err
	}
	changed := g.Low == nil || *g.Low != low || g.High == nil || *g.High != high
	if _, err := tx.exec(qMarksSet, groupID, low, high, ms(tx.now)); err != nil {
		return 0, mapError(err, "recording water marks")
	}
	if changed {
		if err := tx.event(EventGroupMarks, groupID, 0, 0, map[string]any{"low": low, "high": high}); err != nil {
			return 0, err
		}
	}
	if g, err = tx.startFromLow(g, low); err != nil {
		return 0, err
	}
	if high <= g.TailEnd {
		return 0, nil
	}
	// At most reportPlanRanges ranges a report, and no more than tops the
	// group's planned ranges up to reportBacklogRanges, counted without
	// overflow: any worker may report any group of its kinds, and reports
	// repeated must not pile up ranges nobody leases.
	room := reportPlanRanges
	var waiting int64
	if err := tx.queryRow(qPlannedUpTo, groupID, reportBacklogRanges).Scan(&waiting); err != nil {
		return 0, mapError(err, "counting the planned ranges")
	}
	room = min(room, reportBacklogRanges-waiting)
	if room <= 0 {
		return 0, nil
	}
	upTo := high
	if rangeCount(g.TailEnd+1, high, g.RangeSize) > room {
		upTo = g.TailEnd + room*g.RangeSize
	}
	return tx.PlanTail(groupID, upTo)
}

// startFromLow moves the start of g up to low when g was created without
// a start and nothing is planned yet, and returns the group as it is now.
func (tx *Tx) startFromLow(g leasehold.Group, low int64) (leasehold.Group, error) {
	if low <= g.Start || g.TailEnd != g.Start-1 || g.HistoryFloor != g.Start {
		return g, nil // cheap checks first; the write checks them all again
	}
	res, err := tx.exec(qStartFromLow, g.ID, low, ms(tx.now))
	if err != nil {
		return g, mapError(err, "starting a group at its low mark")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return g, nil
	}
	if err := tx.event(EventGroupStarted, g.ID, 0, 0, map[string]any{"from": g.Start, "start": low}); err != nil {
		return g, err
	}
	return tx.Group(g.ID)
}

// LiveHolder names the node holding the group with a lease beaten since
// live, and held is false when nobody does: a group's holder reports its
// own source (the appliance's fence on water-mark reports).
func (tx *Tx) LiveHolder(groupID int64, live time.Time) (holder string, held bool, err error) {
	err = tx.queryRow(qLiveHolder, groupID, ms(live)).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, mapError(err, "reading the group's holder")
	}
	return holder, true, nil
}

// EventGroupSourceError is a group's source said it cannot be read (rule 13).
const EventGroupSourceError = "group_source_error"

// MaxSourceError is the longest source error kept, in bytes.
const MaxSourceError = 4096

// ReportSourceError records that the group's source could not be read,
// as node reported it (rule 13), and returns how many reports in a row
// were errors: two make a source_unreadable finding, and the next report
// with water marks clears them. Errors: invalid (empty or too long), not
// found.
func (tx *Tx) ReportSourceError(groupID int64, node, text string) (int64, error) {
	if text == "" || len(text) > MaxSourceError {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "a source error is 1 to %d bytes, not %d", MaxSourceError, len(text))
	}
	var n int64
	err := tx.queryRow(qSourceErrorSet, groupID, text, node, ms(tx.now)).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return 0, mapError(err, "recording a source error")
	}
	return n, tx.event(EventGroupSourceError, groupID, 0, 0, map[string]any{"error": text, "node": node, "in_a_row": n})
}

// Watermarks lists up to limit active groups of the given kinds this node
// owns, those whose marks were reported longest ago first and those never
// reported before them: the groups a worker should ask its source about
// next. Groups another node than nodeID holds with a lease beaten since
// live are left out: their holder reports them (ReportedByHolder). One
// seek a kind.
func (db *DB) Watermarks(ctx context.Context, kinds []string, limit int, nodeID int64, live time.Time) ([]leasehold.Watermarks, error) {
	out := []leasehold.Watermarks{}
	for _, kind := range kinds {
		rows, err := db.query(ctx, qMarksOldest, kind, limit, nodeID, ms(live))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var w leasehold.Watermarks
			var low, high, at sql.NullInt64
			if err := rows.Scan(&w.ID, &w.Name, &low, &high, &at); err != nil {
				rows.Close()
				return nil, mapError(err, "listing water marks")
			}
			w.Low, w.High, w.ReportedAt = nullInt(low), nullInt(high), fromNullMS(at)
			out = append(out, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapError(err, "listing water marks")
		}
	}
	if len(kinds) > 1 {
		// The kinds' lists merged in the index's order: never reported
		// first, then the oldest.
		sort.SliceStable(out, func(i, j int) bool {
			a, b := out[i].ReportedAt, out[j].ReportedAt
			switch {
			case a == nil || b == nil:
				return a == nil && b != nil || a == nil && b == nil && out[i].ID < out[j].ID
			case !a.Equal(*b):
				return a.Before(*b)
			}
			return out[i].ID < out[j].ID
		})
		out = out[:min(len(out), limit)]
	}
	return out, nil
}
