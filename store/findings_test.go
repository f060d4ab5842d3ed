package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// watchQueries are the watchman's queries with the arguments they run
// with.
// allow names the plan lines that are not seeks but stay small: the
// partial index ranges_failed holds only failed ranges, read newest first
// up to the limit; held leases (at most the fleet's capacity) are sorted
// by snapshot age.
var watchQueries = []struct {
	name  string
	q     string
	args  []any
	allow string
}{
	{"RangeStale", qFindRangeStale, []any{0, 100}, ""},
	{"LeaseQuiet", qFindLeaseQuiet, []any{0, 100}, ""},
	{"RangeFailed", qFindRangeFailed, []any{0, 100}, "SCAN r USING INDEX ranges_failed"},
	{"SnapshotOld", qFindSnapshotOld, []any{0, 100}, "USE TEMP B-TREE FOR ORDER BY"},
	{"WindowUnreadable", qFindWindowUnreadable, []any{0, 100}, "SCAN g USING INDEX groups_quarantined"},
	{"Flapping", qFindFlapping, []any{0, 100}, "SCAN g USING INDEX groups_flapping"},
	{"BacklogOldest", qBacklogOldest, []any{true}, ""},
}

// plan is the query's EXPLAIN QUERY PLAN, one detail a line.
func plan(t testing.TB, db *DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.r.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		out = append(out, detail)
	}
	return out
}

// TestFindingsUseIndexes: every watchman query reaches ranges and
// group_leases by an index seek, never by a scan, so a poll costs the
// same at a million ranges as at a thousand. (The nodes table is scanned:
// it holds the fleet's workers, a handful of rows.) Without ANALYZE the
// plan does not depend on the row count, so a small catalog shows the
// plan a big one gets; BenchmarkFindings measures the big one.
func TestFindingsUseIndexes(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range watchQueries {
		t.Run(c.name, func(t *testing.T) {
			p := plan(t, db, c.q, c.args...)
			for _, line := range p {
				if line == c.allow {
					continue
				}
				if strings.HasPrefix(line, "SCAN") && !strings.Contains(line, "nodes") && !strings.Contains(line, " n") {
					t.Errorf("plan scans: %q (whole plan %q)", line, p)
				}
				if strings.Contains(line, "TEMP B-TREE") {
					t.Errorf("plan sorts: %q (whole plan %q)", line, p)
				}
			}
			if !strings.Contains(strings.Join(p, "\n"), "INDEX") {
				t.Errorf("plan uses no index: %q", p)
			}
		})
	}
}

// BenchmarkFindings measures one watchman poll (every finding query and
// the backlog) at 1,000,000 planned ranges with 1,000 of them leased and
// gone quiet, and logs each query's plan.
//
//	go test -run '^$' -bench BenchmarkFindings -benchtime 20x ./store
func BenchmarkFindings(b *testing.B) {
	db := openTest(b, "", Options{Synchronous: "NORMAL"})
	ctx := context.Background()
	start := time.Now()
	if err := db.BulkGroups(ctx, "g.", 1000, 100, 1000); err != nil {
		b.Fatal(err)
	}
	// A thousand groups held by a node that went quiet, a range of each in work.
	if err := db.rawExec(`INSERT INTO nodes (id, name, token_hash, priority_min, priority_max, capacity, created_at) VALUES (1, 'w', x'00', -100, 100, 1000, 0)`); err != nil {
		b.Fatal(err)
	}
	if err := db.rawExec(`UPDATE ranges SET status = 'leased', node_id = 1, heartbeat_at = 0 WHERE start_id = 1`); err != nil {
		b.Fatal(err)
	}
	if err := db.rawExec(`UPDATE group_leases SET node_id = 1, fence = 1, leased_at = 0, heartbeat_at = 0`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded 1,000,000 ranges in %s", time.Since(start).Round(time.Millisecond))
	for _, c := range watchQueries {
		b.Logf("%s: %q", c.name, plan(b, db, c.q, c.args...))
	}
	now := time.UnixMilli(0).Add(time.Hour)
	bounds := FindingBounds{RangeHeartbeat: time.Minute, LeaseQuiet: time.Minute, NodeUnseen: time.Hour, SnapshotAge: time.Hour}
	b.Run("Findings", func(b *testing.B) {
		for b.Loop() {
			f, err := db.Findings(ctx, now, bounds)
			if err != nil || len(f) != 200 {
				b.Fatalf("findings: %d, %v", len(f), err)
			}
		}
	})
	b.Run("FindingCounts", func(b *testing.B) {
		for b.Loop() {
			if _, err := db.FindingCounts(ctx, now, bounds); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The backlog counts every planned range of a lane: its cost grows
	// with the backlog (here 999,000), not with the catalog.
	b.Run("Backlog", func(b *testing.B) {
		for b.Loop() {
			if _, err := db.Backlog(ctx, now); err != nil {
				b.Fatal(err)
			}
		}
	})
}
