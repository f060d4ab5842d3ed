package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/proccpu"
)

// The catch-up of a million groups is bound by the catalog's writer
// folding the dump (fleet.BenchmarkRebuildGroups measures it end to end).
// These two benchmarks measure the writer alone, in time and CPU a group:
// the fold as Rebuild does it, and the floor any fold through this
// catalog's schema meets, the same rows copied by SQLite itself from a
// staged copy (INSERT … SELECT: no Go, no binding, no decoding), in
// writes of the same size. Run both at the same count:
//
//	LEASEHOLD_BENCH_FOLD_GROUPS=200000 go test -run '^$' -bench 'FoldPeerGroups|FoldFloor' -benchtime 1x ./store/

// foldBenchGroups is the groups a fold benchmark folds.
func foldBenchGroups(b *testing.B) int {
	if v := os.Getenv("LEASEHOLD_BENCH_FOLD_GROUPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("LEASEHOLD_BENCH_FOLD_GROUPS=%q is not a count of groups", v)
		}
		return n
	}
	return 100000
}

// foldBenchChunk and foldBenchWrite are a dump chunk's groups and the
// chunks a write, about what Rebuild folds at once.
const foldBenchChunk, foldBenchWrite = 400, 4

// BenchmarkFoldPeerGroups folds the groups (two planned tail ranges each)
// in chunks, four a write, as Rebuild does, the chunks decoded already.
func BenchmarkFoldPeerGroups(b *testing.B) {
	n := foldBenchGroups(b)
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	chunk := func(first int) []PeerGroupState {
		gs := make([]PeerGroupState, min(foldBenchChunk, n-first))
		for i := range gs {
			id := int64(first + i + 1)
			gs[i].Group = PeerGroup{Group: leasehold.Group{ID: id, Name: fmt.Sprintf("g.%d", first+i), Active: true, RangeSize: 100,
				Start: 1, TailEnd: 200, HistoryFloor: 1, Kind: "default", CreatedAt: at}}
			for j := range int64(2) {
				gs[i].Ranges = append(gs[i].Ranges, PeerRange{Range: leasehold.Range{ID: 2*id + j, GroupID: id, Start: 1 + 100*j,
					End: 100 + 100*j, Next: 1 + 100*j, Status: leasehold.StatusPlanned, Priority: leasehold.TailPriority, UpdatedAt: at}})
			}
		}
		return gs
	}
	var spent, cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		db := openTest(b, "", Options{})
		if _, err := db.PeerIndexes(context.Background(), true); err != nil {
			b.Fatal(err)
		}
		var writes [][][]PeerGroupState
		for first := 0; first < n; {
			var w [][]PeerGroupState
			for len(w) < foldBenchWrite && first < n {
				w = append(w, chunk(first))
				first += len(w[len(w)-1])
			}
			writes = append(writes, w)
		}
		b.StartTimer()
		start, cpu0 := time.Now(), proccpu.Used()
		for _, w := range writes {
			err := db.Write(context.Background(), func(tx *Tx) error {
				for _, c := range w {
					if err := tx.FoldPeerGroups("node-a", c, 5); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		spent, cpu = spent+time.Since(start), cpu+proccpu.Used()-cpu0
	}
	reportFold(b, n, spent, cpu)
}

// BenchmarkFoldFloor copies the same groups, ranges, leases and peer
// rows into the catalog with INSERT … SELECT from a staged database of
// the origin's rows, under the catalog's pragmas (WAL, synchronous=FULL,
// foreign keys), its indexes and its tally triggers.
func BenchmarkFoldFloor(b *testing.B) {
	n := foldBenchGroups(b)
	ctx := context.Background()
	var spent, cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		origin, err := Open(filepath.Join(dir, "origin.db"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := origin.BulkGroups(ctx, "g.", int64(n), 100, 2); err != nil {
			b.Fatal(err)
		}
		origin.Close()
		stage := filepath.Join(dir, "stage.db")
		floorExec(b, "file:"+filepath.Join(dir, "origin.db"), "ATTACH '"+stage+"' AS s",
			"CREATE TABLE s.g AS SELECT * FROM groups ORDER BY id",
			"CREATE TABLE s.r AS SELECT * FROM ranges ORDER BY group_id, start_id",
			"CREATE INDEX s.r_group ON r (group_id)")
		db := openTest(b, filepath.Join(dir, "catalog.db"), Options{})
		if _, err := db.PeerIndexes(ctx, true); err != nil {
			b.Fatal(err)
		}
		db.Close()
		c, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "catalog.db")+
			"?_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=temp_store(MEMORY)&_pragma=foreign_keys(1)")
		if err != nil {
			b.Fatal(err)
		}
		c.SetMaxOpenConns(1)
		if _, err := c.Exec("ATTACH '" + stage + "' AS s"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start, cpu0 := time.Now(), proccpu.Used()
		for lo := 1; lo <= n; lo += foldBenchChunk * foldBenchWrite {
			tx, err := c.Begin()
			if err != nil {
				b.Fatal(err)
			}
			for _, q := range floorCopies {
				if _, err := tx.Exec(q, lo, lo+foldBenchChunk*foldBenchWrite-1); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		spent, cpu = spent+time.Since(start), cpu+proccpu.Used()-cpu0
		c.Close()
	}
	reportFold(b, n, spent, cpu)
}

// floorCopies copy the staged groups ?1 to ?2 (by row) and their rows,
// as FoldPeerGroups writes a new group: owned by the peer, lease fence 0.
var floorCopies = []string{
	`INSERT INTO groups (id, name, priority, active, range_size, start_id, tail_end, history_floor, urgent_tail, urgent_hist,
		free_since, created_at, updated_at, owned, claim_rev, kind)
	 SELECT g.id, name, priority, active, range_size, start_id, tail_end, history_floor, urgent_tail, urgent_hist,
		free_since, created_at, updated_at, 0, claim_rev, kind FROM s.g g WHERE g.rowid BETWEEN ?1 AND ?2`,
	`INSERT INTO group_leases (group_id, fence) SELECT g.id, 0 FROM s.g g WHERE g.rowid BETWEEN ?1 AND ?2`,
	`INSERT INTO peer_groups (group_id, origin, updated_at) SELECT g.id, 'node-a', updated_at FROM s.g g WHERE g.rowid BETWEEN ?1 AND ?2`,
	`INSERT INTO ranges (group_id, start_id, end_id, next_id, status, priority, attempts, rule_version, headers, updated_at)
	 SELECT g.id, r.start_id, r.end_id, r.next_id, r.status, r.priority, r.attempts, r.rule_version, r.headers, r.updated_at
	 FROM s.g g JOIN s.r r ON r.group_id = g.id WHERE g.rowid BETWEEN ?1 AND ?2`,
}

// floorExec runs qs on one connection of dsn.
func floorExec(b *testing.B, dsn string, qs ...string) {
	c, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	for _, q := range qs {
		if _, err := c.Exec(q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
}

// reportFold reports a fold benchmark's figures a group.
func reportFold(b *testing.B, n int, spent, cpu time.Duration) {
	groups := float64(n * b.N)
	b.ReportMetric(groups/spent.Seconds(), "groups/s")
	b.ReportMetric(float64(spent.Microseconds())/groups, "µs/group")
	b.ReportMetric(float64(cpu.Microseconds())/groups, "cpu-µs/group")
}

// BenchmarkFoldStaged is the staged dump's way, as Rebuild takes it from
// an origin that stages: the same groups staged by the origin in files
// of stageBenchGroups (StageOwnGroups, its cost reported apart as
// stage-cpu-µs/group) and copied from each by FoldStaged,
// stageBenchBatch groups a write, into a catalog with peer sync's
// indexes.
func BenchmarkFoldStaged(b *testing.B) {
	n := foldBenchGroups(b)
	ctx := context.Background()
	var spent, cpu, staged time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		origin := openTest(b, filepath.Join(dir, "origin.db"), Options{})
		if err := origin.BulkGroups(ctx, "g.", int64(n), 100, 2); err != nil {
			b.Fatal(err)
		}
		db := openTest(b, filepath.Join(dir, "catalog.db"), Options{})
		if _, err := db.PeerIndexes(ctx, true); err != nil {
			b.Fatal(err)
		}
		var paths []string
		cpu0 := proccpu.Used()
		for after := int64(0); ; {
			path := filepath.Join(dir, fmt.Sprintf("stage-%d.db", len(paths)))
			part, err := origin.StageOwnGroups(ctx, path, after, stageBenchGroups, 4*stageBenchGroups)
			if err != nil {
				b.Fatal(err)
			}
			if part.Groups == 0 {
				break
			}
			paths, after = append(paths, path), part.Last
		}
		staged += proccpu.Used() - cpu0
		b.StartTimer()
		start, cpu0 := time.Now(), proccpu.Used()
		for _, path := range paths {
			info, err := CheckStage(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			s, err := db.AttachStage(ctx, path, info)
			if err != nil {
				b.Fatal(err)
			}
			for lo := int64(1); lo <= s.Groups(); lo += stageBenchBatch {
				err := db.Write(ctx, func(tx *Tx) error {
					return tx.FoldStaged(s, "node-a", lo, min(lo+stageBenchBatch-1, s.Groups()), 5)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Detach(ctx); err != nil {
				b.Fatal(err)
			}
		}
		spent, cpu = spent+time.Since(start), cpu+proccpu.Used()-cpu0
	}
	reportFold(b, n, spent, cpu)
	b.ReportMetric(float64(staged.Microseconds())/float64(n*b.N), "stage-cpu-µs/group")
}

// stageBenchGroups and stageBenchBatch are a staged file's groups and the
// groups a write folds from it.
var stageBenchGroups, stageBenchBatch = envInt("LEASEHOLD_BENCH_STAGE_GROUPS", 20000), int64(envInt("LEASEHOLD_BENCH_STAGE_BATCH", 4000))

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
