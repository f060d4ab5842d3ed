package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// Totals are the catalog's counts for the dashboard's overview.
type Totals struct {
	Groups      int64
	Ranges      map[leasehold.RangeStatus]int64 // by status
	LeasesHeld  int64
	Headers     int64 // headers indexed, over every group's leases
	RangesTotal int64
}

// Totals reads the catalog's counts: groups and ranges from the tallies
// (kept as the catalog is written, one read of a few rows), held leases
// by the partial index group_leases_node (at most the fleet's capacity).
// The overview polls it every few seconds, so none of it counts the
// catalog itself. Headers are still summed over every lease row; see
// the note on qTotalsHeaders.
func (db *DB) Totals(ctx context.Context) (Totals, error) {
	t := Totals{Ranges: map[leasehold.RangeStatus]int64{}}
	tl, err := db.Tallies(ctx)
	if err != nil {
		return t, err
	}
	for _, s := range leasehold.GroupStates {
		t.Groups += tl.Owned[s] + tl.Unowned[s]
	}
	for s, n := range tl.Ranges {
		t.Ranges[s] = n
		t.RangesTotal += n
	}
	if err := db.queryRow(ctx, qTotalsHeld).Scan(&t.LeasesHeld); err != nil {
		return t, mapError(err, "counting held leases")
	}
	if err := db.queryRow(ctx, qTotalsHeaders).Scan(&t.Headers); err != nil {
		return t, mapError(err, "summing headers")
	}
	return t, nil
}

const (
	// qTotalsHeld counts held leases by group_leases_node.
	qTotalsHeld = `SELECT count(*) FROM group_leases WHERE node_id IS NOT NULL`
	// qTotalsHeaders reads the headers indexed on this node's leases, a
	// tally kept by triggers on the lease rows (schema version 10).
	qTotalsHeaders = `SELECT n FROM tallies WHERE kind = 'headers' AND state = 'indexed'`
)

// SetPlanned records the planned count and makes done the rest.
func (t *Totals) SetPlanned(planned int64) {
	t.Ranges[leasehold.StatusPlanned] = planned
	t.Ranges[leasehold.StatusDone] = max(0, t.RangesTotal-planned-t.Ranges[leasehold.StatusLeased]-t.Ranges[leasehold.StatusFailed])
}

// Minute is one minute of throughput: ranges finished and headers.
type Minute struct {
	At      time.Time
	Ranges  int64
	Headers int64
}

// throughputRows bounds how many outbox rows one chart reads.
const throughputRows = 200000

// Throughput counts ranges finished and their headers per minute over the
// minutes before now, from the outbox's range_finished events, newest
// events first by id so only the last minutes' rows are read; a node
// running alone writes no outbox and counts its finishes in memory for
// the last hour instead. The result is oldest minute first, minutes long.
func (db *DB) Throughput(ctx context.Context, now time.Time, minutes int) ([]Minute, error) {
	end := now.Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-time.Duration(minutes) * time.Minute)
	out := make([]Minute, minutes)
	for i := range out {
		out[i].At = start.Add(time.Duration(i) * time.Minute)
	}
	if db.opts.NoOutbox {
		db.finished.fill(out, start)
		return out, nil
	}
	rows, err := db.query(ctx, `SELECT at, kind, body FROM events ORDER BY id DESC LIMIT ?`, throughputRows)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var at int64
		var kind, body string
		if err := rows.Scan(&at, &kind, &body); err != nil {
			return nil, mapError(err, "reading throughput")
		}
		t := fromMS(at)
		if t.Before(start) {
			break // ids rise with the clock: everything older is out of the chart
		}
		if kind != EventRangeFinished || !t.Before(end) {
			continue
		}
		var b struct {
			Headers int64 `json:"headers"`
		}
		_ = json.Unmarshal([]byte(body), &b)
		i := int(t.Sub(start) / time.Minute)
		out[i].Ranges++
		out[i].Headers += b.Headers
	}
	return out, mapError(rows.Err(), "reading throughput")
}

// GroupRow is a group as the dashboard's table shows it. A group whose
// state is a peer's names that peer in Origin, and its holder, heartbeat
// and snapshot are the ones the owner last published: its lease here is
// only the fence.
type GroupRow struct {
	leasehold.Group
	// State is the group's state (leasehold.GroupStates), as the tallies
	// count it; a peer's group its owner's worker holds is held.
	State        string
	Ranges       map[leasehold.RangeStatus]int64
	Origin       string
	Holder       string
	Fence        int64
	HeartbeatAt  *time.Time
	SnapshotSize *int64
	SnapshotAt   *time.Time
}

// The groups table's filters by state (GroupRowsIn).
const (
	// RowsFailing are groups with a failed range.
	RowsFailing = "failing"
	// RowsQuarantined, RowsHeld, RowsIdle are the groups in that state.
	RowsQuarantined = leasehold.GroupQuarantined
	RowsHeld        = leasehold.GroupHeld
	RowsIdle        = leasehold.GroupIdle
)

