package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// This node's own groups as peer sync publishes them: the outbox of
// changes to send, and the state of an owned group as a dump or a
// snapshot of it reads it. Folding what peers own is fold.go; adopting a
// group whose claim was won is owned.go.

// MarkSent marks the outbox sent through id: the server acknowledged it.
func (tx *Tx) MarkSent(through int64) error {
	_, err := tx.exec(qOutboxSent, through)
	return mapError(err, "marking events sent")
}

// PruneSent removes sent outbox rows through id, at most limit ids of
// them from the oldest, and reports how many went. The publisher prunes
// what it sent a while ago (the dashboard's feed reads the last hour).
func (tx *Tx) PruneSent(through int64, limit int) (int64, error) {
	res, err := tx.exec(qOutboxPrune, through, limit)
	if err != nil {
		return 0, mapError(err, "pruning sent events")
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Unsent returns up to limit outbox rows not yet sent, after id, oldest
// first.
func (db *DB) Unsent(ctx context.Context, after int64, limit int) ([]leasehold.Event, error) {
	return db.events(ctx, `SELECT id, at, kind, group_id, range_id, node_id, body FROM events WHERE sent = 0 AND id > ? ORDER BY id LIMIT ?`, after, limit)
}

// ownStateColumns are a group's state as peer sync publishes it, read by
// scanOwnState from groups g joined with its lease l, holder n and
// peer_groups p.
const ownStateColumns = `g.id, g.name, g.priority, g.active, g.range_size, g.start_id, g.tail_end, g.history_floor, g.created_at,
	g.claim_rev, l.fence, coalesce(n.name, ''), l.leased_at, l.heartbeat_at, l.snapshot_next, l.snapshot_size, l.snapshot_sha256, l.snapshot_at,
	l.ranges_done, l.headers, p.origin, g.quarantine_error, g.quarantine_node, g.quarantine_at, g.marks_low, g.marks_high, g.marks_at,
	g.kind, g.source_error, g.source_error_node, g.source_error_at`

// ownStateFrom joins what ownStateColumns read.
const ownStateFrom = `FROM groups g JOIN group_leases l ON l.group_id = g.id LEFT JOIN nodes n ON n.id = l.node_id LEFT JOIN peer_groups p ON p.group_id = g.id`

// scanOwnState reads a row of ownStateColumns. Mirrored is true when the
// group's state is a peer's.
func scanOwnState(s scanner) (g PeerGroup, mirrored bool, err error) {
	var leased, beat, next, size, at sql.NullInt64
	var sha sql.NullString
	var created int64
	var peer sql.NullString
	var claimRev int64
	var qErr, qNode, sErr, sNode sql.NullString
	var qAt, low, high, marksAt, sAt sql.NullInt64
	err = s.Scan(&g.ID, &g.Name, &g.Priority, &g.Active, &g.RangeSize, &g.Start, &g.TailEnd, &g.HistoryFloor, &created,
		&claimRev, &g.Fence, &g.Holder, &leased, &beat, &next, &size, &sha, &at, &g.RangesDone, &g.Headers, &peer, &qErr, &qNode, &qAt,
		&low, &high, &marksAt, &g.Kind, &sErr, &sNode, &sAt)
	if err != nil || peer.Valid {
		return g, peer.Valid, err
	}
	g.CreatedAt, g.ClaimRev = fromMS(created), uint64(claimRev)
	if qAt.Valid {
		g.Quarantine = &leasehold.Quarantine{Error: qErr.String, Node: qNode.String, At: fromMS(qAt.Int64)}
	}
	if g.Holder != "" {
		g.LeasedAt, g.HeartbeatAt = fromNullMS(leased), fromNullMS(beat)
	}
	if next.Valid {
		g.Snapshot = &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64)}
	}
	// The source's water marks travel with the group (rule 11), and so
	// do its kind (rule 12) and what its source last said (rule 13).
	if low.Valid && high.Valid && marksAt.Valid {
		g.Low, g.High, g.MarksAt = &low.Int64, &high.Int64, fromNullMS(marksAt)
	}
	if sAt.Valid {
		g.SourceError = &leasehold.SourceError{Error: sErr.String, Node: sNode.String, At: fromMS(sAt.Int64)}
	}
	return g, false, nil
}

// OwnState is a group of this node's own as peer sync publishes it, with
// its ranges changed at or after since. Mirrored is true when the group's
// state is a peer's (this node does not publish it).
func (db *DB) OwnState(ctx context.Context, groupID int64, since time.Time) (g PeerGroup, ranges []PeerRange, mirrored bool, err error) {
	g, mirrored, err = scanOwnState(db.queryRow(ctx, `SELECT `+ownStateColumns+` `+ownStateFrom+` WHERE g.id = ?`, groupID))
	if errors.Is(err, sql.ErrNoRows) {
		return g, nil, false, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return g, nil, false, mapError(err, "reading a group's state")
	}
	if mirrored {
		return g, nil, true, nil
	}
	rows, err := db.query(ctx, `SELECT `+rangeColumns+`, coalesce((SELECT name FROM nodes WHERE id = r.node_id), '')
		FROM ranges r INDEXED BY ranges_group_updated WHERE r.group_id = ? AND r.updated_at >= ? ORDER BY r.start_id`, groupID, ms(since))
	if err != nil {
		return g, nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var r PeerRange
		if r.Range, err = scanRange(rows, &r.Node); err != nil {
			return g, nil, false, mapError(err, "reading a group's ranges")
		}
		ranges = append(ranges, r)
	}
	return g, ranges, false, mapError(rows.Err(), "reading a group's ranges")
}

