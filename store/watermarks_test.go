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
// groups_marks, never a scan and a sort of every group.
func TestWatermarksSeek(t *testing.T) {
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	p := plan(t, db, qMarksOldest, 10)
	if len(p) != 1 || !strings.Contains(p[0], "USING INDEX groups_marks") {
		t.Errorf("plan of the watermarks listing: %q, want one walk of groups_marks", p)
	}
}
