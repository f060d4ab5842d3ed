package store

import (
	"context"
	"fmt"
)

var qMaxGroupID = wq(`SELECT coalesce(max(id), 0) + 1 FROM groups`)

// BulkGroups creates n groups named prefix0 … prefix(n-1) in one statement
// per table, each with rangesEach tail ranges of rangeSize ids planned from
// id 1. It is the fast path for benchmarks and load tests: a million groups
// in seconds, where the API would take an hour. It writes one event, no
// more: EventOutboxPruned, which has peers rebuild its groups from a dump.
func (db *DB) BulkGroups(ctx context.Context, prefix string, n, rangeSize, rangesEach int64) error {
	if n < 1 || rangeSize < 1 || rangesEach < 0 {
		return fmt.Errorf("store: BulkGroups(%d, %d, %d): counts must be positive", n, rangeSize, rangesEach)
	}
	return db.Write(ctx, func(tx *Tx) error {
		now := ms(tx.now)
		var first int64
		if err := tx.queryRow(qMaxGroupID).Scan(&first); err != nil {
			return mapError(err, "bulk planning")
		}
		var urgent any
		if rangesEach > 0 {
			urgent = -1
		}
		stmts := []struct {
			q    string
			args []any
		}{
			{`WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?1)
			  INSERT INTO groups (id, name, priority, active, range_size, start_id, tail_end, history_floor, urgent_tail, free_since, created_at, updated_at)
			  SELECT ?2 + i, ?3 || i, 0, 1, ?4, 1, ?4 * ?5, 1, ?6, ?7, ?7, ?7 FROM c`,
				[]any{n, first, prefix, rangeSize, rangesEach, urgent, now}},
			{`INSERT INTO group_leases (group_id) SELECT id FROM groups WHERE id >= ?1`, []any{first}},
			{`WITH RECURSIVE k(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM k WHERE j + 1 < ?2)
			  INSERT INTO ranges (group_id, start_id, end_id, next_id, priority, updated_at)
			  SELECT g.id, 1 + k.j * ?3, (k.j + 1) * ?3, 1 + k.j * ?3, -1, ?4 FROM groups g, k WHERE g.id >= ?1`,
				[]any{first, rangesEach, rangeSize, now}},
		}
		if rangesEach == 0 {
			stmts = stmts[:2]
		}
		for _, s := range stmts {
			if _, err := tx.execSQL(s.q, s.args...); err != nil {
				return mapError(err, "bulk planning")
			}
		}
		// No event tells peers of these groups, so the outbox says its
		// events no longer cover the catalog, as a node that ran alone
		// does: every peer rebuilds this node's part from its dump once
		// it folds this, and a new peer learns of the node from the
		// publish record this event makes.
		return tx.event(EventOutboxPruned, 0, 0, 0, nil)
	})
}