// RowFilters are the filters GroupRowsIn takes, in the order shown.
var RowFilters = []string{RowsFailing, RowsQuarantined, RowsHeld, RowsIdle}

// IdleWindow bounds how many groups, by id, one page of idle groups
// looks at: idle groups have no index of their own (every lease and
// finish would pay for one), so a page walks ids and stops here,
// whether or not it found a page's worth.
const IdleWindow = 5000

// qGroupRowCols are the groups table's columns. The state is the tallies'
// (schema.sql, version 8); the range counts one seek of
// ranges_group_status_end each.
const qGroupRowCols = `SELECT ` + groupColumns + `, coalesce(p.origin, ''),
		CASE WHEN p.group_id IS NULL THEN coalesce(n.name, '') ELSE p.holder END, l.fence,
		CASE WHEN p.group_id IS NULL THEN l.heartbeat_at ELSE p.heartbeat_at END,
		CASE WHEN p.group_id IS NULL THEN l.snapshot_size ELSE p.snapshot_size END,
		CASE WHEN p.group_id IS NULL THEN l.snapshot_at ELSE p.snapshot_at END,
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'planned'),
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'leased'),
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'done'),
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'failed'),
		CASE WHEN p.group_id IS NULL THEN l.node_id WHEN p.holder != '' THEN 0 END,
		CASE WHEN g.quarantine_at IS NOT NULL THEN 'quarantined'
			WHEN g.held = 1 OR coalesce(p.holder, '') != '' THEN 'held' WHEN g.active = 0 THEN 'inactive'
			WHEN g.urgent_tail IS NOT NULL OR g.urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END`

// qGroupRowJoins join a group (g) to its lease, holder and owner.
const qGroupRowJoins = ` JOIN group_leases l ON l.group_id = g.id LEFT JOIN nodes n ON n.id = l.node_id
		LEFT JOIN peer_groups p ON p.group_id = g.id`

// The groups table by state, each page by id after ?1, ?2 rows. Each
// reads only the groups in its state, by an index that holds only them
// (groups_test.go checks the plans), so a page costs the same at a
// million groups: quarantined groups by groups_quarantined, held ones by
// group_leases_node (at most the fleet's capacity), failing ones by the
// failed ranges' ranges_failed. Idle groups are the many: a page of them
// walks at most ?3 ids (IdleWindow) by the primary key.
const (
	qRowsQuarantined = qGroupRowCols + ` FROM groups g INDEXED BY groups_quarantined` + qGroupRowJoins + `
		WHERE g.quarantine_at IS NOT NULL AND g.id > ?1 ORDER BY g.id LIMIT ?2`
	qRowsHeld = qGroupRowCols + ` FROM group_leases h INDEXED BY group_leases_node CROSS JOIN groups g ON g.id = h.group_id` + qGroupRowJoins + `
		WHERE h.node_id IS NOT NULL AND h.group_id > ?1 ORDER BY h.group_id LIMIT ?2`
	qRowsFailing = qGroupRowCols + ` FROM (SELECT DISTINCT group_id AS id FROM ranges INDEXED BY ranges_failed
			WHERE status = 'failed' AND group_id > ?1) f CROSS JOIN groups g ON g.id = f.id` + qGroupRowJoins + `
		ORDER BY g.id LIMIT ?2`
	qRowsIdle = qGroupRowCols + ` FROM (SELECT id FROM groups WHERE id > ?1 ORDER BY id LIMIT ?3) w CROSS JOIN groups g ON g.id = w.id` + qGroupRowJoins + `
		WHERE g.quarantine_at IS NULL AND g.held = 0 AND g.active = 1 AND g.urgent_tail IS NULL AND g.urgent_hist IS NULL
		AND p.group_id IS NULL ORDER BY w.id LIMIT ?2`
	// qIdleWindowEnd is the last id an idle page looked at, and how many.
	qIdleWindowEnd = `SELECT coalesce(max(id), 0), count(*) FROM (SELECT id FROM groups WHERE id > ?1 ORDER BY id LIMIT ?2)`
)

// qGroupRowsPrefix is a page of a name search: the groups whose names
// start with the prefix (?1 to ?2), by name, after the group ?3 (0: from
// the first). It walks the name index from the cursor's name, so a page
// costs the same however many groups match; ordered by id it would sort
// every match to return fifty.
var qGroupRowsPrefix = qGroupRowCols + ` FROM groups g` + qGroupRowJoins + ` WHERE g.name >= ?1 AND g.name < ?2
	AND g.name > coalesce((SELECT c.name FROM groups c WHERE c.id = ?3), '') ORDER BY g.name LIMIT ?4`

