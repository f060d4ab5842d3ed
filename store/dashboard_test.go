package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestDashboardReads: the overview's totals, the groups table by prefix
// and page, and throughput from the outbox.
func TestDashboardReads(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	if err := db.BulkGroups(ctx, "alt.", 30, 100, 3); err != nil {
		t.Fatal(err)
	}
	if err := db.BulkGroups(ctx, "comp.", 5, 100, 2); err != nil {
		t.Fatal(err)
	}
	tot, err := db.Totals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Backlog(ctx, db.Now())
	if err != nil {
		t.Fatal(err)
	}
	tot.SetPlanned(b.Planned)
	if tot.Groups != 35 || tot.RangesTotal != 100 || tot.Ranges[leasehold.StatusPlanned] != 100 || tot.Ranges[leasehold.StatusDone] != 0 {
		t.Fatalf("totals %+v", tot)
	}
	rows, err := db.GroupRows(ctx, "comp.", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Name != "comp.0" || rows[0].Ranges[leasehold.StatusPlanned] != 2 {
		t.Fatalf("first page of comp.: %+v", rows)
	}
	rest, err := db.GroupRows(ctx, "comp.", rows[2].ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 2 || rest[1].Name != "comp.4" {
		t.Fatalf("second page of comp.: %+v", rest)
	}
	all, err := db.GroupRows(ctx, "", 0, 100)
	if err != nil || len(all) != 35 {
		t.Fatalf("all groups: %d, %v", len(all), err)
	}
	now := db.Now()
	if err := db.Write(ctx, func(tx *Tx) error {
		return tx.event(EventRangeFinished, 1, 1, 0, map[string]any{"headers": 250})
	}); err != nil {
		t.Fatal(err)
	}
	m, err := db.Throughput(ctx, now, 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 60 || m[59].Ranges != 1 || m[59].Headers != 250 || !m[59].At.Equal(now.Truncate(time.Minute)) {
		t.Fatalf("last minute %+v", m[len(m)-1])
	}
}

// BenchmarkGroupRows reads one page of the groups table at 100,000
// groups, from the start, deep in, and by a name prefix.
//
//	go test -run '^$' -bench BenchmarkGroupRows ./store
func BenchmarkGroupRows(b *testing.B) {
	db := openTest(b, "", Options{Synchronous: "NORMAL"})
	ctx := context.Background()
	if err := db.BulkGroups(ctx, "alt.binaries.", 100000, 1000, 10); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		prefix string
		after  int64
	}{{"First", "", 0}, {"Deep", "", 90000}, {"Prefix", "alt.binaries.9999", 0}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				rows, err := db.GroupRows(ctx, c.prefix, c.after, 50)
				if err != nil || len(rows) == 0 {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
	}
	b.Run("Totals", func(b *testing.B) {
		for b.Loop() {
			if _, err := db.Totals(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestGroupRowsIn: the groups table filtered by state lists exactly the
// groups in it (a failing group is held too), and a page of idle groups
// stops after IdleWindow ids with a next page even when it found none.
func TestGroupRowsIn(t *testing.T) {
	t.Parallel()
	w := newFailWorld(t, "a", "b", "c")
	ctx := context.Background()
	must(t, w.write(func(tx *Tx) error {
		for _, name := range []string{"e", "f"} { // caught up: nothing planned
			if _, _, err := tx.PutGroup(name, GroupSpec{RangeSize: ptr(int64(1000))}); err != nil {
				return err
			}
		}
		return nil
	}))
	a := w.lease()
	r := w.next(a.Group.ID, a.Fence)
	if _, err := w.fail(r.ID, a.Fence, "article 7 malformed", false); err != nil {
		t.Fatal(err)
	}
	b := w.lease()
	must(t, w.write(func(tx *Tx) error {
		return tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: b.Group.ID, NodeID: w.node, Fence: b.Fence}, failMaxAttempts, "gzip: invalid header")
	}))
	names := func(rows []GroupRow) string {
		var s []string
		for _, r := range rows {
			s = append(s, r.Name+":"+r.State)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct{ state, want string }{
		{RowsFailing, "a:held"},
		{RowsQuarantined, "b:quarantined"},
		{RowsHeld, "a:held"},
		{RowsIdle, "e:idle f:idle"},
	} {
		t.Run(c.state, func(t *testing.T) {
			rows, next, err := w.db.GroupRowsIn(ctx, c.state, 0, 50)
			if err != nil || names(rows) != c.want || next != 0 {
				t.Fatalf("%s: %q next %d, %v; want %q and no next page", c.state, names(rows), next, err, c.want)
			}
		})
	}
	if all, err := w.db.GroupRows(ctx, "", 0, 50); err != nil || names(all) != "a:held b:quarantined c:waiting e:idle f:idle" {
		t.Fatalf("all groups: %q, %v", names(all), err)
	}
	if _, _, err := w.db.GroupRowsIn(ctx, "weird", 0, 50); leasehold.KindOf(err) != leasehold.KindInvalid {
		t.Fatalf("an unknown filter: %v, want invalid", err)
	}

	// Idle groups are walked by id, at most IdleWindow a page: past
	// IdleWindow waiting groups the page is empty but has a next one.
	if err := w.db.BulkGroups(ctx, "busy.", IdleWindow+10, 100, 1); err != nil {
		t.Fatal(err)
	}
	fID := lastID(t, w.db)
	rows, next, err := w.db.GroupRowsIn(ctx, RowsIdle, fID-IdleWindow-10, 50)
	if err != nil || len(rows) != 0 || next != fID-10 {
		t.Fatalf("idle page over %d waiting groups: %q next %d, %v; want none and next %d", IdleWindow, names(rows), next, err, fID-10)
	}
	if rows, next, err = w.db.GroupRowsIn(ctx, RowsIdle, next, 50); err != nil || len(rows) != 0 || next != 0 {
		t.Fatalf("the last idle page: %q next %d, %v; want none and no next", names(rows), next, err)
	}
}

// lastID is the highest group id.
func lastID(t *testing.T, db *DB) int64 {
	t.Helper()
	var id int64
	if err := db.r.QueryRow(`SELECT max(id) FROM groups`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestGroupRowsUseIndexes: each filter of the groups table reads only the
// groups in its state, by an index that holds only them; only the idle
// page walks the primary key from its cursor, bounded by IdleWindow; the
// overview's totals read the tallies and the held leases' index. Sorting
// is allowed only where the set is small (quarantined groups, held
// leases, failed ranges).
func TestGroupRowsUseIndexes(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		q     string
		args  []any
		allow []string
	}{
		{"Quarantined", qRowsQuarantined, []any{0, 50}, []string{"SCAN g USING INDEX groups_quarantined", "USE TEMP B-TREE FOR ORDER BY"}},
		{"Held", qRowsHeld, []any{0, 50}, []string{"SCAN h USING INDEX group_leases_node", "USE TEMP B-TREE FOR ORDER BY"}},
		{"Failing", qRowsFailing, []any{0, 50}, []string{"SCAN ranges USING INDEX ranges_failed", "USE TEMP B-TREE FOR DISTINCT", "SCAN f", "USE TEMP B-TREE FOR ORDER BY"}},
		{"Idle", qRowsIdle, []any{0, 50, IdleWindow}, []string{"SEARCH groups USING INTEGER PRIMARY KEY (rowid>?)", "SCAN w"}},
		{"IdleWindowEnd", qIdleWindowEnd, []any{0, IdleWindow}, []string{"SEARCH groups USING INTEGER PRIMARY KEY (rowid>?)", "SCAN (subquery-1)"}},
		{"TotalsHeld", qTotalsHeld, nil, nil},
		{"Prefix", qGroupRowsPrefix, []any{"g.1", "g.1\x7f", 0, 50}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := plan(t, db, c.q, c.args...)
			for _, line := range p {
				if slices.Contains(c.allow, line) {
					continue
				}
				// A walk of ids from the cursor is a scan too.
				if strings.HasPrefix(line, "SCAN") || strings.Contains(line, "TEMP B-TREE") || strings.Contains(line, "rowid>?") {
					t.Errorf("plan scans or sorts: %q (whole plan %q)", line, p)
				}
			}
		})
	}
}
