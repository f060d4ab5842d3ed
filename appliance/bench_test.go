package appliance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/proccpu"
	"github.com/leasehold/leasehold/store"
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
				if err := app.db.BulkGroups(ctx, "bench.", groups, 1000, 2); err != nil {
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
					if err := app.Coordinator.Release(ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCycle is the HTTP benchmark's cycle without HTTP: 32 workers,
// each a registered node, doing lease → next → finish → release through
// the coordinator against a durable catalog (synchronous=FULL, group
// commit). One op is one cycle; the difference from the HTTP figure is
// what HTTP, JSON and authentication cost. sync=NORMAL (no fsync at
// commit, not durable) shows whether the writer waits on the disk or on
// its own CPU: where the two rates match, the disk is not the limit.
//
//	go test -run '^$' -bench BenchmarkCycle -benchtime 20000x ./appliance
func BenchmarkCycle(b *testing.B) {
	for _, c := range []struct {
		sync   string
		groups int64
	}{{"FULL", 1000}, {"NORMAL", 1000}, {"FULL", 100000}} {
		groups := c.groups
		b.Run(fmt.Sprintf("sync=%s/groups=%d", c.sync, groups), func(b *testing.B) {
			const workers = 32
			// As serve --nats off runs: no outbox, which only peer sync
			// reads (fleet' BenchmarkPeerSync measures it on).
			app, err := Open(Config{DataDir: b.TempDir(), HistoryMinFreeBytes: 0, Store: store.Options{Synchronous: c.sync, NoOutbox: true}})
			if err != nil {
				b.Fatal(err)
			}
			defer app.Close()
			ctx := context.Background()
			if err := app.db.BulkGroups(ctx, "bench.", groups, 100, 200); err != nil {
				b.Fatal(err)
			}
			var nodes []int64
			for i := range workers {
				n, err := app.Coordinator.RegisterNode(ctx, NodeSpec{Name: fmt.Sprintf("w%d", i)})
				if err != nil {
					b.Fatal(err)
				}
				nodes = append(nodes, n.ID)
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			before := app.db.Stats()
			b.ResetTimer()
			cpu0 := proccpu.Used()
			start := time.Now()
			var wg sync.WaitGroup
			for _, node := range nodes {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						g, err := app.Coordinator.Lease(ctx, node)
						if err != nil || g == nil {
							b.Errorf("lease: %v, %v", g, err)
							return
						}
						r, err := app.Coordinator.Next(ctx, leasehold.GroupHolder{NodeID: node, GroupID: g.Group.ID, Fence: g.Fence})
						if err != nil || r == nil {
							b.Errorf("next: %v, %v", r, err)
							return
						}
						if _, err := app.Coordinator.Finish(ctx, leasehold.RangeHolder{NodeID: node, RangeID: r.ID, Fence: g.Fence}, 100); err != nil {
							b.Errorf("finish: %v", err)
							return
						}
						if err := app.Coordinator.Release(ctx, leasehold.GroupHolder{NodeID: node, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
							b.Errorf("release: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			cpu := proccpu.Used() - cpu0
			b.StopTimer()
			after := app.db.Stats()
			commits := after.Commits - before.Commits
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
			b.ReportMetric(float64(commits)/elapsed.Seconds(), "commits/s")
			b.ReportMetric(float64(after.Writes-before.Writes)/float64(max(commits, 1)), "writes/commit")
			// CPU per cycle is steadier than the rate on a shared machine.
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/cycle")
		})
	}
}
