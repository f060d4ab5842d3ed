package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestReportWatermarks is rule 11 in the store: marks are recorded and the
// tail planned up to high, at most reportPlanRanges (MaxPlanRanges) ranges a report (the rest
// at the next ones, never refused), and inconsistent marks change nothing.
func TestReportWatermarks(t *testing.T) {
	// Not parallel: it sets the package's plan size, which parallel tests read.
	defer func(n int64) { reportPlanRanges = n }(reportPlanRanges)
	reportPlanRanges = 4
	db := openTest(t, "", Options{})
	ctx := context.Background()
	size := int64(10)
	var id int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		g, _, err := tx.PutGroup("alt.far", GroupSpec{RangeSize: &size})
		id = g.ID
		return err
	}))
	report := func(low, high int64) (int64, error) {
		var n int64
		err := db.Write(ctx, func(tx *Tx) error {
			var err error
			n, err = tx.ReportWatermarks(id, low, high)
			return err
		})
		return n, err
	}
	far := 3*reportPlanRanges*size + 5
	for i, want := range []int64{4, 4, 4, 1, 0} {
		n, err := report(1, far)
		if err != nil || n != want {
			t.Fatalf("report %d of a far high: %d, %v; want %d planned", i+1, n, err, want)
		}
	}
	g, err := db.GroupByName(ctx, "alt.far")
	if err != nil || g.TailEnd != far || g.Low == nil || *g.Low != 1 || *g.High != far || g.MarksAt == nil {
		t.Fatalf("group: %+v, %v; want tail_end and high %d", g, err, far)
	}
	for _, c := range []struct{ low, high int64 }{{5, 3}, {-1, 10}, {0, -2}} {
		if _, err := report(c.low, c.high); !errors.Is(err, leasehold.ErrUnprocessable) {
			t.Errorf("marks %d..%d: %v, want unprocessable", c.low, c.high, err)
		}
	}
	if g2, _ := db.GroupByName(ctx, "alt.far"); *g2.Low != 1 || *g2.High != far {
		t.Errorf("refused marks changed the group: %d..%d", *g2.Low, *g2.High)
	}
}

// TestWatermarksSeek: the listing of oldest marks is one walk of
// groups_marks a kind (and a held group's lease by its key), never a scan
// and a sort of every group.
func TestWatermarksSeek(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	p := plan(t, db, qMarksOldest, leasehold.SourceKindNNTP, 10, 1, 0)
	// A held group's lease is looked up by its key, to leave out another
	// node's group: a seek per held group, never a scan or a sort.
	if len(p) == 0 || !strings.Contains(p[0], "USING INDEX groups_marks (kind=?)") || strings.Contains(strings.Join(p, "\n"), "SCAN") || strings.Contains(strings.Join(p, "\n"), "TEMP B-TREE") {
		t.Errorf("plan of the watermarks listing: %q, want one walk of groups_marks", p)
	}
}

