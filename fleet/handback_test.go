package fleet

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// TestFleetHandbackResumesKept: the fault run's removal, as it failed.
// Node a hands its group to c while a's fold is behind (a partition's
// heal), so a's catalog still has the group as a's own at a's window; c
// resumes from a's window and goes on, each of its windows answered
// kept; c is then lost. a, taking the group back (an admin write on it,
// as the harness's tail planning made), must resume from c's newest
// window, not its own older one: until it has folded c's part it takes
// nothing, and once it has, its worker resumes where c's left off.
func TestFleetHandbackResumesKept(t *testing.T) {
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	a, c := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-c")
	poll.Eventually(t, 20*time.Second, "a and c see each other up", func() bool {
		return a.fleet.snapshots.peers() && c.fleet.snapshots.peers()
	})
	const group = "alt.handback"
	rs := int64(10)
	if _, _, err := a.app.Coordinator.PutGroup(ctx, group, store.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.app.Coordinator.PlanTail(ctx, group, handbackIDs); err != nil {
		t.Fatal(err)
	}
	if resumed, next := handbackWork(t, ctx, a, group, 2, true); resumed != 1 || next != 21 {
		t.Fatalf("a resumed at %d and left the window at %d, want 1 and 21", resumed, next)
	}
	poll.Eventually(t, 20*time.Second, "c folds a's group", func() bool {
		origin, err := c.db.PeerOwner(ctx, group)
		return err == nil && origin == a.name
	})

	// a's fold stops here (its consumer paused, as a partition would
	// leave it): it does not see c's part of the group.
	fold := "fold_" + consumerName(a.name)
	if _, err := a.fleet.js.PauseConsumer(ctx, StreamName, fold, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "a hands the group to c", func() bool {
		return a.fleet.gate.through().own.Yield(ctx, group, c.name) == nil
	})
	resumed, kept := handbackWork(t, ctx, c, group, 2, true)
	if resumed != 21 || kept != 41 {
		t.Fatalf("c resumed at %d and left the window at %d, want 21 and 41", resumed, kept)
	}
	c.stop() // its claim is not released: its life lapses a claim TTL later

	// An admin write at a on what its catalog says is its own group
	// claims it once c's life has lapsed. Without c's part folded it must
	// not be owned: c's window, newer than a's, was answered kept.
	var behind error
	poll.Eventually(t, 10*fleetTTL, "a's admin write once c's life lapsed", func() bool {
		_, err := a.app.Coordinator.PlanTail(ctx, group, handbackIDs+10)
		switch {
		case err == nil:
			return true
		case errors.Is(err, ErrBehind):
			behind = err
			return true
		}
		return false
	})
	if behind == nil {
		g, err := a.db.GroupByName(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := a.db.Snapshot(ctx, g.ID)
		if err != nil || snap == nil {
			t.Fatalf("a's window: %v, %v", snap, err)
		}
		t.Fatalf("a took the group back at its own window (next %d) with c's part not folded; c was answered kept for next %d", snap.Next, kept)
	}
	t.Logf("a, behind, refused the write: %v", behind)

	// Caught up, a takes the group over and resumes from c's window.
	if _, err := a.fleet.js.ResumeConsumer(ctx, StreamName, fold); err != nil {
		t.Fatal(err)
	}
	if resumed, _ := handbackWork(t, ctx, a, group, 1, false); resumed != kept {
		t.Fatalf("a resumed the group at %d, want %d: c's newest window, answered kept", resumed, kept)
	}
}

// handbackIDs are the ids planned of the test's group.
const handbackIDs = 200

// handbackWork leases group at n (waiting for the grant), checks the
// catalog's ranges from the grant's window on are not done yet, works
// ranges of them, each followed by its window's upload (waited for
// until the fleet keeps it, if keep: a node alone keeps none), releases the lease, and returns the Next the
// grant resumed from (1 with no window) and the last window's.
func handbackWork(t *testing.T, ctx context.Context, n *fleetNode, group string, ranges int, keep bool) (resumed, next int64) {
	t.Helper()
	co := n.app.Coordinator
	var g *leasehold.Grant
	poll.Eventually(t, 10*fleetTTL, n.name+" leases "+group, func() bool {
		var err error
		if g, err = co.Lease(ctx, n.worker); err != nil {
			t.Fatalf("%s lease: %v", n.name, err)
		}
		return g != nil
	})
	if g.Group.Name != group {
		t.Fatalf("%s leased %s, want %s", n.name, g.Group.Name, group)
	}
	w := make(window, handbackIDs)
	resumed = 1
	if g.Snapshot != nil {
		resumed = g.Snapshot.Next
		for i := range resumed - 1 {
			w[i] = 1
		}
	}
	h := leasehold.GroupHolder{NodeID: n.worker, GroupID: g.Group.ID, Fence: g.Fence}
	for range ranges {
		r, err := co.Next(ctx, h)
		if err != nil || r == nil {
			t.Fatalf("%s next: %v, %v", n.name, r, err)
		}
		for id := r.Next; id <= r.End; id++ {
			if w[id-1] != 0 {
				t.Fatalf("%s was given id %d, in its window already (range %d..%d, resumed from %d)", n.name, id, r.Start, r.End, resumed)
			}
			w[id-1] = 1
		}
		if _, err := co.Finish(ctx, leasehold.RangeHolder{NodeID: n.worker, RangeID: r.ID, Fence: g.Fence}, r.End-r.Next+1); err != nil {
			t.Fatalf("%s finish: %v", n.name, err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(w[:w.next()-1])
		zw.Close()
		snap, err := n.app.Snapshots.Put(ctx, appliance.Upload{GroupID: g.Group.ID, NodeID: n.worker, Fence: g.Fence, Next: w.next(), Body: &buf, Gzip: true})
		if err != nil {
			t.Fatalf("%s snapshot: %v", n.name, err)
		}
		if !keep {
			continue
		}
		if k := n.fleet.snapshots.Kept(ctx, group, snap, 30*time.Second, nil); !k.Replicated {
			t.Fatalf("%s's window %d is not kept: %+v", n.name, snap.Next, k)
		}
	}
	if err := co.Release(ctx, h); err != nil {
		t.Fatalf("%s release: %v", n.name, err)
	}
	return resumed, w.next()
}

// TestAdoptionMovedOn: a group this node's catalog has as its own went
// on at another node when the bucket holds that node's window ahead of
// this node's (or, with none here, any window of it), but not when this
// node's is newer, nor when the window was stored before the group was
// made here (a group of that name deleted before).
func TestAdoptionMovedOn(t *testing.T) {
	ctx := context.Background()
	s := natstest.Server(t)
	a, b := snapStart(t, s.ClientURL(), "a"), snapStart(t, s.ClientURL(), "b")
	f := &adoption{db: a.db, js: a.js, snapshots: a.rep, log: claimQuiet}
	movedOn := func(g leasehold.Group) string {
		t.Helper()
		origin, err := f.movedOn(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		return origin
	}
	g, err := a.db.GroupByName(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if got := movedOn(g); got != "" {
		t.Fatalf("with no window in the bucket, the group went on at %q", got)
	}
	theirs := b.put(t, "g", 20, snapBytes(7, 1<<10))
	b.rep.Replicate("g")
	snapReplicated(t, snapObjects(t, b.js), "g", theirs.SHA256)
	if got := movedOn(g); got != "b" {
		t.Fatalf("with b's window and none here, the group went on at %q, want b", got)
	}
	// A replica behind (a bucket of a's own with no window of g, as a's
	// replica was before it caught up) does not hide b's window: the
	// bucket is read at the stream's leader.
	behind, err := a.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "leasehold_snapshots_behind"})
	if err != nil {
		t.Fatal(err)
	}
	bucket := a.rep.obs
	a.rep.obs = behind
	if got := movedOn(g); got != "b" {
		t.Fatalf("read through a replica behind, b's window says the group went on at %q, want b", got)
	}
	a.rep.obs = bucket
	made := g
	made.CreatedAt = theirs.At.Add(time.Second)
	if got := movedOn(made); got != "" {
		t.Fatalf("b's window, stored before the group was made here, says it went on at %q", got)
	}
	a.put(t, "g", 10, snapBytes(8, 1<<10))
	if got := movedOn(g); got != "b" {
		t.Fatalf("b's window, ahead of a's newer one, says the group went on at %q, want b", got)
	}
	a.put(t, "g", 30, snapBytes(9, 1<<10))
	if got := movedOn(g); got != "" {
		t.Fatalf("a's window, newer and ahead of b's, says the group went on at %q", got)
	}
}

// TestAdoptBehindWhenRecordUnread: a won group whose last owner's
// publish record cannot be read now (NATS electing leaders after a kill)
// is not owned without its window: Adopt says ErrBehind, so the claim is
// let go and tried again. Owned all the same, it once resumed from no
// window though b's worker had been answered its window kept.
func TestAdoptBehindWhenRecordUnread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	a, b := snapStart(t, s.ClientURL(), "a"), snapStart(t, s.ClientURL(), "b")
	theirs := b.put(t, "g", 20, snapBytes(7, 1<<10))
	b.rep.Replicate("g")
	snapReplicated(t, snapObjects(t, b.js), "g", theirs.SHA256)

	gone := natstest.Connect(t, s.ClientURL())
	records, err := gone.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "records_unread"})
	if err != nil {
		t.Fatal(err)
	}
	gone.Conn().Close()
	f := &adoption{db: a.db, js: a.js, records: records, snapshots: a.rep, log: claimQuiet}
	if err := f.Adopt(ctx, "g"); !errors.Is(err, ErrBehind) {
		t.Fatalf("adopting with b's publish record unread: %v; want ErrBehind", err)
	}
	g, err := a.db.GroupByName(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := a.db.Snapshot(ctx, g.ID); err != nil || snap != nil {
		t.Fatalf("a's window after an adoption let go: %+v, %v; want none", snap, err)
	}
}
