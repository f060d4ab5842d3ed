package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// stagedOrigin is an origin catalog of n groups of three ranges each,
// with every part a group's state carries set on some of them: a holder
// and its lease times, a snapshot, a quarantine, water marks, another
// kind, a source error, done and failed ranges with a worker's error, a
// peer's group (never staged) and a group with no ranges.
func stagedOrigin(t *testing.T, n int64) *DB {
	t.Helper()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	must(t, db.BulkGroups(ctx, "g.", n, 100, 3))
	must(t, db.BulkGroups(ctx, "empty.", 1, 100, 0))
	must(t, db.rawExec(`INSERT INTO nodes (name, token_hash, priority_min, priority_max, capacity, created_at) VALUES ('w1', x'01', -10, 10, 4, 1)`))
	for _, q := range []string{
		`UPDATE group_leases SET node_id = (SELECT id FROM nodes WHERE name = 'w1'), fence = 7, leased_at = 1000, heartbeat_at = 2000,
			ranges_done = 5, headers = 500 WHERE group_id = 2`,
		`UPDATE group_leases SET leased_at = 3000, fence = 3 WHERE group_id = 3`, // no holder: its times are not carried
		`UPDATE group_leases SET snapshot_next = 51, snapshot_size = 4096, snapshot_sha256 = 'ab', snapshot_at = 4000 WHERE group_id = 4`,
		`UPDATE group_leases SET snapshot_next = 9 WHERE group_id = 5`,
		`UPDATE groups SET quarantine_error = 'bad window', quarantine_node = 'w1', quarantine_at = 5000 WHERE id = 6`,
		`UPDATE groups SET quarantine_at = 5001 WHERE id = 7`,
		`UPDATE groups SET marks_low = 3, marks_high = 900, marks_at = 6000 WHERE id = 8`,
		`UPDATE groups SET marks_low = 3, marks_at = 6000 WHERE id = 9`, // half marks are not carried
		`UPDATE groups SET kind = 'feed-2', priority = 4, active = 0, claim_rev = 12 WHERE id = 10`,
		`UPDATE groups SET source_error = 'no such group', source_error_node = 'w1', source_error_at = 7000, source_errors = 5 WHERE id = 11`,
		`UPDATE ranges SET status = 'done', next_id = end_id + 1, headers = 100, attempts = 1 WHERE group_id = 12 AND start_id = 1`,
		`UPDATE ranges SET status = 'failed', attempts = 5, last_error = 'timeout', last_error_at = 8000 WHERE group_id = 12 AND start_id = 101`,
		`UPDATE ranges SET status = 'leased', node_id = (SELECT id FROM nodes WHERE name = 'w1'), next_id = 150 WHERE group_id = 13 AND start_id = 101`,
		`UPDATE ranges SET priority = 7 WHERE group_id = 14`,
		`INSERT INTO peer_groups (group_id, origin, updated_at) VALUES (15, 'node-z', 1)`,
	} {
		must(t, db.rawExec(q))
	}
	return db
}

// foldAsJSON folds origin's own groups into db as a JSON dump does: read
// by OwnStates, through JSON, by FoldPeerGroups in pages.
func foldAsJSON(t *testing.T, origin, db *DB, page int) {
	t.Helper()
	ctx := context.Background()
	var after int64
	for {
		states, err := origin.OwnStates(ctx, after, page)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) == 0 {
			return
		}
		b, err := json.Marshal(states)
		if err != nil {
			t.Fatal(err)
		}
		var gs []PeerGroupState
		if err := json.Unmarshal(b, &gs); err != nil {
			t.Fatal(err)
		}
		must(t, db.Write(ctx, func(tx *Tx) error { return tx.FoldPeerGroups("node-a", gs, 5) }))
		after = states[len(states)-1].Group.ID
	}
}

