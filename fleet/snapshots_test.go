package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// snapNode is one node of a snapshot test: its own catalog in a temp dir
// holding group "g" (and "h"), and its replicator on a shared NATS.
type snapNode struct {
	*dumpNode
	rep *Replicator
	js  jetstream.JetStream
}

func snapStart(t *testing.T, url, name string) *snapNode {
	t.Helper()
	return snapStartPeers(t, url, name, nil)
}

// snapStartPeers is snapStart with the replicator's PeersFunc.
func snapStartPeers(t *testing.T, url, name string, peers func() bool) *snapNode {
	t.Helper()
	return snapStartWith(t, url, name, peers, nil)
}

// snapStartWith is snapStart with the replicator's PeersFunc and the
// appliance's Fleet (nil: alone).
func snapStartWith(t *testing.T, url, name string, peers func() bool, fleet appliance.Fleet) *snapNode {
	t.Helper()
	ctx := context.Background()
	n := dumpOpenIn(t, name, t.TempDir(), fleet)
	app, db := n.app, n.db
	for _, g := range []string{"g", "h"} {
		if _, _, err := app.Coordinator.PutGroup(ctx, g, store.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	js := natstest.Connect(t, url)
	rep, err := NewReplicator(ctx, js, db, app.Snapshots, ReplicatorConfig{Node: name, Logger: claimQuiet, PeersFunc: peers})
	if err != nil {
		t.Fatal(err)
	}
	rep.Start(context.Background())
	t.Cleanup(rep.Stop)
	return &snapNode{dumpNode: n, rep: rep, js: js}
}

// put stores body as group's snapshot, as an operator's upload.
func (n *snapNode) put(t *testing.T, group string, next int64, body []byte) leasehold.Snapshot {
	t.Helper()
	g, err := n.db.GroupByName(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := n.app.Snapshots.Put(context.Background(), appliance.Upload{
		GroupID: g.ID, Next: next, Body: bytes.NewReader(body), Gzip: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// stored is group's recorded snapshot here and its file's bytes.
func (n *snapNode) stored(t *testing.T, group string) (*leasehold.Snapshot, []byte) {
	t.Helper()
	g, err := n.db.GroupByName(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	f, snap, err := n.app.Snapshots.Open(context.Background(), g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		return nil, nil
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil {
		t.Fatal(err)
	}
	return snap, b.Bytes()
}

// snapObjects is the snapshots bucket as a client sees it.
func snapObjects(t *testing.T, js jetstream.JetStream) jetstream.ObjectStore {
	t.Helper()
	obs, err := js.ObjectStore(context.Background(), SnapshotsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// snapBytes is n random bytes from seed.
func snapBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return b
}

// snapReplicated waits until the bucket holds group's object with the
// given sha-256 and returns its info.
func snapReplicated(t *testing.T, obs jetstream.ObjectStore, group, sha string) *jetstream.ObjectInfo {
	t.Helper()
	var info *jetstream.ObjectInfo
	poll.Eventually(t, 10*time.Second, "snapshot of "+group+" replicated", func() bool {
		var err error
		info, err = obs.GetInfo(context.Background(), group)
		return err == nil && info.Metadata[SnapshotMetaSHA256] == sha
	})
	return info
}

// TestReplicatorCarriesSnapshot: a snapshot put on A is replicated with its
// next, sha-256, origin and time, and imported by B byte for byte with the
// same Next; replicating or importing again with no change moves nothing;
// a newer snapshot on A replaces the object and B imports that one.
func TestReplicatorCarriesSnapshot(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := snapStart(t, s.ClientURL(), "node-a")
	b := snapStart(t, s.ClientURL(), "node-b")
	obs := snapObjects(t, a.js)
	ctx := context.Background()

	// Several chunks, the last one short.
	first := snapBytes(1, 3*int(a.rep.chunk)+12345)
	snapA := a.put(t, "g", 42, first)
	a.rep.Replicate("g")
	info := snapReplicated(t, obs, "g", snapA.SHA256)
	at, err := time.Parse(time.RFC3339Nano, info.Metadata[SnapshotMetaAt])
	if err != nil || !at.Equal(snapA.At) {
		t.Errorf("object at %q (%v), want %s", info.Metadata[SnapshotMetaAt], err, snapA.At)
	}
	if got, want := info.Metadata[SnapshotMetaNext], "42"; got != want {
		t.Errorf("object next %q, want %q", got, want)
	}
	if got, want := info.Metadata[SnapshotMetaOrigin], "node-a"; got != want {
		t.Errorf("object origin %q, want %q", got, want)
	}
	if got, want := info.Chunks, uint32(4); got != want {
		t.Errorf("object in %d chunks of %d bytes, want %d", got, a.rep.chunk, want)
	}
	if got := claimMetric(t, a.rep.replications.WithLabelValues("ok")); got != 1 {
		t.Errorf("%v replications ok, want 1", got)
	}

	snapB, err := b.rep.Import(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if snapB == nil || snapB.Next != 42 || snapB.SHA256 != snapA.SHA256 || snapB.Size != int64(len(first)) {
		t.Fatalf("B imported %+v, want next 42, sha %s, %d bytes", snapB, snapA.SHA256, len(first))
	}
	if rec, body := b.stored(t, "g"); rec == nil || rec.SHA256 != snapA.SHA256 || !bytes.Equal(body, first) {
		t.Fatalf("B stores %+v and %d bytes, not A's snapshot", rec, len(body))
	}

	// No change: no upload, no download.
	a.rep.Replicate("g")
	poll.Eventually(t, 10*time.Second, "unchanged replication counted", func() bool {
		return claimMetric(t, a.rep.replications.WithLabelValues("unchanged")) == 1
	})
	if again, err := obs.GetInfo(ctx, "g"); err != nil || again.NUID != info.NUID || !again.ModTime.Equal(info.ModTime) {
		t.Errorf("an unchanged snapshot was uploaded again: %+v, %v; was nuid %s at %s", again, err, info.NUID, info.ModTime)
	}
	if got := claimMetric(t, a.rep.replications.WithLabelValues("ok")); got != 1 {
		t.Errorf("%v replications ok after an unchanged one, want 1", got)
	}
	same, err := b.rep.Import(ctx, "g")
	if err != nil || same == nil || same.File != snapB.File {
		t.Errorf("second import gave %+v, %v; want B's snapshot %+v as it was", same, err, snapB)
	}
	if got := claimMetric(t, b.rep.imports.WithLabelValues("unchanged")); got != 1 {
		t.Errorf("%v unchanged imports, want 1", got)
	}

	// A newer snapshot replaces the object, and its old chunks go.
	second := snapBytes(2, 100000)
	snapA2 := a.put(t, "g", 99, second)
	a.rep.Replicate("g")
	a.rep.Replicate("g") // queued once
	info2 := snapReplicated(t, obs, "g", snapA2.SHA256)
	if info2.NUID == info.NUID {
		t.Error("the newer snapshot was written under the old object's chunks")
	}
	snapB2, err := b.rep.Import(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if snapB2 == nil || snapB2.Next != 99 || snapB2.SHA256 != snapA2.SHA256 {
		t.Fatalf("B imported %+v, want next 99, sha %s", snapB2, snapA2.SHA256)
	}
	if rec, body := b.stored(t, "g"); rec == nil || rec.Next != 99 || !bytes.Equal(body, second) {
		t.Fatalf("B stores %+v and %d bytes, not A's newer snapshot", rec, len(body))
	}
	// The old chunks are purged once the new object's metadata is in.
	poll.Eventually(t, 10*time.Second, "the old object's chunks purged", func() bool {
		st, err := obs.Status(ctx)
		return err == nil && st.Size() < uint64(len(second))+64<<10
	})
}

// TestReplicatorImportRefusesCorrupt: an object whose metadata names
// another sha-256, or whose chunks are not the ones its digest was taken
// of, or that the node it names did not sign, is refused as
// unprocessable, and B's own snapshot stays whole.
func TestReplicatorImportRefusesCorrupt(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	b := snapStart(t, s.ClientURL(), "node-b")
	obs := snapObjects(t, b.js)
	ctx := context.Background()
	old := snapBytes(7, 50000)
	oldSnap := b.put(t, "g", 5, old)
	body := snapBytes(8, 300000)
	sum := sha256.Sum256(body)

	cases := []struct {
		name   string
		meta   map[string]string
		tamper func(info *jetstream.ObjectInfo)
		// downloaded: the refusal comes from the download's digest check,
		// not from the metadata read before it.
		downloaded bool
		// signer, if set, signs the metadata as node-a (as its
		// replicator does).
		signer *Identity
	}{
		// A whole window that node-a did not sign (N1): a holder of the
		// transport secret wrote it, unsigned or with a key of its own.
		{name: "Unsigned", meta: map[string]string{
			SnapshotMetaNext: "9", SnapshotMetaSHA256: hex.EncodeToString(sum[:]), SnapshotMetaOrigin: "node-a",
		}},
		{name: "StrangerSigned", meta: map[string]string{
			SnapshotMetaNext: "9", SnapshotMetaSHA256: hex.EncodeToString(sum[:]), SnapshotMetaOrigin: "node-a",
		}, signer: strangerKey(t, "node-a")},
		{name: "WrongSHA256", meta: map[string]string{
			SnapshotMetaNext: "9", SnapshotMetaSHA256: hex.EncodeToString(make([]byte, 32)), SnapshotMetaOrigin: "node-a",
		}},
		{name: "BadNext", meta: map[string]string{
			SnapshotMetaNext: "nine", SnapshotMetaSHA256: hex.EncodeToString(sum[:]), SnapshotMetaOrigin: "node-a",
		}},
		{name: "ChunkAdded", meta: map[string]string{
			SnapshotMetaNext: "9", SnapshotMetaSHA256: hex.EncodeToString(sum[:]), SnapshotMetaOrigin: "node-a",
		}, tamper: func(info *jetstream.ObjectInfo) {
			// One more chunk on the object's subject: the download reads
			// it, and the bytes no longer hash to the digest.
			if _, err := b.js.Publish(ctx, "$O."+SnapshotsBucket+".C."+info.NUID, []byte("not the window")); err != nil {
				t.Fatal(err)
			}
		}, downloaded: true, signer: ephemeralIdentity("node-a")},
	}
	// node-a's key is the one b knows for it.
	b.rep.ring.Approve("node-a", ephemeralIdentity("node-a").PublicKey())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.signer != nil {
				c.meta[SnapshotMetaKey] = c.signer.PublicKey()
				c.meta[SnapshotMetaSig] = c.signer.sign(snapshotMetaSubj+"g", windowSigned("g", c.meta))
			}
			info, err := obs.Put(ctx, jetstream.ObjectMeta{
				Name: "g", Metadata: c.meta, Opts: &jetstream.ObjectMetaOptions{ChunkSize: 64 << 10},
			}, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if c.tamper != nil {
				c.tamper(info)
			}
			got, err := b.rep.Import(ctx, "g")
			if leasehold.KindOf(err) != leasehold.KindUnprocessable || got != nil {
				t.Fatalf("Import gave %+v, %v; want an unprocessable error", got, err)
			}
			if c.downloaded != errors.Is(err, jetstream.ErrDigestMismatch) {
				t.Errorf("Import refused with %v; downloaded %v", err, c.downloaded)
			}
			rec, stored := b.stored(t, "g")
			if rec == nil || *rec != oldSnap || !bytes.Equal(stored, old) {
				t.Fatalf("B's snapshot is %+v (%d bytes) after a refused import, want %+v", rec, len(stored), oldSnap)
			}
			snapNoParts(t, b.app)
		})
	}
	if got := claimMetric(t, b.rep.imports.WithLabelValues("failed")); got != float64(len(cases)) {
		t.Errorf("%v failed imports counted, want %d", got, len(cases))
	}
}

// snapNoParts fails if an upload left a .part file in the snapshot store.
func snapNoParts(t *testing.T, app *appliance.Appliance) {
	t.Helper()
	parts, err := filepath.Glob(filepath.Join(app.Config.DataDir, "snapshots", "*.part"))
	if err != nil || len(parts) > 0 {
		t.Errorf("left behind: %v, %v", parts, err)
	}
}

// TestReplicatorImportNothing: a group with no replicated snapshot imports
// nothing and keeps what it has; a group the catalog does not know is not
// found; replicating a group without a snapshot uploads nothing.
func TestReplicatorImportNothing(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	// Alone while it imports: with peers, b's replicator uploads h's
	// window as soon as it looks for missing ones, which on a loaded
	// machine came after the put, and h then imported as unchanged.
	var peers atomic.Bool
	b := snapStartPeers(t, s.ClientURL(), "node-b", peers.Load)
	ctx := context.Background()
	local := b.put(t, "h", 3, snapBytes(3, 1000))

	for _, group := range []string{"g", "h"} {
		got, err := b.rep.Import(ctx, group)
		if err != nil || got != nil {
			t.Errorf("Import(%q) = %+v, %v; want nil, nil", group, got, err)
		}
	}
	if rec, _ := b.stored(t, "h"); rec == nil || *rec != local {
		t.Errorf("h's snapshot is %+v after importing nothing, want %+v", rec, local)
	}
	if _, err := b.rep.Import(ctx, "nosuch"); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("Import of an unknown group: %v, want not found", err)
	}

	peers.Store(true)
	b.rep.Replicate("g") // no snapshot
	poll.Eventually(t, 10*time.Second, "nothing to replicate counted", func() bool {
		return claimMetric(t, b.rep.replications.WithLabelValues("unchanged")) == 1
	})
	if _, err := snapObjects(t, b.js).GetInfo(ctx, "g"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("group without a snapshot has an object: %v", err)
	}
}

// TestReplicatorImportWhileHeld: a node whose worker holds the group does
// not import over the worker's window.
func TestReplicatorImportWhileHeld(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := snapStart(t, s.ClientURL(), "node-a")
	b := snapStart(t, s.ClientURL(), "node-b")
	ctx := context.Background()
	snapA := a.put(t, "g", 11, snapBytes(11, 4000))
	a.rep.Replicate("g")
	snapReplicated(t, snapObjects(t, a.js), "g", snapA.SHA256)

	w, err := b.app.Coordinator.RegisterNode(ctx, appliance.NodeSpec{Name: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.app.Coordinator.PlanTail(ctx, "g", 1000); err != nil {
		t.Fatal(err)
	}
	lease, err := b.app.Coordinator.Lease(ctx, w.ID)
	if err != nil || lease == nil || lease.Group.Name != "g" {
		t.Fatalf("lease: %+v, %v", lease, err)
	}
	got, err := b.rep.Import(ctx, "g")
	if leasehold.KindOf(err) != leasehold.KindConflict {
		t.Fatalf("Import while held here: %+v, %v; want a conflict", got, err)
	}
	if rec, _ := b.stored(t, "g"); rec != nil {
		t.Errorf("B has snapshot %+v after a refused import", rec)
	}
}

// TestReplicatorQueue: requests for a group already waiting are one
// request, and Replicate never blocks, running or not.
func TestReplicatorQueue(t *testing.T) {
	t.Parallel()
	r := &Replicator{queued: map[string]bool{}, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
	for i := range 1000 {
		r.Replicate([]string{"g", "h", "comp.lang.c++"}[i%3])
	}
	var got []string
	for g := r.next(); g != ""; g = r.next() {
		got = append(got, g)
	}
	if want := "g h comp.lang.c++"; strings.Join(got, " ") != want {
		t.Errorf("queue worked as %q, want %q", strings.Join(got, " "), want)
	}
	r.Replicate("g")
	if g := r.next(); g != "g" {
		t.Errorf("a group taken off the queue is queued again: got %q", g)
	}
}

// TestReplicatorRefusesChangedFile: a snapshot file that no longer hashes
// to its record is not uploaded; the object already replicated stays, and
// no chunks of the refused upload are left in the bucket.
func TestReplicatorRefusesChangedFile(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := snapStart(t, s.ClientURL(), "node-a")
	obs := snapObjects(t, a.js)
	ctx := context.Background()
	first := a.put(t, "g", 1, snapBytes(21, 200000))
	a.rep.Replicate("g")
	info := snapReplicated(t, obs, "g", first.SHA256)
	poll.Eventually(t, 10*time.Second, "the replicated group no longer pending", func() bool { return !a.rep.Pending("g") })
	sizeBefore := snapBucketSize(t, obs)

	second := a.put(t, "g", 2, snapBytes(22, 3*int(a.rep.chunk)))
	g, err := a.db.GroupByName(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.app.Snapshots.Path(g.ID, second), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("bit rot"), 2*int64(a.rep.chunk)+5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a.rep.Replicate("g")
	poll.Eventually(t, 10*time.Second, "failed replication counted", func() bool {
		return claimMetric(t, a.rep.replications.WithLabelValues("failed")) == 1
	})
	got, err := obs.GetInfo(ctx, "g")
	if err != nil || got.NUID != info.NUID || got.Metadata[SnapshotMetaSHA256] != first.SHA256 {
		t.Fatalf("object after a refused upload: %+v, %v; want the first one, %s", got, err, info.NUID)
	}
	// The refused upload stays pending, so the claim is kept, and is tried
	// again; its chunks are purged beside the uploads.
	if !a.rep.Pending("g") {
		t.Error("a group whose upload was refused is not pending")
	}
	poll.Eventually(t, 10*time.Second, "the refused upload's chunks purged", func() bool {
		return snapBucketSize(t, obs) == sizeBefore
	})
	poll.Eventually(t, 3*replicateRetry, "the refused upload tried again", func() bool {
		return claimMetric(t, a.rep.replications.WithLabelValues("failed")) >= 2
	})
	if !a.rep.Pending("g") {
		t.Error("a group whose upload was refused twice is not pending")
	}
}

// snapBucketSize is the bucket's stored bytes.
func snapBucketSize(t *testing.T, obs jetstream.ObjectStore) uint64 {
	t.Helper()
	st, err := obs.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestReplicatorAlone: a node with no live peer keeps its windows on its
// own disk only: a snapshot queued stays pending (its claim kept) and the
// bucket stays without it. Once a peer appears, every owned group's
// window is uploaded, the ones queued while alone and the ones never
// queued in this run (stored before a restart) alike.
func TestReplicatorAlone(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	var peers atomic.Bool
	a := snapStartPeers(t, s.ClientURL(), "node-a", peers.Load)
	obs := snapObjects(t, a.js)
	ctx := context.Background()
	snapG := a.put(t, "g", 42, snapBytes(1, 1000))
	snapH := a.put(t, "h", 7, snapBytes(2, 2000)) // stored, never queued
	a.rep.Replicate("g")
	if !a.rep.Pending("g") {
		t.Fatal("a window queued while alone is not pending")
	}
	// The run loop has looked for peers at least twice since the queueing.
	for range 2 {
		before := a.rep.aloneChecks.Load()
		poll.Eventually(t, 5*time.Second, "the replicator looking for peers", func() bool { return a.rep.aloneChecks.Load() > before })
	}
	if _, err := obs.GetInfo(ctx, "g"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the bucket holds g's window while its node is alone: %v", err)
	}
	if !a.rep.Pending("g") {
		t.Fatal("a window kept while alone is no longer pending")
	}
	peers.Store(true)
	snapReplicated(t, obs, "g", snapG.SHA256)
	snapReplicated(t, obs, "h", snapH.SHA256)
	poll.Eventually(t, 5*time.Second, "g no longer pending", func() bool { return !a.rep.Pending("g") })
}

// TestReplicatorImportAdopting: a node of a fleet imports a group's
// replicated window while adopting it, before the group is owned here and
// so before the fleet fence would let any holder call or operator upload
// through; the import is the adoption's own write and lands.
func TestReplicatorImportAdopting(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := snapStart(t, s.ClientURL(), "node-a")
	b := snapStartWith(t, s.ClientURL(), "node-b", nil, &ownFleet{}) // holds no claim
	obs := snapObjects(t, a.js)
	snapA := a.put(t, "g", 42, snapBytes(3, 5000))
	a.rep.Replicate("g")
	snapReplicated(t, obs, "g", snapA.SHA256)
	got, err := b.rep.Import(context.Background(), "g")
	if err != nil || got == nil || got.SHA256 != snapA.SHA256 || got.Next != 42 {
		t.Fatalf("import while adopting = %+v, %v; want next 42, sha %s", got, err, snapA.SHA256)
	}
	if stored, _ := b.stored(t, "g"); stored == nil || stored.SHA256 != snapA.SHA256 {
		t.Fatalf("b's stored window after the import = %+v", stored)
	}
}
