package fleet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// A window acknowledged is a window kept. In a fleet a group's window is
// replicated to the snapshots bucket in the background, after its event is
// published; a node killed between its answer to an upload and the end of
// that replication left the peer that took the group over with an older
// window, or none, though the worker had been told the newer one was
// stored. So the node answers an upload only once the window is in the
// bucket (acknowledged by a quorum of its copies, so the loss of any one
// server keeps it), waiting at most a bound; past it, the answer says the
// window is not replicated yet and how long that may take.

// keptWindows records, by group, the newest window of this node known to
// be in the bucket, for uploads waiting on it. Its zero value is ready.
type keptWindows struct {
	mu    sync.Mutex
	files map[string]int64 // by group: the File of the newest window in the bucket
	wake  chan struct{}    // closed and replaced whenever files changes
	rate  float64          // bytes per second of the last upload, 0 before any
}

// stored records that group's window file is in the bucket, uploaded now
// (size bytes in took) or found there already (took 0).
func (k *keptWindows) stored(group string, file, size int64, took time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.files == nil {
		k.files = map[string]int64{}
	}
	if file > k.files[group] {
		k.files[group] = file
	}
	if took > 0 && size > 0 {
		k.rate = float64(size) / took.Seconds()
	}
	if k.wake != nil {
		close(k.wake)
		k.wake = nil
	}
}

// at reports whether group's window file, or a newer one, is in the
// bucket, and otherwise a channel closed at the next change.
func (k *keptWindows) at(group string, file int64) (bool, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.files[group] >= file {
		return true, nil
	}
	if k.wake == nil {
		k.wake = make(chan struct{})
	}
	return false, k.wake
}

// estimate is how long an upload of size bytes may take, from the last
// upload's rate (snapshotMinRate before any), rounded up to a second.
func (k *keptWindows) estimate(size int64) time.Duration {
	k.mu.Lock()
	rate := k.rate
	k.mu.Unlock()
	if rate <= 0 {
		rate = snapshotMinRate
	}
	return (time.Duration(float64(size)/rate*float64(time.Second)) + time.Second).Truncate(time.Second)
}

// keptPoll is how often a waiting upload asks whether its node still
// holds the group's claim: a group lost meanwhile is uploaded by nobody.
const keptPoll = 250 * time.Millisecond

// Kept waits until snap, group's window stored here, or a newer window of
// the group, is in the bucket, for at most wait, and says which. Alone (no
// live peer) the window is not uploaded until one comes, so it says so at
// once, with no estimate. holds, if not nil, is asked while waiting: once
// it is false (the group's claim is gone) the wait ends.
func (r *Replicator) Kept(ctx context.Context, group string, snap leasehold.Snapshot, wait time.Duration, holds func() bool) appliance.WindowKept {
	if r.peers != nil && !r.peers() {
		return appliance.WindowKept{Why: "no peer is up to keep a copy: the window is replicated once one joins"}
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(keptPoll)
	defer tick.Stop()
	for {
		ok, changed := r.keep.at(group, snap.File)
		if ok && holds != nil && !holds() {
			// In the bucket, but perhaps only after the claim was lost and
			// a peer took the group over from the window before it: kept
			// is said only while the claim stands, so a takeover never
			// misses a window answered kept.
			return appliance.WindowKept{Why: "this node lost the group's claim as the window was replicated"}
		}
		if ok {
			return appliance.WindowKept{Replicated: true}
		}
		select {
		case <-changed:
			continue
		case <-tick.C:
			if holds != nil && !holds() {
				return appliance.WindowKept{Why: "this node lost the group's claim before the window was replicated"}
			}
			continue
		case <-deadline.C:
		case <-ctx.Done():
		}
		return appliance.WindowKept{In: r.keep.estimate(snap.Size),
			Why: "the window is not in the fleet's object store yet: this node keeps the group's claim until it is"}
	}
}

// KeepWindow waits, up to the claim TTL, until group's window snap is in
// the fleet's object store (appliance.WindowKeeper). A node not joined
// yet says the window is not replicated.
func (g *Gate) KeepWindow(ctx context.Context, group string, snap leasehold.Snapshot) appliance.WindowKept {
	p := g.through()
	if p == nil || p.fleet == nil || p.fleet.snapshots == nil {
		return appliance.WindowKept{Why: "this node has not joined its fleet"}
	}
	holds := func() bool { _, ok := p.own.Holds(group); return ok }
	return p.fleet.snapshots.Kept(ctx, group, snap, g.keepWait(), holds)
}

// keepWait bounds an upload's wait for its window's replication: the claim
// TTL, the time a takeover may take, so a worker waits no longer for the
// answer than the fleet would to give its group to another node.
func (g *Gate) keepWait() time.Duration { return g.cfg.ClaimTTL }

// peersNewer reports whether old, the bucket's object of a group, is
// another node's window stored no earlier than snap, this node's: then
// the group has moved on since snap, and uploading it would put an older
// window where the group's owner resumes from. A node that lost a group
// while its upload waited to be tried again (cut off from NATS, say)
// still has it queued when it comes back, before it has folded the new
// owner's events.
func (r *Replicator) peersNewer(old *jetstream.ObjectInfo, snap *leasehold.Snapshot) bool {
	origin := old.Metadata[SnapshotMetaOrigin]
	if origin == "" || origin == r.node {
		return false
	}
	at, err := time.Parse(time.RFC3339Nano, old.Metadata[SnapshotMetaAt])
	return err == nil && !at.Before(snap.At)
}

// lastMeta is the sequence of the newest info message on metaSubj, an
// object's, 0 when it has none: the upload's info is published only over
// that one.
func (r *Replicator) lastMeta(ctx context.Context, metaSubj string) (uint64, error) {
	m, err := r.stream.GetLastMsgForSubject(ctx, metaSubj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}
