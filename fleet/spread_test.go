package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// TestFleetWorkSpread: six groups are planned at a, where no worker
// leases; a worker registered at b, whose leases find nothing of b's
// own, gets one of a's groups within 5 s of b seeing their ranges: b asks
// a to hand over groups in the worker's band, a hands over those no lease
// holds, and b claims and adopts them. Each group stays owned by one node:
// a no longer holds the claim of a group b granted.
func TestFleetWorkSpread(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ctx := context.Background()
	nodes, _, _ := fleetOf(t)
	a, b := nodes[0], nodes[1]
	rs := int64(10)
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("alt.spread.%d", i)
		names = append(names, name)
		// A loaded machine (the race detector) may leave a's life
		// unrenewed a moment: the write is refused then, and made again.
		poll.Eventually(t, 20*time.Second, "a makes and plans "+name, func() bool {
			if _, _, err := a.app.Coordinator.PutGroup(ctx, name, store.GroupSpec{RangeSize: &rs}); err != nil {
				if leasehold.KindOf(err) != leasehold.KindUnavailable {
					t.Fatal(err)
				}
				return false
			}
			_, err := a.app.Coordinator.PlanTail(ctx, name, 200)
			if err != nil && leasehold.KindOf(err) != leasehold.KindUnavailable {
				t.Fatal(err)
			}
			return err == nil
		})
	}
	poll.Eventually(t, 20*time.Second, "b sees a's planned ranges", func() bool {
		for _, name := range names {
			g, err := b.db.GroupByName(ctx, name)
			if err != nil {
				return false
			}
			r, err := b.db.Ranges(ctx, g.ID, "planned", 0, 100)
			if err != nil || len(r) != 20 {
				return false
			}
		}
		return true
	})
	start := time.Now()
	var g *leasehold.Grant
	// Asked every 100 ms, a worker's idle poll.
	if err := poll.Wait(30*time.Second, 100*time.Millisecond, func() error {
		var err error
		if g, err = b.app.Coordinator.Lease(ctx, b.worker); err != nil {
			t.Fatalf("lease at b: %v", err)
		}
		if g == nil {
			return errors.New("nothing leased")
		}
		return nil
	}); err != nil {
		t.Fatal("the worker at b got nothing within 30s while a had six groups planned")
	}
	took := time.Since(start)
	t.Logf("a worker at b got %s, planned at a, %v after b saw the work", g.Group.Name, took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the worker at b waited %v; want at most 5s", took)
	}
	if _, held := a.fleet.gate.Holds(g.Group.Name); held {
		t.Errorf("a still holds the claim of %s, granted at b", g.Group.Name)
	}
	if _, held := b.fleet.gate.Holds(g.Group.Name); !held {
		t.Errorf("b granted %s without holding its claim", g.Group.Name)
	}
}
