package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold"
)

var (
	qSnapshotSet = wq(`UPDATE group_leases SET snapshot_next = ?2, snapshot_size = ?3, snapshot_sha256 = ?4, snapshot_at = ?5, snapshot_file = ?6
		WHERE group_id = ?1`)
	// Reads the group's ranges: an operator's upload, not a hot path.
	qDoneFrom    = wq(`SELECT count(*) FROM ranges WHERE group_id = ?1 AND status = 'done' AND end_id >= ?2`)
	qRulesMax    = wq(`SELECT coalesce(max(version), 0) FROM rule_sets`)
	qRulesInsert = wq(`INSERT INTO rule_sets (version, body, created_at) VALUES (?, ?, ?)`)
)

// SetSnapshot records a group's new window snapshot (already on disk) and
// returns the previous one, whose file the caller removes after commit.
// With nodeID > 0 only that node at that fence may do it (lease lost
// otherwise); with nodeID 0 it is an operator's, refused while the group is
// held (conflict), and it lifts the group's quarantine.
func (tx *Tx) SetSnapshot(groupID, nodeID, fence int64, s leasehold.Snapshot) (*leasehold.Snapshot, error) {
	if nodeID > 0 {
		if _, err := tx.holder(groupID, nodeID, fence); err != nil {
			return nil, err
		}
	}
	l, err := tx.leaseRow(groupID)
	if err != nil {
		return nil, err
	}
	if nodeID == 0 && l.holder.Valid {
		return nil, leasehold.Errorf(leasehold.KindConflict, "group %d is held by node %d at fence %d; release it first", groupID, l.holder.Int64, l.fence)
	}
	if _, err := tx.exec(qSnapshotSet, groupID, s.Next, s.Size, s.SHA256, ms(s.At), s.File); err != nil {
		return nil, mapError(err, "recording a snapshot")
	}
	if nodeID == 0 {
		// An operator restoring a window lifts a quarantine (rule 10).
		if err := tx.unquarantine(groupID); err != nil {
			return nil, err
		}
	}
	err = tx.event(EventSnapshotStored, groupID, 0, nodeID, map[string]any{"next": s.Next, "size": s.Size, "sha256": s.SHA256})
	return l.snapshot, err
}

// DoneFrom counts the group's done ranges that end at or after next: the
// finished work rule 2 plans again once a window covering ids below next
// is handed out. An operator's upload asks first (a conflict unless
// forced, see appliance.Upload.Force).
func (tx *Tx) DoneFrom(groupID, next int64) (int64, error) {
	var n int64
	err := tx.queryRow(qDoneFrom, groupID, next).Scan(&n)
	return n, mapError(err, "counting done ranges")
}

// DoneFrom is Tx.DoneFrom outside a write, for refusing before an upload.
func (db *DB) DoneFrom(ctx context.Context, groupID, next int64) (int64, error) {
	var n int64
	err := db.queryRow(ctx, qDoneFrom.sql, groupID, next).Scan(&n)
	return n, mapError(err, "counting done ranges")
}

// Snapshot reads a group's recorded snapshot; nil when it has none.
func (db *DB) Snapshot(ctx context.Context, groupID int64) (*leasehold.Snapshot, error) {
	var next, size, at, file sql.NullInt64
	var sha sql.NullString
	err := db.queryRow(ctx, `SELECT snapshot_next, snapshot_size, snapshot_sha256, snapshot_at, snapshot_file FROM group_leases WHERE group_id = ?`, groupID).
		Scan(&next, &size, &sha, &at, &file)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	if err != nil {
		return nil, mapError(err, "reading a snapshot")
	}
	if !next.Valid {
		return nil, nil
	}
	return &leasehold.Snapshot{Next: next.Int64, Size: size.Int64, SHA256: sha.String, At: fromMS(at.Int64), File: file.Int64}, nil
}

// SnapshotFiles lists every group's recorded snapshot file number, for
// removing files the catalog does not point at.
func (db *DB) SnapshotFiles(ctx context.Context) (map[int64]int64, error) {
	rows, err := db.query(ctx, `SELECT group_id, snapshot_file FROM group_leases WHERE snapshot_file IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var g, f int64
		if err := rows.Scan(&g, &f); err != nil {
			return nil, mapError(err, "listing snapshots")
		}
		out[g] = f
	}
	return out, mapError(rows.Err(), "listing snapshots")
}

// PutRules stores a new version of the rules and returns its number.
func (tx *Tx) PutRules(body []byte) (int64, error) {
	var v int64
	if err := tx.queryRow(qRulesMax).Scan(&v); err != nil {
		return 0, mapError(err, "storing rules")
	}
	v++
	if _, err := tx.exec(qRulesInsert, v, string(body), ms(tx.now)); err != nil {
		return 0, mapError(err, "storing rules")
	}
	return v, tx.event(EventRulesSet, 0, 0, 0, map[string]any{"version": v})
}

// Rules reads the current rules; version 0 with an empty object when none
// were ever set.
func (db *DB) Rules(ctx context.Context) (leasehold.RuleSet, error) {
	var rs leasehold.RuleSet
	var body string
	err := db.queryRow(ctx, `SELECT version, body FROM rule_sets ORDER BY version DESC LIMIT 1`).Scan(&rs.Version, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return leasehold.RuleSet{Version: 0, Body: []byte("{}")}, nil
	}
	rs.Body = []byte(body)
	return rs, mapError(err, "reading rules")
}
