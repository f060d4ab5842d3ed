package fleet

import (
	"bytes"
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/store"
)

// TestReplicatorImportFromLeader: a node adopting a group resumes from
// the window the snapshots stream's leader has, never from an older one
// a replica behind still shows. The replica behind is a second bucket
// holding node-a's older window, signed and all, that the adopting node
// reads its objects from: the import is refused as not caught up yet
// (tried again later) rather than taken from the older window, and once
// the node reads the bucket itself it imports the newest.
func TestReplicatorImportFromLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	a := snapStart(t, s.ClientURL(), "node-a")
	obs := snapObjects(t, a.js)
	older := a.put(t, "g", 11, snapBytes(11, 4000))
	a.rep.Replicate("g")
	olderInfo := snapReplicated(t, obs, "g", older.SHA256)
	olderObj, err := obs.GetBytes(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	js := natstest.Connect(t, s.ClientURL())
	behind, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "leasehold_snapshots_behind"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := behind.Put(ctx, jetstream.ObjectMeta{Name: "g", Metadata: olderInfo.Metadata}, bytes.NewReader(olderObj)); err != nil {
		t.Fatal(err)
	}
	newer := a.put(t, "g", 21, snapBytes(21, 4000))
	a.rep.Replicate("g")
	snapReplicated(t, obs, "g", newer.SHA256)

	// node-b, its replicator not started: it reads the replica behind.
	app, db, err := openApp(appliance.Config{DataDir: t.TempDir(), HistoryMinFreeBytes: 0, Logger: claimQuiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	if _, _, err := app.Coordinator.PutGroup(ctx, "g", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	rep, err := NewReplicator(ctx, js, db, app.Snapshots, ReplicatorConfig{Node: "node-b", Logger: claimQuiet})
	if err != nil {
		t.Fatal(err)
	}
	bucket := rep.obs
	rep.obs = behind
	got, err := rep.Import(ctx, "g")
	if leasehold.KindOf(err) != leasehold.KindUnavailable || got != nil {
		t.Fatalf("import through a replica behind: %+v, %v; want unavailable and nothing (node-a's newest has next 21)", got, err)
	}
	rep.obs = bucket
	got, err = rep.Import(ctx, "g")
	if err != nil || got == nil || got.Next != 21 || got.SHA256 != newer.SHA256 {
		t.Fatalf("import: %+v, %v; want node-a's newest, next 21", got, err)
	}
}
