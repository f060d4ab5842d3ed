package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// trueCounts counts ranges by status and lane and groups by state and
// ownership from the rows themselves, the way the tallies are meant to
// be kept. A group's open work is read from its ranges, not from its
// urgent_* key, so the comparison does not trust what the writes keep.
func trueCounts(t *testing.T, db *DB) (ranges, groups map[string]int64) {
	t.Helper()
	count := func(q string) map[string]int64 {
		out := map[string]int64{}
		rows, err := db.r.Query(q)
		must(t, err)
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int64
			must(t, rows.Scan(&k, &n))
			out[k] = n
		}
		must(t, rows.Err())
		return out
	}
	ranges = count(`SELECT status || iif(priority < 0, '/tail', '/history'), count(*) FROM ranges GROUP BY 1`)
	groups = count(`SELECT CASE WHEN g.quarantine_at IS NOT NULL THEN 'quarantined'
			WHEN l.node_id IS NOT NULL THEN 'held' WHEN g.active = 0 THEN 'inactive'
			WHEN EXISTS (SELECT 1 FROM ranges r WHERE r.group_id = g.id AND r.status IN ('planned', 'leased')) THEN 'waiting'
			ELSE 'idle' END || iif(g.owned = 1, '/owned', '/unowned'), count(*)
		FROM groups g JOIN group_leases l ON l.group_id = g.id GROUP BY 1`)
	// The headers indexed on the lease rows (version 10), kept with the
	// groups' counts.
	var headers int64
	must(t, db.r.QueryRow(`SELECT coalesce(sum(headers), 0) FROM group_leases`).Scan(&headers))
	if headers != 0 {
		groups["headers"] = headers
	}
	return ranges, groups
}

// talliedCounts reads the tallies in trueCounts' keys, leaving out zeros.
func talliedCounts(t *testing.T, db *DB) (ranges, groups map[string]int64) {
	t.Helper()
	tl, err := db.Tallies(context.Background())
	must(t, err)
	ranges, groups = map[string]int64{}, map[string]int64{}
	rows, err := db.r.Query(`SELECT kind, state, n FROM tallies WHERE n != 0`)
	must(t, err)
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n int64
		must(t, rows.Scan(&kind, &state, &n))
		switch kind {
		case "ranges":
			ranges[state] = n
		case "headers":
			groups["headers"] = n
		default:
			groups[state] = n
		}
	}
	// Tallies (the read the metrics use) sums the same rows.
	var sum int64
	for _, n := range ranges {
		sum += n
	}
	var read int64
	for _, n := range tl.Ranges {
		read += n
	}
	if read != sum || tl.PlannedTail != ranges["planned/tail"] || tl.PlannedHist != ranges["planned/history"] {
		t.Fatalf("Tallies read %+v, the table holds %v", tl, ranges)
	}
	return ranges, groups
}

// TestTallies: after a random mix of the catalog's writes (planning,
// leases, next, finish, fail with and without retry, release, quarantine
// and its lift, dropped windows, retries, takeovers past the TTL, pauses,
// node deletion, disowning and owning again, groups folded from a peer,
// and writes that fail halfway and are rolled back), the tallies equal
// count(*) over the rows. Each seed is one run; a failure names it.
func TestTallies(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("Seed%d", seed), func(t *testing.T) { tallyRun(t, seed, 400) })
	}
}

func tallyRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 17))
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db := openTest(t, "", Options{NowFunc: clock.Now})
	ctx := context.Background()
	const maxAttempts = 3
	type grant struct{ node, group, fence, rangeID int64 }
	var nodes []int64
	var groups []string
	var grants []grant
	var peerGroups, made int
	write := func(fn func(tx *Tx) error) error { return db.Write(ctx, fn) }
	addNode := func() {
		must(t, write(func(tx *Tx) error {
			name := fmt.Sprintf("w%d", made)
			made++
			n, err := tx.CreateNode(NewNode{Name: name, TokenHash: []byte(name), PriorityMin: -10, PriorityMax: 10, Capacity: 3})
			nodes = append(nodes, n.ID)
			return err
		}))
	}
	addGroup := func() {
		name := fmt.Sprintf("g%d", len(groups))
		must(t, write(func(tx *Tx) error {
			g, _, err := tx.PutGroup(name, GroupSpec{RangeSize: ptr(int64(100)), Start: ptr(int64(1001))})
			if err != nil {
				return err
			}
			_, err = tx.PlanTail(g.ID, 1000+int64(rng.IntN(5))*100)
			return err
		}))
		groups = append(groups, name)
	}
	for range 3 {
		addNode()
	}
	for range 5 {
		addGroup()
	}
	groupID := func(name string) int64 {
		g, err := db.GroupByName(ctx, name)
		must(t, err)
		return g.ID
	}
	pickGrant := func() (int, grant, bool) {
		if len(grants) == 0 {
			return 0, grant{}, false
		}
		i := rng.IntN(len(grants))
		return i, grants[i], true
	}
	ops := []struct {
		name string
		do   func() error
	}{
		{"Lease", func() error {
			node := nodes[rng.IntN(len(nodes))]
			return write(func(tx *Tx) error {
				g, err := tx.LeaseGroup(LeaseRequest{NodeID: node, TTL: time.Minute, MaxAttempts: maxAttempts})
				if err == nil && g != nil {
					grants = append(grants, grant{node: node, group: g.Group.ID, fence: g.Fence})
				}
				return err
			})
		}},
		{"Next", func() error {
			i, g, ok := pickGrant()
			if !ok {
				return nil
			}
			return write(func(tx *Tx) error {
				r, err := tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: g.group, NodeID: g.node, Fence: g.fence}, BandMin: -10, BandMax: 10, MaxAttempts: maxAttempts})
				if err == nil && r != nil {
					grants[i].rangeID = r.ID
				}
				return err
			})
		}},
		{"Finish", func() error {
			_, g, ok := pickGrant()
			if !ok || g.rangeID == 0 {
				return nil
			}
			return write(func(tx *Tx) error {
				_, err := tx.Finish(leasehold.RangeHolder{RangeID: g.rangeID, NodeID: g.node, Fence: g.fence}, 10)
				return err
			})
		}},
		{"FailRetry", func() error {
			_, g, ok := pickGrant()
			if !ok || g.rangeID == 0 {
				return nil
			}
			return write(func(tx *Tx) error {
				_, err := tx.FailRange(leasehold.RangeHolder{RangeID: g.rangeID, NodeID: g.node, Fence: g.fence}, "no route to host", true, maxAttempts)
				return err
			})
		}},
		{"FailNoRetry", func() error {
			_, g, ok := pickGrant()
			if !ok || g.rangeID == 0 {
				return nil
			}
			return write(func(tx *Tx) error {
				_, err := tx.FailRange(leasehold.RangeHolder{RangeID: g.rangeID, NodeID: g.node, Fence: g.fence}, "article 7 malformed", false, maxAttempts)
				return err
			})
		}},
		{"Release", func() error {
			_, g, ok := pickGrant()
			if !ok {
				return nil
			}
			return write(func(tx *Tx) error {
				return tx.Release(leasehold.GroupHolder{GroupID: g.group, NodeID: g.node, Fence: g.fence}, maxAttempts)
			})
		}},
		{"Quarantine", func() error {
			_, g, ok := pickGrant()
			if !ok {
				return nil
			}
			return write(func(tx *Tx) error {
				return tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: g.group, NodeID: g.node, Fence: g.fence}, maxAttempts, "load window: invalid character 'h'")
			})
		}},
		{"LiftQuarantine", func() error {
			name := groups[rng.IntN(len(groups))]
			return write(func(tx *Tx) error { _, err := tx.LiftQuarantine(name); return err })
		}},
		{"DropSnapshot", func() error {
			name := groups[rng.IntN(len(groups))]
			return write(func(tx *Tx) error { _, _, err := tx.DropSnapshot(name, maxAttempts); return err })
		}},
		{"SetSnapshot", func() error {
			_, g, ok := pickGrant()
			if !ok {
				return nil
			}
			return write(func(tx *Tx) error {
				_, err := tx.SetSnapshot(g.group, g.node, g.fence, leasehold.Snapshot{Next: 1001 + int64(rng.IntN(400)), Size: 1, SHA256: "x", File: rng.Int64N(1 << 40)})
				return err
			})
		}},
		{"Retry", func() error {
			var id int64
			if err := db.r.QueryRow(`SELECT id FROM ranges WHERE status = 'failed' ORDER BY random() LIMIT 1`).Scan(&id); err != nil {
				return nil
			}
			return write(func(tx *Tx) error { _, err := tx.Retry(id); return err })
		}},
		{"PlanTail", func() error {
			id := groupID(groups[rng.IntN(len(groups))])
			return write(func(tx *Tx) error { _, err := tx.PlanTail(id, 1000+int64(rng.IntN(12))*100); return err })
		}},
		{"PlanHistory", func() error {
			id := groupID(groups[rng.IntN(len(groups))])
			return write(func(tx *Tx) error { _, err := tx.PlanHistory(id, 1+int64(rng.IntN(1000))); return err })
		}},
		{"NewGroup", func() error { addGroup(); return nil }},
		{"Deactivate", func() error {
			name := groups[rng.IntN(len(groups))]
			return write(func(tx *Tx) error {
				_, _, err := tx.PutGroup(name, GroupSpec{Active: ptr(rng.IntN(2) == 0)})
				return err
			})
		}},
		{"Takeover", func() error {
			clock.now = clock.now.Add(2 * time.Minute)
			return nil
		}},
		{"Pause", func() error {
			node := nodes[rng.IntN(len(nodes))]
			return write(func(tx *Tx) error { _, err := tx.SetPaused(node, rng.IntN(3) == 0, "ops"); return err })
		}},
		{"DeleteNode", func() error {
			i := rng.IntN(len(nodes))
			node := nodes[i]
			err := write(func(tx *Tx) error { return tx.DeleteNode(node, maxAttempts, true) })
			nodes = append(nodes[:i], nodes[i+1:]...)
			addNode()
			return err
		}},
		{"Disown", func() error {
			name := groups[rng.IntN(len(groups))]
			return write(func(tx *Tx) error { return tx.DisownGroup(name, maxAttempts) })
		}},
		{"Own", func() error {
			name := groups[rng.IntN(len(groups))]
			return write(func(tx *Tx) error { return tx.OwnGroup(name, uint64(rng.IntN(50)+1), maxAttempts) })
		}},
		{"FoldFromPeer", func() error {
			// A peer's group, new or folded again with its ranges moved on.
			name := fmt.Sprintf("peer%d", rng.IntN(peerGroups+1))
			if name == fmt.Sprintf("peer%d", peerGroups) {
				peerGroups++
			}
			pg := foldGroup(name, uint64(rng.IntN(50)+1))
			rs := foldRanges()
			for i := range rs {
				rs[i].Status = leasehold.RangeStatuses[rng.IntN(4)]
				rs[i].Next = rs[i].Start
				if rs[i].Status == leasehold.StatusDone {
					rs[i].Next = rs[i].End + 1
				}
				if rng.IntN(3) == 0 {
					rs[i].Priority = int64(rng.IntN(3))
				}
			}
			if rng.IntN(4) == 0 {
				at := clock.now
				pg.Quarantine = &leasehold.Quarantine{Error: "window", Node: "wa", At: at}
			}
			return write(func(tx *Tx) error {
				id, ok, err := tx.FoldGroup("peer-a", pg, maxAttempts)
				if err != nil || !ok {
					return err
				}
				return tx.FoldRanges(id, rs)
			})
		}},
		{"RolledBack", func() error {
			// A write that changes ranges and groups, then fails: its
			// savepoint is rolled back, and the tallies with it.
			_, g, ok := pickGrant()
			if !ok {
				return nil
			}
			err := write(func(tx *Tx) error {
				if g.rangeID != 0 {
					tx.Finish(leasehold.RangeHolder{RangeID: g.rangeID, NodeID: g.node, Fence: g.fence}, 1)
				}
				tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: g.group, NodeID: g.node, Fence: g.fence}, maxAttempts, "boom")
				return leasehold.Errorf(leasehold.KindConflict, "planted")
			})
			if leasehold.KindOf(err) != leasehold.KindConflict {
				return fmt.Errorf("the failing write: %v", err)
			}
			return nil
		}},
	}
	for step := range steps {
		op := ops[rng.IntN(len(ops))]
		if err := op.do(); err != nil && leasehold.KindOf(err) == leasehold.KindInternal && !errors.Is(err, context.Canceled) {
			t.Fatalf("seed %d step %d %s: %v", seed, step, op.name, err)
		}
		if step%20 == 19 || step == steps-1 {
			wantR, wantG := trueCounts(t, db)
			gotR, gotG := talliedCounts(t, db)
			if !maps.Equal(gotR, wantR) || !maps.Equal(gotG, wantG) {
				t.Fatalf("seed %d after step %d (%s): tallies differ from count(*)\nranges: got %v\n        want %v\ngroups: got %v\n        want %v",
					seed, step, op.name, gotR, wantR, gotG, wantG)
			}
		}
	}
	// The run reached the states it is meant to cover.
	r, g := trueCounts(t, db)
	t.Logf("seed %d: ranges %v, groups %v", seed, r, g)
}

