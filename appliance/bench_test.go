package appliance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"leasehold/store"
)

// BenchmarkLease measures one lease cycle (lease, then release) in
// process at 1,000 and 1,000,000 groups. The lease choice is an index
// seek, so the two sizes should cost about the same. sync=NORMAL shows the
// CPU cost of the statements; sync=FULL adds one fsync per cycle (no other
// writer shares the commit here).
//
//	go test -run '^$' -bench BenchmarkLease -benchtime 3000x ./appliance
func BenchmarkLease(b *testing.B) {
	for _, sync := range []string{"NORMAL", "FULL"} {
		for _, groups := range []int64{1000, 1000000} {
			b.Run(fmt.Sprintf("sync=%s/groups=%d", sync, groups), func(b *testing.B) {
				app, err := Open(Config{DataDir: b.TempDir(), HistoryMinFreeBytes: 0, Store: store.Options{Synchronous: sync}})
				if err != nil {
					b.Fatal(err)
				}
				defer app.Close()
				ctx := context.Background()
				start := time.Now()
				if err := app.DB.BulkGroups(ctx, "bench.", groups, 1000, 2); err != nil {
					b.Fatal(err)
				}
				b.Logf("seeded %d groups in %s", groups, time.Since(start).Round(time.Millisecond))
				n, err := app.Coordinator.RegisterNode(ctx, NodeSpec{Name: "w"})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					g, err := app.Coordinator.Lease(ctx, n.ID)
					if err != nil || g == nil {
						b.Fatalf("lease: %v, %v", g, err)
					}
					if err := app.Coordinator.Release(ctx, n.ID, g.Group.ID, g.Fence); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
