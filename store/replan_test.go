package store

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time { return c.now }

// TestTakeoverReplan checks rule 2 row by row: with a snapshot at S, the
// leased or done ranges ending at or after S and the planned ones resumed
// past S are planned again from max(start, S), and nothing else changes;
// without a snapshot only the leased range goes back, at its resume point.
func TestTakeoverReplan(t *testing.T) {
	t.Parallel()
	type row struct {
		start, end, next int64
		status           leasehold.RangeStatus
		attempts         int64
	}
	before := []row{
		{1, 1000, 1001, "done", 1},       // a: wholly below S
		{1001, 2000, 2001, "done", 1},    // b: done, covers S
		{2001, 3000, 2500, "leased", 1},  // c: in work past S
		{3001, 4000, 3500, "planned", 1}, // d: planned, resumed past S
		{4001, 5000, 4001, "planned", 0}, // e: untouched ahead
		{5001, 6000, 5200, "failed", 5},  // f: failed, the operator's
	}
	cases := []struct {
		name     string
		snapshot *int64
		want     []row
	}{
		{"WithSnapshot", ptr(int64(1501)), []row{
			{1, 1000, 1001, "done", 1},
			{1001, 2000, 1501, "planned", 0},
			{2001, 3000, 2001, "planned", 1},
			{3001, 4000, 3001, "planned", 1},
			{4001, 5000, 4001, "planned", 0},
			{5001, 6000, 5200, "failed", 5},
		}},
		{"WithoutSnapshot", nil, []row{
			{1, 1000, 1001, "done", 1},
			{1001, 2000, 2001, "done", 1},
			{2001, 3000, 2500, "planned", 1},
			{3001, 4000, 3500, "planned", 1},
			{4001, 5000, 4001, "planned", 0},
			{5001, 6000, 5200, "failed", 5},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			db := openTest(t, "", Options{NowFunc: clock.Now})
			ctx := context.Background()
			var a, b leasehold.Node
			var gid, other int64
			must(t, db.Write(ctx, func(tx *Tx) error {
				var err error
				if a, err = tx.CreateNode(NewNode{Name: "a", TokenHash: []byte("a"), PriorityMin: -10, PriorityMax: 10, Capacity: 4}); err != nil {
					return err
				}
				if b, err = tx.CreateNode(NewNode{Name: "b", TokenHash: []byte("b"), PriorityMin: -10, PriorityMax: 10, Capacity: 4}); err != nil {
					return err
				}
				for _, name := range []string{"g", "other"} {
					g, _, err := tx.PutGroup(name, GroupSpec{RangeSize: ptr(int64(1000))})
					if err != nil {
						return err
					}
					if _, err := tx.PlanTail(g.ID, 6000); err != nil {
						return err
					}
					if name == "g" {
						gid = g.ID
					} else {
						other = g.ID
					}
				}
				return nil
			}))
			// Lay the group's ranges out as the case says, held by a.
			for i, r := range before {
				exec(t, db, `UPDATE ranges SET next_id = ?, status = ?, attempts = ?, node_id = CASE WHEN ? = 'planned' THEN NULL ELSE ? END
					WHERE group_id = ? AND start_id = ?`, r.next, r.status, r.attempts, r.status, a.ID, gid, before[i].start)
			}
			exec(t, db, `UPDATE group_leases SET node_id = ?, fence = 3, leased_at = ?, heartbeat_at = ? WHERE group_id = ?`,
				a.ID, ms(clock.now), ms(clock.now), gid)
			exec(t, db, `UPDATE groups SET held = 1, urgent_tail = -1 WHERE id = ?`, gid)
			if tc.snapshot != nil {
				exec(t, db, `UPDATE group_leases SET snapshot_next = ?, snapshot_size = 1, snapshot_sha256 = 'x', snapshot_at = 0, snapshot_file = 1 WHERE group_id = ?`,
					*tc.snapshot, gid)
			}
			// b is the only taker, and "other" must not be chosen: hold it too.
			exec(t, db, `UPDATE group_leases SET node_id = ?, fence = 1, leased_at = ?, heartbeat_at = ? WHERE group_id = ?`,
				b.ID, ms(clock.now.Add(time.Hour)), ms(clock.now.Add(time.Hour)), other)
			exec(t, db, `UPDATE groups SET held = 1 WHERE id = ?`, other)
			otherBefore := rangesOf(t, db, other)

			clock.now = clock.now.Add(61 * time.Second)
			var grant *leasehold.Grant
			must(t, db.Write(ctx, func(tx *Tx) error {
				var err error
				grant, err = tx.LeaseGroup(LeaseRequest{NodeID: b.ID, TTL: time.Minute, MaxAttempts: 5})
				return err
			}))
			if grant == nil || grant.Group.ID != gid || !grant.Takeover || grant.Fence != 4 {
				t.Fatalf("grant = %+v, want a takeover of group %d at fence 4", grant, gid)
			}
			got := rangesOf(t, db, gid)
			for i, w := range tc.want {
				g := got[i]
				if g.Start != w.start || g.End != w.end || g.Next != w.next || g.Status != w.status || g.Attempts != w.attempts {
					t.Errorf("range %d..%d: got next %d %s attempts %d, want next %d %s attempts %d",
						w.start, w.end, g.Next, g.Status, g.Attempts, w.next, w.status, w.attempts)
				}
				if g.Status == "planned" && g.NodeID != nil {
					t.Errorf("range %d..%d is planned but still names node %d", w.start, w.end, *g.NodeID)
				}
			}
			otherAfter := rangesOf(t, db, other)
			for i := range otherBefore {
				if otherBefore[i] != otherAfter[i] {
					t.Errorf("another group's range changed: %+v -> %+v", otherBefore[i], otherAfter[i])
				}
			}
		})
	}
}

func rangesOf(t *testing.T, db *DB, gid int64) []rangeRow {
	t.Helper()
	rows, err := db.r.Query(`SELECT start_id, end_id, next_id, status, attempts, node_id FROM ranges WHERE group_id = ? ORDER BY start_id`, gid)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []rangeRow
	for rows.Next() {
		var r rangeRow
		var node *int64
		if err := rows.Scan(&r.Start, &r.End, &r.Next, &r.Status, &r.Attempts, &node); err != nil {
			t.Fatal(err)
		}
		r.NodeID = node
		out = append(out, r)
	}
	return out
}

type rangeRow struct {
	Start, End, Next int64
	Status           leasehold.RangeStatus
	Attempts         int64
	NodeID           *int64
}

func exec(t *testing.T, db *DB, q string, args ...any) {
	t.Helper()
	if err := db.rawExec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