// TestMigrationSeedsTallies: a catalog at version 6 with ranges of every
// status and lane and groups of every state is migrated with tallies that
// equal count(*), and they are kept from there on.
func TestMigrationSeedsTallies(t *testing.T) {
	t.Parallel()
	inserts := []string{
		`INSERT INTO nodes (id, name, token_hash, priority_min, priority_max, capacity, created_at) VALUES (1, 'w1', x'01', -10, 10, 4, 0)`,
	}
	// g1 held, g2 quarantined, g3 inactive, g4 waiting, g5 idle, g6 a
	// peer's (unowned) waiting.
	for id, g := range map[int]string{
		1: `1, 1, 1, -1, NULL`, 2: `0, 1, 1, -1, 5`, 3: `0, 0, 1, NULL, NULL`, 4: `0, 1, 1, -1, NULL`, 5: `0, 1, 1, NULL, NULL`, 6: `0, 1, 0, 0, NULL`,
	} {
		inserts = append(inserts,
			fmt.Sprintf(`INSERT INTO groups (id, name, range_size, start_id, tail_end, history_floor, free_since, created_at, updated_at, held, active, owned, urgent_tail, quarantine_at)
				VALUES (%d, 'g%d', 10, 1, 100, 1, 0, 0, 0, %s)`, id, id, g),
			fmt.Sprintf(`INSERT INTO group_leases (group_id, node_id) VALUES (%d, %s)`, id, map[bool]string{true: "1", false: "NULL"}[id == 1]))
	}
	for i, r := range []string{`'leased', -1`, `'planned', -1`, `'planned', -1`, `'planned', 0`, `'done', -1`, `'done', 3`, `'failed', -1`, `'failed', 2`, `'planned', -1`, `'leased', 1`} {
		group := []int{1, 1, 2, 6, 5, 5, 3, 3, 4, 1}[i]
		inserts = append(inserts, fmt.Sprintf(`INSERT INTO ranges (group_id, start_id, end_id, next_id, status, priority, updated_at) VALUES (%d, %d, %d, %d, %s, 0)`,
			group, i*10+1, i*10+10, i*10+1, r))
	}
	db := openTest(t, migrateFrom(t, "testdata/schema-v6.sql", 6, inserts...), Options{})
	wantR, wantG := trueCounts(t, db)
	gotR, gotG := talliedCounts(t, db)
	if !maps.Equal(gotR, wantR) || !maps.Equal(gotG, wantG) {
		t.Fatalf("tallies after migration differ from count(*)\nranges: got %v\n        want %v\ngroups: got %v\n        want %v", gotR, wantR, gotG, wantG)
	}
	if len(wantR) != 8 || len(wantG) != 6 {
		t.Fatalf("the catalog does not cover every status and state: %v %v", wantR, wantG)
	}
	// Kept from there on: a failed range retried.
	must(t, db.Write(context.Background(), func(tx *Tx) error { _, err := tx.Retry(7); return err }))
	wantR, _ = trueCounts(t, db)
	if gotR, _ = talliedCounts(t, db); !maps.Equal(gotR, wantR) {
		t.Fatalf("tallies after a retry: got %v, want %v", gotR, wantR)
	}
}