// OwnGroupState is a group of this node's own with all its ranges.
type OwnGroupState struct {
	Group  PeerGroup
	Ranges []PeerRange
}

// OwnStates is a page of this node's own groups after the group id after,
// at most limit, in id order, each with all its ranges, as a full dump
// sends them. Two ordered scans, the groups and then their ranges by
// (group_id, start_id), instead of two seeks a group: a dump of a million
// groups reads each row once.
func (db *DB) OwnStates(ctx context.Context, after int64, limit int) ([]OwnGroupState, error) {
	rows, err := db.query(ctx, `SELECT `+ownStateColumns+` `+ownStateFrom+`
		WHERE g.id > ? AND p.group_id IS NULL ORDER BY g.id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	var out []OwnGroupState
	at := map[int64]int{}
	for rows.Next() {
		g, _, err := scanOwnState(rows)
		if err != nil {
			rows.Close()
			return nil, mapError(err, "reading the groups' state")
		}
		at[g.ID] = len(out)
		out = append(out, OwnGroupState{Group: g})
	}
	if err := rows.Close(); err != nil {
		return nil, mapError(err, "reading the groups' state")
	}
	if err := rows.Err(); err != nil || len(out) == 0 {
		return out, mapError(err, "reading the groups' state")
	}
	// The ranges of the page's id span; a peer's group inside the span
	// is not in the page, and its ranges are passed over.
	rows, err = db.query(ctx, `SELECT `+rangeColumns+`, coalesce((SELECT name FROM nodes WHERE id = r.node_id), '')
		FROM ranges r INDEXED BY ranges_group_start WHERE r.group_id BETWEEN ? AND ? ORDER BY r.group_id, r.start_id`,
		out[0].Group.ID, out[len(out)-1].Group.ID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r PeerRange
		if r.Range, err = scanRange(rows, &r.Node); err != nil {
			return nil, mapError(err, "reading the groups' ranges")
		}
		if i, ok := at[r.GroupID]; ok {
			out[i].Ranges = append(out[i].Ranges, r)
		}
	}
	return out, mapError(rows.Err(), "reading the groups' ranges")
}

// OwnStateName is the name of a group of this node's own; "" when the
// group is a peer's state or gone.
func (db *DB) OwnStateName(ctx context.Context, groupID int64) (string, error) {
	var name string
	err := db.queryRow(ctx, `SELECT g.name FROM groups g WHERE g.id = ? AND NOT EXISTS (SELECT 1 FROM peer_groups p WHERE p.group_id = g.id)`, groupID).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return name, mapError(err, "reading a group")
}

// MirroredName is the name of a group whose state here is a peer's, ""
// when the group is this node's own or gone.
func (db *DB) MirroredName(ctx context.Context, groupID int64) (string, error) {
	var name string
	err := db.queryRow(ctx, `SELECT g.name FROM groups g JOIN peer_groups p ON p.group_id = g.id WHERE g.id = ?`, groupID).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return name, mapError(err, "reading a group")
}

// Unpublished reports whether the named group has events the publisher
// has not sent yet. It reads the outbox's unsent rows, which are few
// while the node reaches NATS.
func (db *DB) Unpublished(ctx context.Context, name string) (bool, error) {
	var n int
	err := db.queryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM events INDEXED BY events_unsent
		WHERE sent = 0 AND group_id = (SELECT id FROM groups WHERE name = ?) LIMIT 1)`, name).Scan(&n)
	return n > 0, mapError(err, "reading the outbox")
}

// UnsentCount is how many events of this node's the fleet's stream has not
// acknowledged yet: a walk of the unsent events' index, as long as the
// backlog and no longer.
func (db *DB) UnsentCount(ctx context.Context) (int64, error) {
	var n int64
	err := db.queryRow(ctx, `SELECT count(*) FROM events INDEXED BY events_unsent WHERE sent = 0`).Scan(&n)
	return n, mapError(err, "reading the outbox")
}

// OwnGroupIDs returns up to limit ids of this node's own groups (not a
// peer's state) after id, in id order: a full state dump's pages.
func (db *DB) OwnGroupIDs(ctx context.Context, after int64, limit int) ([]int64, error) {
	rows, err := db.query(ctx, `SELECT g.id FROM groups g WHERE g.id > ? AND NOT EXISTS (SELECT 1 FROM peer_groups p WHERE p.group_id = g.id)
		ORDER BY g.id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, mapError(err, "listing own groups")
		}
		out = append(out, id)
	}
	return out, mapError(rows.Err(), "listing own groups")
}
