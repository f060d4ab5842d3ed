package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strconv"

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

// outboxRow is an outbox row a write made, inserted when its batch
// commits (insertOutbox).
type outboxRow struct {
	at                       int64
	kind                     string
	groupID, rangeID, nodeID any
	body                     string
}

// event writes one outbox row in the current transaction. Zero ids are
// stored as NULL.
//
// The row is kept with the write and inserted with the rest of its
// batch's rows just before the batch commits (insertOutbox), outside the
// writes' savepoints: every write of a batch appends to the same last
// pages of the outbox (its table, its unsent index, the AUTOINCREMENT
// counter), and a page changed again under a later write's savepoint is
// copied whole to the savepoint's journal first, about three 4 KiB pages
// a holder call in a fleet. A write rolled back to its savepoint drops
// its rows with it.
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
	b, err := eventBody(body)
	if err != nil {
		return err
	}
	row := outboxRow{at: ms(tx.now), kind: kind, groupID: zeroNull(groupID), rangeID: zeroNull(rangeID), nodeID: zeroNull(nodeID), body: b}
	if tx.cur == nil {
		_, err := tx.exec(qEventInsert, row.at, row.kind, row.groupID, row.rangeID, row.nodeID, row.body)
		return err
	}
	tx.cur.outbox = append(tx.cur.outbox, row)
	return nil
}

// insertOutbox inserts the outbox rows of the batch's writes that stand
// (their results nil), in the order the writes ran, in the batch's
// transaction with no savepoint open. An error fails the whole batch.
func (tx *Tx) insertOutbox(batch []*write, results []error) error {
	for i, w := range batch {
		if results[i] != nil {
			continue
		}
		for _, r := range w.outbox {
			if _, err := tx.exec(qEventInsert, r.at, r.kind, r.groupID, r.rangeID, r.nodeID, r.body); err != nil {
				return mapError(err, "writing the outbox")
			}
		}
	}
	return nil
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

// eventBody is body as its outbox row holds it: "{}" when empty, else
// the JSON json.Marshal writes (keys sorted). The bodies of the holder
// calls (ids, counts, flags, a reason) are written here without
// reflection, three or four a range; any other value takes json.Marshal.
func eventBody(body map[string]any) (string, error) {
	if len(body) == 0 {
		return "{}", nil
	}
	var keys [8]string
	ks := keys[:0]
	for k := range body {
		if !plainJSON(k) || len(ks) == len(keys) {
			return marshalBody(body)
		}
		ks = append(ks, k)
	}
	slices.Sort(ks)
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i, k := range ks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		switch v := body[k].(type) {
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case string:
			if !plainJSON(v) {
				return marshalBody(body)
			}
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		default:
			return marshalBody(body)
		}
	}
	return string(append(b, '}')), nil
}

// marshalBody is eventBody's way for any value.
func marshalBody(body map[string]any) (string, error) {
	b, err := json.Marshal(body)
	return string(b), err
}

// plainJSON reports whether s is written as itself inside JSON quotes:
// printable ASCII that json.Marshal escapes none of.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
