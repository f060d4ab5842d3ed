package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// Totals are the catalog's counts for the dashboard's overview.
type Totals struct {
	Groups      int64
	Ranges      map[string]int64 // by status
	LeasesHeld  int64
	Headers     int64 // headers indexed, over every group's leases
	RangesTotal int64
}

// Totals counts groups, ranges, held leases and headers, and the ranges
// leased and failed, each over its own partial index. Planned ranges are
// the backlog's count (Backlog, which the watchman shares between polls)
// and done ranges the rest: SetPlanned completes the counts, so no poll
// groups a million ranges by status.
func (db *DB) Totals(ctx context.Context) (Totals, error) {
	t := Totals{Ranges: map[string]int64{}}
	var leased, failed int64
	err := db.queryRow(ctx, `SELECT
		(SELECT count(*) FROM groups),
		(SELECT count(*) FROM ranges),
		(SELECT count(*) FROM ranges WHERE status = 'leased'),
		(SELECT count(*) FROM ranges WHERE status = 'failed'),
		(SELECT count(*) FROM group_leases WHERE node_id IS NOT NULL),
		(SELECT coalesce(sum(headers), 0) FROM group_leases)`).
		Scan(&t.Groups, &t.RangesTotal, &leased, &failed, &t.LeasesHeld, &t.Headers)
	if err != nil {
		return t, mapError(err, "counting the catalog")
	}
	t.Ranges[leasehold.StatusLeased], t.Ranges[leasehold.StatusFailed] = leased, failed
	t.SetPlanned(0)
	return t, nil
}

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
// events first by id so only the last minutes' rows are read. The result
// is oldest minute first, minutes long.
func (db *DB) Throughput(ctx context.Context, now time.Time, minutes int) ([]Minute, error) {
	end := now.Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-time.Duration(minutes) * time.Minute)
	out := make([]Minute, minutes)
	for i := range out {
		out[i].At = start.Add(time.Duration(i) * time.Minute)
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
	Ranges       map[string]int64
	Origin       string
	Holder       string
	Fence        int64
	HeartbeatAt  *time.Time
	SnapshotSize *int64
	SnapshotAt   *time.Time
}

// GroupRows lists up to limit groups with ids above after, by id, whose
// names start with prefix (all when empty), with their range counts and
// lease, or its owner's when it is a peer's. Names are ASCII below 0x7f,
// so the prefix is the name range [prefix, prefix+"\x7f"), a seek on the
// name index; the owner is one primary-key probe of peer_groups a row.
func (db *DB) GroupRows(ctx context.Context, prefix string, after int64, limit int) ([]GroupRow, error) {
	const cols = `SELECT ` + groupColumns + `, coalesce(p.origin, ''),
		CASE WHEN p.group_id IS NULL THEN coalesce(n.name, '') ELSE p.holder END, l.fence,
		CASE WHEN p.group_id IS NULL THEN l.heartbeat_at ELSE p.heartbeat_at END,
		CASE WHEN p.group_id IS NULL THEN l.snapshot_size ELSE p.snapshot_size END,
		CASE WHEN p.group_id IS NULL THEN l.snapshot_at ELSE p.snapshot_at END,
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'planned'),
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'leased'),
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'done'),
		(SELECT count(*) FROM ranges r WHERE r.group_id = g.id AND r.status = 'failed'),
		CASE WHEN p.group_id IS NULL THEN l.node_id WHEN p.holder != '' THEN 0 END
		FROM groups g JOIN group_leases l ON l.group_id = g.id LEFT JOIN nodes n ON n.id = l.node_id
		LEFT JOIN peer_groups p ON p.group_id = g.id`
	var rows *sql.Rows
	var err error
	if prefix == "" {
		rows, err = db.query(ctx, cols+` WHERE g.id > ?1 ORDER BY g.id LIMIT ?2`, after, limit)
	} else {
		rows, err = db.query(ctx, cols+` WHERE g.name >= ?1 AND g.name < ?2 AND g.id > ?3 ORDER BY g.id LIMIT ?4`,
			prefix, prefix+"\x7f", after, limit)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []GroupRow{}
	for rows.Next() {
		var r GroupRow
		var beat, size, snapAt, holder sql.NullInt64
		var planned, leased, done, failed int64
		g, err := scanGroup(rows, &r.Origin, &r.Holder, &r.Fence, &beat, &size, &snapAt, &planned, &leased, &done, &failed, &holder)
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
		r.Ranges = map[string]int64{leasehold.StatusPlanned: planned, leasehold.StatusLeased: leased, leasehold.StatusDone: done, leasehold.StatusFailed: failed}
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
