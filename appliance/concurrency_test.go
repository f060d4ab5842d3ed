package appliance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestConcurrentLeasing: 64 goroutines, each a node, lease, heartbeat and
// release 16 groups against one store. At no moment do two of them hold one
// group, and once a group is granted at a higher fence no call at an older
// fence succeeds.
func TestConcurrentLeasing(t *testing.T) {
	t.Parallel()
	const workers, groups, rounds = 64, 16, 8

	setup := func(t *testing.T) (*fixture, []leasehold.Node) {
		f := newFixture(t, Config{LeaseTTL: time.Minute})
		for i := range groups {
			n := fmt.Sprintf("g%02d", i)
			f.group(n, 0, 100)
			f.tail(n, 100000)
		}
		var nodes []leasehold.Node
		for i := range workers {
			nodes = append(nodes, f.node(fmt.Sprintf("w%02d", i), -100, 100, 1))
		}
		return f, nodes
	}

	t.Run("Exclusive", func(t *testing.T) {
		f, nodes := setup(t)
		var mu sync.Mutex
		holder := map[int64]int64{} // group -> node that believes it holds it
		var granted atomic.Int64
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					g, err := f.c.Lease(f.ctx, n.ID)
					if err != nil {
						t.Error(err)
						return
					}
					if g == nil {
						continue
					}
					granted.Add(1)
					mu.Lock()
					if other, ok := holder[g.Group.ID]; ok {
						t.Errorf("group %d granted to node %d while node %d holds it", g.Group.ID, n.ID, other)
					}
					holder[g.Group.ID] = n.ID
					mu.Unlock()
					if err := f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
						t.Errorf("heartbeat of a live lease: %v", err)
					}
					if r, err := f.c.Next(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil || r == nil {
						t.Errorf("next: %v, %v", r, err)
					}
					mu.Lock()
					delete(holder, g.Group.ID)
					mu.Unlock()
					if err := f.c.Release(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		if granted.Load() < groups {
			t.Fatalf("only %d leases granted", granted.Load())
		}
		t.Logf("%d leases granted; %d writes in %d commits", granted.Load(), f.app.db.Stats().Writes, f.app.db.Stats().Commits)
	})

	t.Run("FencedTakeovers", func(t *testing.T) {
		f, nodes := setup(t)
		type op struct {
			kind               string
			group, fence, node int64
			start, end         int64
			ok                 bool
		}
		var seq atomic.Int64
		var mu sync.Mutex
		var ops []op
		record := func(o op) {
			mu.Lock()
			ops = append(ops, o)
			mu.Unlock()
		}
		stop := make(chan struct{})
		var ticker sync.WaitGroup
		ticker.Add(1)
		go func() { // holders go quiet as the clock jumps past the TTL
			defer ticker.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
					f.clock.Advance(20 * time.Second)
				}
			}
		}()
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var held []*leasehold.Grant
				for range rounds {
					start := seq.Add(1)
					g, err := f.c.Lease(f.ctx, n.ID)
					if err != nil {
						t.Error(err)
						return
					}
					if g != nil {
						record(op{"lease", g.Group.ID, g.Fence, n.ID, start, seq.Add(1), true})
						held = append(held, g)
					}
					for _, h := range held {
						start := seq.Add(1)
						var err error
						if rand.IntN(4) == 0 {
							err = f.c.Release(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: h.Group.ID, Fence: h.Fence})
						} else {
							err = f.c.Heartbeat(f.ctx, leasehold.GroupHolder{NodeID: n.ID, GroupID: h.Group.ID, Fence: h.Fence})
						}
						if err != nil && !errors.Is(err, leasehold.ErrLeaseLost) {
							t.Error(err)
						}
						record(op{"holder", h.Group.ID, h.Fence, n.ID, start, seq.Add(1), err == nil})
					}
					held = held[:0]
				}
			}()
		}
		wg.Wait()
		close(stop)
		ticker.Wait()

		fenceOwner := map[[2]int64]int64{}
		var takeovers, refused int
		for _, o := range ops {
			if o.kind != "lease" {
				if !o.ok {
					refused++
				}
				continue
			}
			key := [2]int64{o.group, o.fence}
			if other, dup := fenceOwner[key]; dup {
				t.Fatalf("group %d fence %d granted to nodes %d and %d", o.group, o.fence, other, o.node)
			}
			fenceOwner[key] = o.node
		}
		for _, c := range ops {
			if c.kind != "holder" || !c.ok {
				continue
			}
			if fenceOwner[[2]int64{c.group, c.fence}] != c.node {
				t.Fatalf("node %d succeeded at group %d fence %d, granted to node %d", c.node, c.group, c.fence, fenceOwner[[2]int64{c.group, c.fence}])
			}
			for _, g := range ops {
				if g.kind == "lease" && g.group == c.group && g.fence > c.fence && g.end < c.start {
					t.Fatalf("node %d's call at fence %d succeeded after group %d was granted at fence %d", c.node, c.fence, c.group, g.fence)
				}
			}
		}
		for _, o := range ops {
			if o.kind == "lease" && o.fence > 1 {
				takeovers++
			}
		}
		t.Logf("%d operations, %d re-grants at a higher fence, %d stale calls refused", len(ops), takeovers, refused)
		if refused == 0 {
			t.Log("no stale call was refused in this run (the clock moved too slowly to matter)")
		}
	})
}