// TestStartFromLow: a group created without a start is planned from the
// low mark its source first reports (ids below it have expired), once:
// later reports never move it, whatever their low, and the same report
// twice plans nothing more. A group given a start keeps it; so does one
// planned by hand before any report; a low at or below the start, or an
// empty group's marks, move nothing and plan nothing.
func TestStartFromLow(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	size, one := int64(10), int64(1)
	create := func(name string, start *int64) int64 {
		var id int64
		must(t, db.Write(ctx, func(tx *Tx) error {
			g, _, err := tx.PutGroup(name, GroupSpec{RangeSize: &size, Start: start})
			id = g.ID
			return err
		}))
		return id
	}
	report := func(id, low, high int64) int64 {
		t.Helper()
		var n int64
		must(t, db.Write(ctx, func(tx *Tx) error {
			var err error
			n, err = tx.ReportWatermarks(id, low, high)
			return err
		}))
		return n
	}
	check := func(name string, start, floor, tail, firstRange int64) {
		t.Helper()
		g, err := db.GroupByName(ctx, name)
		if err != nil || g.Start != start || g.HistoryFloor != floor || g.TailEnd != tail {
			t.Errorf("%s: start %d, floor %d, tail %d, %v; want %d, %d, %d", name, g.Start, g.HistoryFloor, g.TailEnd, err, start, floor, tail)
		}
		var lo int64
		err = db.r.QueryRow(`SELECT min(start_id) FROM ranges WHERE group_id = ?`, g.ID).Scan(&lo)
		if err != nil || lo != firstRange {
			t.Errorf("%s: the first range starts at %d, %v; want %d", name, lo, err, firstRange)
		}
	}

	t.Run("NoStart", func(t *testing.T) {
		id := create("alt.expired", nil)
		if n := report(id, 0, -1); n != 0 { // an empty group: nothing yet
			t.Fatalf("an empty group's marks planned %d ranges", n)
		}
		if n := report(id, 501, 545); n != 5 {
			t.Fatalf("the first marks 501..545 planned %d ranges, want 5 (501..545 in tens)", n)
		}
		check("alt.expired", 501, 501, 545, 501)
		if n := report(id, 501, 545); n != 0 {
			t.Errorf("the same report again planned %d ranges", n)
		}
		if n := report(id, 540, 560); n != 2 {
			t.Errorf("marks 540..560 planned %d ranges, want 2 (546..560)", n)
		}
		check("alt.expired", 501, 501, 560, 501)
	})
	t.Run("StartGiven", func(t *testing.T) {
		id := create("alt.given", &one)
		if n := report(id, 501, 545); n != 55 {
			t.Fatalf("marks 501..545 of a group given start 1 planned %d ranges, want 55 (1..545)", n)
		}
		check("alt.given", 1, 1, 545, 1)
	})
	t.Run("PlannedByHand", func(t *testing.T) {
		id := create("alt.byhand", nil)
		must(t, db.Write(ctx, func(tx *Tx) error { _, err := tx.PlanTail(id, 20); return err }))
		if n := report(id, 501, 545); n != 53 {
			t.Fatalf("marks 501..545 after a plan to 20 planned %d ranges, want 53 (21..545)", n)
		}
		check("alt.byhand", 1, 1, 545, 1)
	})
	t.Run("LowAtStart", func(t *testing.T) {
		id := create("alt.whole", nil)
		if n := report(id, 1, 25); n != 3 {
			t.Fatalf("marks 1..25 planned %d ranges, want 3", n)
		}
		check("alt.whole", 1, 1, 25, 1)
		if n := report(id, 900, 950); n != 93 {
			t.Errorf("a later low does not move a planned group: marks 900..950 planned %d ranges, want 93 (26..950)", n)
		}
		check("alt.whole", 1, 1, 950, 1)
	})
}

// TestReportWatermarksBacklog: reports, however often repeated, plan no
// more than tops the group's planned ranges up to reportBacklogRanges;
// ranges leased make room for as many more.
func TestReportWatermarksBacklog(t *testing.T) {
	// Not parallel: it sets the package's plan sizes, which parallel tests read.
	defer func(n, b int64) { reportPlanRanges, reportBacklogRanges = n, b }(reportPlanRanges, reportBacklogRanges)
	reportPlanRanges, reportBacklogRanges = 100, 5
	db := openTest(t, "", Options{})
	ctx := context.Background()
	size := int64(10)
	var id int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		g, _, err := tx.PutGroup("alt.flood", GroupSpec{RangeSize: &size})
		id = g.ID
		return err
	}))
	report := func() int64 {
		t.Helper()
		var n int64
		must(t, db.Write(ctx, func(tx *Tx) error {
			var err error
			n, err = tx.ReportWatermarks(id, 1, 1<<40)
			return err
		}))
		return n
	}
	for i, want := range []int64{5, 0, 0} {
		if n := report(); n != want {
			t.Fatalf("report %d of a far high: %d planned, want %d", i+1, n, want)
		}
	}
	must(t, db.rawExec(`UPDATE ranges SET status = 'leased' WHERE id IN (SELECT id FROM ranges WHERE group_id = ? ORDER BY start_id LIMIT 2)`, id))
	if n := report(); n != 2 {
		t.Fatalf("report after 2 ranges were leased: %d planned, want 2", n)
	}
	p := plan(t, db, qPlannedUpTo.sql, id, reportBacklogRanges)
	if !strings.Contains(strings.Join(p, " "), "SEARCH ranges USING COVERING INDEX") {
		t.Errorf("plan of the planned count: %q, want a seek of the group's planned ranges in an index", p)
	}
}
