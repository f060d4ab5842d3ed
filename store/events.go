package store

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/leasehold/leasehold"
)

// Event kinds (leasehold.EventKind) written to the outbox.
const (
	EventNodeRegistered = "node_registered"
	EventNodePaused     = "node_paused"
	EventNodeResumed    = "node_resumed"
	EventNodeDeleted    = "node_deleted"
	EventGroupCreated   = "group_created"
	EventGroupUpdated   = "group_updated"
	EventTailPlanned    = "tail_planned"
	EventHistoryPlanned = "history_planned"
	EventLeaseGranted   = "lease_granted"
	EventLeaseReleased  = "lease_released"
	EventRangeLeased    = "range_leased"
	EventRangeProgress  = "range_progress"
	EventRangeFinished  = "range_finished"
	EventRangeFailed    = "range_failed"
	EventRangeRetried   = "range_retried"
	EventRangesReplan   = "ranges_replanned"
	EventSnapshotStored = "snapshot_stored"
	EventRulesSet       = "rules_set"
	// EventOutboxPruned stands for changes no outbox row tells of: the node
	// ran alone (Options.NoOutbox). A peer folding it rebuilds the node's
	// part from its dump.
	EventOutboxPruned = "outbox_pruned"
)

var qEventInsert = wq(`INSERT INTO events (at, kind, group_id, range_id, node_id, body) VALUES (?, ?, ?, ?, ?, ?)`)

// event writes one outbox row in the current transaction. Zero ids are
// stored as NULL.
func (tx *Tx) event(kind string, groupID, rangeID, nodeID int64, body map[string]any) error {
	if tx.db.opts.NoOutbox {
		// Alone, the throughput chart counts finishes in memory instead,
		// once the write has committed.
		if kind == EventRangeFinished {
			at, headers := tx.now, headersOf(body)
			tx.AfterCommit(func() { tx.db.finished.add(at, headers) })
		}
		return nil
	}
	b := []byte("{}")
	if len(body) > 0 {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	_, err := tx.exec(qEventInsert, ms(tx.now), kind, zeroNull(groupID), zeroNull(rangeID), zeroNull(nodeID), string(b))
	return err
}

func zeroNull(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// pruneOutbox empties the outbox of a node running alone and leaves one
// EventOutboxPruned in it, unless that is all it holds already. The
// emptying is SQLite's truncation of a whole table, quick however many rows
// an older node left; ids are never reused (AUTOINCREMENT), so a peer's
// de-duplication never mistakes a later event for an earlier one.
func (db *DB) pruneOutbox() error {
	var last sql.NullString
	var second sql.NullInt64
	err := db.w.QueryRow(`SELECT (SELECT kind FROM events ORDER BY id DESC LIMIT 1), (SELECT id FROM events ORDER BY id LIMIT 1 OFFSET 1)`).Scan(&last, &second)
	if err != nil {
		return mapError(err, "reading the outbox")
	}
	if last.String == EventOutboxPruned && !second.Valid {
		return nil
	}
	tx, err := db.w.Begin()
	if err != nil {
		return mapError(err, "emptying the outbox")
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM events`); err != nil {
		return mapError(err, "emptying the outbox")
	}
	if _, err := tx.Exec(`INSERT INTO events (at, kind) VALUES (?, ?)`, ms(db.now()), EventOutboxPruned); err != nil {
		return mapError(err, "emptying the outbox")
	}
	return mapError(tx.Commit(), "emptying the outbox")
}

// Events returns up to limit outbox rows after id, oldest first.
func (db *DB) Events(ctx context.Context, after int64, limit int) ([]leasehold.Event, error) {
	return db.events(ctx, `SELECT id, at, kind, group_id, range_id, node_id, body FROM events WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
}

// events reads outbox rows with q (id, at, kind, group_id, range_id,
// node_id, body).
func (db *DB) events(ctx context.Context, q string, args ...any) ([]leasehold.Event, error) {
	rows, err := db.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leasehold.Event
	for rows.Next() {
		var e leasehold.Event
		var at int64
		var g, r, n sql.NullInt64
		var body string
		if err := rows.Scan(&e.ID, &at, &e.Kind, &g, &r, &n, &body); err != nil {
			return nil, mapError(err, "reading events")
		}
		e.At, e.GroupID, e.RangeID, e.NodeID, e.Body = fromMS(at), nullInt(g), nullInt(r), nullInt(n), []byte(body)
		out = append(out, e)
	}
	return out, mapError(rows.Err(), "reading events")
}
