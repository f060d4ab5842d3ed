package store

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestDashboardReads: the overview's totals, the groups table by prefix
// and page, and throughput from the outbox.
func TestDashboardReads(t *testing.T) {
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
