package store

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestPlanNearInt64Max: planning up to the top of int64, or down from it,
// ends (no wrap-round loop holding the writer), and a request for too many
// ranges is refused however far apart its bounds are.
func TestPlanNearInt64Max(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	i64 := func(v int64) *int64 { return &v }
	plan := func(name string, spec GroupSpec, f func(tx *Tx, id int64) (int64, error)) (int64, error) {
		var n int64
		err := db.Write(ctx, func(tx *Tx) error {
			g, _, err := tx.PutGroup(name, spec)
			if err != nil {
				return err
			}
			n, err = f(tx, g.ID)
			return err
		})
		return n, err
	}
	for _, c := range []struct {
		name    string
		spec    GroupSpec
		f       func(tx *Tx, id int64) (int64, error)
		want    int64
		refused bool
	}{
		{"TailToMax", GroupSpec{RangeSize: i64(100), Start: i64(math.MaxInt64 - 250)},
			func(tx *Tx, id int64) (int64, error) { return tx.PlanTail(id, math.MaxInt64) }, 3, false},
		{"TailHuge", GroupSpec{RangeSize: i64(100)},
			func(tx *Tx, id int64) (int64, error) { return tx.PlanTail(id, math.MaxInt64) }, 0, true},
		{"HistoryFromMax", GroupSpec{RangeSize: i64(2), Start: i64(math.MaxInt64)},
			func(tx *Tx, id int64) (int64, error) { return tx.PlanHistory(id, math.MaxInt64-5) }, 3, false},
		{"HistoryHuge", GroupSpec{RangeSize: i64(2), Start: i64(math.MaxInt64)},
			func(tx *Tx, id int64) (int64, error) { return tx.PlanHistory(id, math.MinInt64) }, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := plan(c.name, c.spec, c.f)
			if c.refused {
				if !errors.Is(err, leasehold.ErrUnprocessable) {
					t.Fatalf("got %d, %v; want unprocessable", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %d, %v; want %d ranges", got, err, c.want)
			}
		})
	}
}