// GroupRows lists up to limit groups whose names start with prefix (all
// when empty): without a prefix by id, after the id after; with one by
// name, after the name of group after, with their range counts and
// lease, or its owner's when it is a peer's. Names are ASCII below 0x7f,
// so the prefix is the name range [prefix, prefix+"\x7f"), a seek on the
// name index; the owner is one primary-key probe of peer_groups a row.
func (db *DB) GroupRows(ctx context.Context, prefix string, after int64, limit int) ([]GroupRow, error) {
	if prefix == "" {
		return db.groupRows(ctx, qGroupRowCols+` FROM groups g`+qGroupRowJoins+` WHERE g.id > ?1 ORDER BY g.id LIMIT ?2`, after, limit)
	}
	return db.groupRows(ctx, qGroupRowsPrefix, prefix, prefix+"\x7f", after, limit)
}

// GroupRowsIn lists up to limit groups in a state (one of RowFilters)
// with ids above after, by id, and the id the next page starts after (0
// when there is none). A page of idle groups looks at IdleWindow ids at
// most, so it may hold fewer than limit rows and still have a next page.
// Errors: invalid (the filter), unavailable, internal.
func (db *DB) GroupRowsIn(ctx context.Context, state string, after int64, limit int) ([]GroupRow, int64, error) {
	var rows []GroupRow
	var err error
	switch state {
	case RowsQuarantined:
		rows, err = db.groupRows(ctx, qRowsQuarantined, after, limit)
	case RowsHeld:
		rows, err = db.groupRows(ctx, qRowsHeld, after, limit)
	case RowsFailing:
		rows, err = db.groupRows(ctx, qRowsFailing, after, limit)
	case RowsIdle:
		if rows, err = db.groupRows(ctx, qRowsIdle, after, limit, IdleWindow); err != nil || len(rows) == limit {
			break
		}
		var end, seen int64
		if err := db.queryRow(ctx, qIdleWindowEnd, after, IdleWindow).Scan(&end, &seen); err != nil {
			return nil, 0, mapError(err, "listing idle groups")
		}
		if seen == IdleWindow {
			return rows, end, nil
		}
		return rows, 0, nil
	default:
		return nil, 0, leasehold.Errorf(leasehold.KindInvalid, "no filter %q: use one of %s", state, strings.Join(RowFilters, ", "))
	}
	if err != nil || len(rows) < limit {
		return rows, 0, err
	}
	return rows, rows[len(rows)-1].ID, nil
}

func (db *DB) groupRows(ctx context.Context, q string, args ...any) ([]GroupRow, error) {
	rows, err := db.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []GroupRow{}
	for rows.Next() {
		var r GroupRow
		var beat, size, snapAt, holder sql.NullInt64
		var planned, leased, done, failed int64
		g, err := scanGroup(rows, &r.Origin, &r.Holder, &r.Fence, &beat, &size, &snapAt, &planned, &leased, &done, &failed, &holder, &r.State)
		if err != nil {
			return nil, mapError(err, "listing groups")
		}
		r.Group = g
		if holder.Valid && beat.Valid {
			t := fromMS(beat.Int64)
			r.HeartbeatAt = &t
		} else {
			r.Holder = ""
		}
		if size.Valid && snapAt.Valid {
			t := fromMS(snapAt.Int64)
			r.SnapshotSize, r.SnapshotAt = &size.Int64, &t
		}
		r.Ranges = map[leasehold.RangeStatus]int64{leasehold.StatusPlanned: planned, leasehold.StatusLeased: leased, leasehold.StatusDone: done, leasehold.StatusFailed: failed}
		out = append(out, r)
	}
	return out, mapError(rows.Err(), "listing groups")
}

// PeerHold is how the owner of a group whose state is a peer's holds it,
// as it last published: this node's own lease row of such a group keeps
// only the fence, so the group page shows this instead.
type PeerHold struct {
	Origin      string
	Holder      string // the owner's worker node, "" when none holds it
	Fence       int64
	HeartbeatAt *time.Time
	Snapshot    *leasehold.Snapshot // the owner's newest, nil when none
}

// PeerHold reads the owner's hold of a group; nil when the group is this
// node's own. Errors: unavailable, internal.
func (db *DB) PeerHold(ctx context.Context, groupID int64) (*PeerHold, error) {
	h := &PeerHold{}
	var beat, next, size, at sql.NullInt64
	var sha sql.NullString
	err := db.queryRow(ctx, `SELECT origin, holder, fence, heartbeat_at, snapshot_next, snapshot_size, snapshot_sha256, snapshot_at
		FROM peer_groups WHERE group_id = ?`, groupID).Scan(&h.Origin, &h.Holder, &h.Fence, &beat, &next, &size, &sha, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mapError(err, "reading a peer's hold of a group")
	}
	h.HeartbeatAt = fromNullMS(beat)
	if next.Valid && at.Valid {
		h.Snapshot = &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64)}
	}
	return h, nil
}
