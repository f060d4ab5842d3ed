package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestFleetRemovalSigned: whoever can write the fleet's buckets (the
// transport secret is all it takes) cannot turn a member out, nor let a
// removed one back in. A removal written unsigned, or signed by a key
// that is not the remover's, is refused at every node: the member stays
// and keeps running. The operator's removal, signed by the node it was
// made at, is believed: the member leaves. A delete of it, or a forged
// approval, is refused: the removal stands until the operator approves
// the member again.
func TestFleetRemovalSigned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	a, b := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-b")
	js := natstest.Connect(t, s.ClientURL())
	kv, err := js.KeyValue(ctx, RemovedBucket)
	if err != nil {
		t.Fatal(err)
	}
	stranger := strangerKey(t, a.name)
	forged := func(approved bool) map[string][]byte {
		rm := Removal{Node: b.name, By: a.name, At: time.Now().UTC(), Approved: approved}
		unsigned, _ := json.Marshal(rm)
		rm.Key = stranger.PublicKey()
		signed, err := stranger.signValue(kvSubject(RemovedBucket, b.name), rm)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{"unsigned": unsigned, "signed by a stranger": signed}
	}
	// refusedAt waits until each of nodes has refused one more removal
	// than before write.
	refusedAt := func(what string, write func(), nodes ...*fleetNode) {
		t.Helper()
		before := make([]float64, len(nodes))
		for i, n := range nodes {
			before[i] = refusedCount(t, n.fleet.gate.ring, "removal")
		}
		write()
		for i, n := range nodes {
			poll.Eventually(t, 10*time.Second, n.name+" refuses the "+what, func() bool {
				return refusedCount(t, n.fleet.gate.ring, "removal") > before[i]
			})
		}
	}

	for what, v := range forged(false) {
		refusedAt("removal "+what, func() {
			if _, err := kv.Put(ctx, b.name, v); err != nil {
				t.Fatal(err)
			}
		}, a, b)
		if a.fleet.removals.Removed(b.name) || b.fleet.removals.Removed(b.name) {
			t.Fatalf("a removal %s was believed", what)
		}
		select {
		case <-b.fleet.Done():
			t.Fatalf("b left the fleet on a removal %s: %v", what, b.fleet.Err())
		default:
		}
	}

	// The operator's removal (forced: b runs) is believed.
	if err := a.fleet.RemoveMember(ctx, b.name, true); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "a follows b's removal", func() bool { return a.fleet.removals.Removed(b.name) })
	select {
	case <-b.fleet.Done():
		if !errors.Is(b.fleet.Err(), ErrRemoved) {
			t.Fatalf("b's fleet part ended with %v, want %v", b.fleet.Err(), ErrRemoved)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b, removed, did not leave the fleet")
	}

	refusedAt("removal deleted", func() {
		if err := kv.Delete(ctx, b.name); err != nil {
			t.Fatal(err)
		}
	}, a)
	for what, v := range forged(true) {
		refusedAt("approval "+what, func() {
			if _, err := kv.Put(ctx, b.name, v); err != nil {
				t.Fatal(err)
			}
		}, a)
	}
	if !a.fleet.removals.Removed(b.name) {
		t.Fatal("a forged approval, or a delete, undid b's removal")
	}

	// The operator's approval is believed.
	if err := a.fleet.ApproveMember(ctx, b.name); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "a follows b's approval", func() bool { return !a.fleet.removals.Removed(b.name) })
	if err := a.fleet.ApproveMember(ctx, b.name); err == nil {
		t.Fatal("b approved twice")
	}
}
