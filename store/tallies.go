package store

import (
	"context"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// Tallies reads the counts the catalog keeps as it is written (the
// tallies table, kept by triggers in schema.sql): one read of a few rows,
// whatever the catalog's size. Errors: unavailable, internal.
func (db *DB) Tallies(ctx context.Context) (leasehold.Tallies, error) {
	t := leasehold.Tallies{Ranges: map[leasehold.RangeStatus]int64{}, Owned: map[string]int64{}, Unowned: map[string]int64{}}
	for _, s := range leasehold.RangeStatuses {
		t.Ranges[s] = 0
	}
	for _, s := range leasehold.GroupStates {
		t.Owned[s], t.Unowned[s] = 0, 0
	}
	rows, err := db.query(ctx, `SELECT kind, state, n FROM tallies`)
	if err != nil {
		return t, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n int64
		if err := rows.Scan(&kind, &state, &n); err != nil {
			return t, mapError(err, "reading the tallies")
		}
		what, part, _ := strings.Cut(state, "/")
		switch {
		case kind == "ranges":
			status := leasehold.RangeStatus(what)
			t.Ranges[status] += n
			if status == leasehold.StatusPlanned && part == "tail" {
				t.PlannedTail += n
			} else if status == leasehold.StatusPlanned {
				t.PlannedHist += n
			}
		case kind == "groups" && part == "owned":
			t.Owned[what] += n
		case kind == "groups":
			t.Unowned[what] += n
		}
	}
	return t, mapError(rows.Err(), "reading the tallies")
}

// qNodeStates counts nodes by state (leasehold.NodeStates). It reads the
// nodes table, which holds the fleet's workers (a few rows, not the
// catalog), each node's held groups by one seek of group_leases_node. ?1
// is the unseen bound's instant.
const qNodeStates = `SELECT CASE WHEN n.paused THEN 'paused'
		WHEN coalesce(n.last_seen_at, n.created_at) < ?1 THEN 'unseen'
		WHEN EXISTS (SELECT 1 FROM group_leases l WHERE l.node_id = n.id) THEN 'active'
		ELSE 'idle' END, count(*)
	FROM nodes n WHERE n.home = '' GROUP BY 1`

// NodeStates counts this node's registered worker nodes by state as of
// now; a node not seen for unseen is unseen. Every state is present.
// Errors: unavailable, internal.
func (db *DB) NodeStates(ctx context.Context, now time.Time, unseen time.Duration) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range leasehold.NodeStates {
		out[s] = 0
	}
	rows, err := db.query(ctx, qNodeStates, ms(now.Add(-unseen)))
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return out, mapError(err, "counting nodes")
		}
		out[state] = n
	}
	return out, mapError(rows.Err(), "counting nodes")
}
