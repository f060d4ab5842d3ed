package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestReplicatorKept: a window is said kept only once the bucket holds
// it, or a newer window of its group: a window stored but not replicated
// yet (not queued) is not, and the wait for it ends at its bound with an
// estimate; queued, it is kept once uploaded. A node with no peer up says
// at once that it is not kept, with no estimate.
func TestReplicatorKept(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	var peers atomic.Bool
	peers.Store(true)
	a := snapStartPeers(t, s.ClientURL(), "a", peers.Load)
	ctx := context.Background()

	snap := a.put(t, "g", 10, snapBytes(1, 1<<20))
	if kept := a.rep.Kept(ctx, "g", snap, 300*time.Millisecond, nil); kept.Replicated || kept.In <= 0 {
		t.Fatalf("a window never queued is said %+v, want not replicated with an estimate", kept)
	}
	a.rep.Replicate("g")
	if kept := a.rep.Kept(ctx, "g", snap, 30*time.Second, nil); !kept.Replicated {
		t.Fatalf("a window queued is said %+v once its wait ended, want replicated", kept)
	}
	snapReplicated(t, snapObjects(t, a.js), "g", snap.SHA256)

	// A newer window kept keeps the older one too.
	newer := a.put(t, "g", 20, snapBytes(2, 1<<10))
	a.rep.Replicate("g")
	if kept := a.rep.Kept(ctx, "g", newer, 30*time.Second, nil); !kept.Replicated {
		t.Fatalf("the newer window is said %+v, want replicated", kept)
	}
	if kept := a.rep.Kept(ctx, "g", snap, time.Millisecond, nil); !kept.Replicated {
		t.Fatalf("the older window, with a newer one replicated, is said %+v", kept)
	}

	// Nor is a window in the bucket said kept once the claim is gone: a
	// peer may have taken the group over from the bucket before it came.
	if kept := a.rep.Kept(ctx, "g", newer, time.Millisecond, func() bool { return false }); kept.Replicated || kept.Why == "" {
		t.Fatalf("a window replicated with its group's claim gone is said %+v, want not kept", kept)
	}

	// A group whose claim is gone is not waited for.
	lost := a.put(t, "h", 5, snapBytes(3, 1<<10))
	if kept := a.rep.Kept(ctx, "h", lost, time.Minute, func() bool { return false }); kept.Replicated || kept.Why == "" {
		t.Fatalf("a window of a group whose claim is gone is said %+v", kept)
	}

	peers.Store(false)
	alone := a.put(t, "h", 6, snapBytes(4, 1<<10))
	if kept := a.rep.Kept(ctx, "h", alone, time.Minute, nil); kept.Replicated || kept.In != 0 {
		t.Fatalf("alone, a window is said %+v, want not replicated, with no estimate (the wait's end gives one)", kept)
	}
}

// TestReplicatorKeepsPeersNewer: a node whose older window of a group is
// queued (it lost the group while cut off, and its upload waited) does
// not upload it over the newer window the group's new owner replicated.
func TestReplicatorKeepsPeersNewer(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := snapStart(t, s.ClientURL(), "a")
	b := snapStart(t, s.ClientURL(), "b")
	older := a.put(t, "g", 10, snapBytes(5, 1<<10))
	newer := b.put(t, "g", 20, snapBytes(6, 1<<10))
	if !newer.At.After(older.At) {
		t.Fatalf("b's window (%v) is not newer than a's (%v)", newer.At, older.At)
	}
	b.rep.Replicate("g")
	obs := snapObjects(t, b.js)
	snapReplicated(t, obs, "g", newer.SHA256)
	a.rep.Replicate("g")
	poll.Eventually(t, 10*time.Second, "a's upload to be done", func() bool { return !a.rep.Pending("g") })
	info, err := obs.GetInfo(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Metadata[SnapshotMetaSHA256]; got != newer.SHA256 {
		t.Fatalf("the bucket holds %s (origin %s), not b's newer window %s", got, info.Metadata[SnapshotMetaOrigin], newer.SHA256)
	}
}