// foldStaged folds origin's own groups into db from staged files of at
// most maxGroups groups each, batch groups a write.
func foldStaged(t *testing.T, origin, db *DB, maxGroups, maxRanges int, batch int64) int {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	var after int64
	files := 0
	for {
		path := filepath.Join(dir, fmt.Sprintf("part-%d.db", files))
		part, err := origin.StageOwnGroups(ctx, path, after, maxGroups, maxRanges)
		if err != nil {
			t.Fatal(err)
		}
		if part.Groups == 0 {
			return files
		}
		files++
		info, err := CheckStage(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Groups != part.Groups || info.Ranges != part.Ranges || info.Catalog != origin.CatalogID() {
			t.Fatalf("staged %+v, checked %+v", part, info)
		}
		s, err := db.AttachStage(ctx, path, info)
		if err != nil {
			t.Fatal(err)
		}
		for lo := int64(1); lo <= s.Groups(); lo += batch {
			must(t, db.Write(ctx, func(tx *Tx) error { return tx.FoldStaged(s, "node-a", lo, min(lo+batch-1, s.Groups()), 5) }))
		}
		must(t, s.Detach(ctx))
		after = part.Last
	}
}

// peerPart is every row db holds of its peers' groups, by name, in the
// columns a fold writes (ids are each catalog's own).
func peerPart(t *testing.T, db *DB) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT g.name, g.priority, g.active, g.range_size, g.start_id, g.tail_end, g.history_floor, g.urgent_tail, g.urgent_hist, g.held,
			g.free_since, g.created_at, g.updated_at, g.owned, g.claim_rev, g.quarantine_error, g.quarantine_node, g.quarantine_at,
			g.marks_low, g.marks_high, g.marks_at, g.kind, g.source_error, g.source_error_node, g.source_error_at, g.source_errors,
			l.node_id, l.fence, l.leased_at, l.snapshot_next, p.origin, p.holder, p.fence, p.leased_at, p.heartbeat_at, p.snapshot_next,
			p.snapshot_size, p.snapshot_sha256, p.snapshot_at, p.ranges_done, p.headers, p.updated_at
		 FROM groups g JOIN group_leases l ON l.group_id = g.id LEFT JOIN peer_groups p ON p.group_id = g.id ORDER BY g.name`,
		`SELECT g.name, r.start_id, r.end_id, r.next_id, r.status, r.priority, r.node_id, r.attempts, r.rule_version, r.headers,
			r.updated_at, r.last_error, r.last_error_at FROM ranges r JOIN groups g ON g.id = r.group_id ORDER BY g.name, r.start_id`,
		`SELECT kind, state, n FROM tallies ORDER BY 1, 2`,
	} {
		rows, err := db.r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%v", vals))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestStagedFoldAsJSON: a part folded from staged files is the part
// folded from the JSON dump, row for row, the groups new here copied by
// SQLite and, folded again, the same groups known here taken one at a
// time under the claim rule; a file is cut by its ranges as well as by
// its groups.
func TestStagedFoldAsJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { return at }
	origin := stagedOrigin(t, 40)
	viaJSON := openTest(t, "", Options{NowFunc: clock})
	viaStage := openTest(t, "", Options{NowFunc: clock})
	// A catalog with groups of its own already: the ids differ.
	must(t, viaStage.BulkGroups(context.Background(), "mine.", 3, 100, 1))
	must(t, viaJSON.BulkGroups(context.Background(), "mine.", 3, 100, 1))
	foldAsJSON(t, origin, viaJSON, 7)
	files := foldStaged(t, origin, viaStage, 16, 1000, 5)
	if files != 3 {
		t.Fatalf("%d staged files of 41 groups at most 16 a file, want 3", files)
	}
	want, got := peerPart(t, viaJSON), peerPart(t, viaStage)
	if len(want) < 41 {
		t.Fatalf("the JSON fold left %d rows", len(want))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("staged fold differs from the JSON fold:\n%s", diffRows(want, got))
	}
	stagedTallied(t, viaStage, "after the staged fold")
	// Folded again: every group is known, under the same claim.
	foldAsJSON(t, origin, viaJSON, 7)
	if n := foldStaged(t, origin, viaStage, 1000, 30, 8); n != 4 {
		t.Fatalf("%d staged files of 122 ranges at most 30 a file, want 4", n)
	}
	want, got = peerPart(t, viaJSON), peerPart(t, viaStage)
	if !slices.Equal(got, want) {
		t.Fatalf("staged fold again differs from the JSON fold again:\n%s", diffRows(want, got))
	}
	stagedTallied(t, viaStage, "after the staged fold again")
}

// stagedTallied fails t unless db's tallies are its rows' counts: the
// staged fold counts what it copies itself, its triggers set aside.
func stagedTallied(t *testing.T, db *DB, when string) {
	t.Helper()
	wantRanges, wantGroups := trueCounts(t, db)
	ranges, groups := talliedCounts(t, db)
	if !maps.Equal(ranges, wantRanges) || !maps.Equal(groups, wantGroups) {
		t.Fatalf("%s: tallies ranges %v groups %v, the rows' counts %v and %v", when, ranges, groups, wantRanges, wantGroups)
	}
	var triggers int
	must(t, db.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name IN ('groups_tally_insert', 'ranges_tally_insert')`).Scan(&triggers))
	if triggers != 2 {
		t.Fatalf("%s: %d of the two tally triggers the staged fold sets aside are in the catalog", when, triggers)
	}
}

// diffRows names the first rows that differ.
func diffRows(want, got []string) string {
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			return fmt.Sprintf("row %d:\nwant %s\ngot  %s", i, w, g)
		}
	}
	return "the same"
}

// TestCheckStage: a staged file of a newer format is refused as such, a
// file that is not a staged dump or has a bad row is refused, and the
// catalog is not touched by either.
func TestCheckStage(t *testing.T) {
	ctx := context.Background()
	origin := stagedOrigin(t, 16)
	dir := t.TempDir()
	stage := func(name string, qs ...string) string {
		path := filepath.Join(dir, name)
		if _, err := origin.StageOwnGroups(ctx, path, 0, 100, 1000); err != nil {
			t.Fatal(err)
		}
		c, err := sql.Open("sqlite", stageURI(path))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, q := range qs {
			if _, err := c.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	if _, err := CheckStage(ctx, stage("good.db")); err != nil {
		t.Fatalf("a good staged file: %v", err)
	}
	_, err := CheckStage(ctx, stage("newer.db", fmt.Sprintf(`PRAGMA user_version = %d`, StageFormat+1)))
	if !errors.Is(err, leasehold.ErrUnprocessable) {
		t.Fatalf("a staged file of a newer format: %v, want unprocessable", err)
	}
	for name, q := range map[string]string{
		"foreign":   `PRAGMA application_id = 7`,
		"badname":   `UPDATE dump_groups SET name = '-x' WHERE seq = 1`,
		"badkind":   `UPDATE dump_groups SET kind = 'A B' WHERE seq = 1`,
		"badrange":  `UPDATE dump_ranges SET next_id = end_id + 5 WHERE group_seq = 1 AND start_id = 1`,
		"badstatus": `UPDATE dump_ranges SET status = 'gone' WHERE group_seq = 2`,
		"orphan":    `UPDATE dump_ranges SET group_seq = 99 WHERE group_seq = 2`,
		"count":     `DELETE FROM dump_groups WHERE seq = 3`,
	} {
		if _, err := CheckStage(ctx, stage(name+".db", q)); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}
