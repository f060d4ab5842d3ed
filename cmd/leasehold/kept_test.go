package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestWindowAcknowledgedIsKept: in a fleet of three real nodes, a
// worker's window upload answered 201 with replicated true is what the
// peer that takes the group over hands out, though the owner is killed
// (SIGKILL) the moment it answered: the node answers only once the window
// is in the fleet's object store. The window is 8 MiB of random bytes, so
// its replication takes long enough for a kill to land before it ends.
func TestWindowAcknowledgedIsKept(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet of processes takes a while")
	}
	secret := filepath.Join(t.TempDir(), "nats.secret")
	if err := os.WriteFile(secret, []byte("window-kept-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startProcFleet(t, []string{"kept-a", "kept-b", "kept-c"}, func(int) []string {
		return []string{"--nats-secret-file", secret, "--claim-ttl", "4s", "--lease-ttl", "3s"}
	})
	a := nodes[0]
	ctx := context.Background()
	w, err := a.admin.RegisterNode(ctx, client.NodeSpec{Name: "kept-w"})
	if err != nil {
		t.Fatal(err)
	}
	rs := int64(100)
	const group = "alt.kept.window"
	if _, _, err := a.admin.PutGroup(ctx, group, client.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.admin.PlanTail(ctx, group, 999); err != nil {
		t.Fatal(err)
	}
	wa := client.New(a.url, w.Token)
	var g *client.Grant
	poll.Until(t, 30*time.Second, "a lease at kept-a", func() error {
		if g, err = wa.Lease(ctx); err != nil {
			return err
		}
		if g == nil {
			return errors.New("nothing leased yet")
		}
		return nil
	})
	// The peers must be up (a node alone keeps its windows to itself):
	// the first window may be answered before they are seen, so one is
	// sent until an answer says replicated.
	body := make([]byte, 8<<20)
	var sha string
	poll.Until(t, 30*time.Second, "an upload answered replicated", func() error {
		rand.Read(body)
		snap, err := wa.PutSnapshot(ctx, g.Group.ID, g.Fence, 500, bytes.NewReader(body), client.SnapshotUpload{Length: int64(len(body))})
		if err != nil {
			t.Fatal(err)
		}
		if snap.Replicated == nil {
			t.Fatalf("a node in a fleet answered an upload without replicated: %+v", snap)
		}
		if !*snap.Replicated {
			return fmt.Errorf("answered not replicated (estimate %ds)", snap.ReplicatedInS)
		}
		sha = snap.SHA256
		return nil
	})
	a.kill(t)

	// The worker leases at the survivors, whichever took the group over.
	var taken *client.Grant
	var at *procNode
	poll.Until(t, 90*time.Second, "the group leased at a survivor after kept-a's kill", func() error {
		for _, n := range nodes[1:] {
			g, err := client.New(n.url, w.Token).Lease(ctx)
			if err == nil && g != nil {
				taken, at = g, n
				return nil
			}
		}
		return errors.New("nothing leased yet")
	})
	if taken.Snapshot == nil {
		t.Fatalf("%s took the group over with no window; the one acknowledged at kept-a was %s\nits log:\n%s", at.name, sha, at.log.String())
	}
	if taken.Snapshot.SHA256 != sha || taken.Snapshot.Next != 500 {
		t.Fatalf("%s took the group over with window %s (next %d); the one acknowledged at kept-a was %s (next 500)", at.name, taken.Snapshot.SHA256, taken.Snapshot.Next, sha)
	}
	r, err := client.New(at.url, w.Token).GetSnapshot(ctx, taken.Group.ID, taken.Fence, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		t.Fatalf("%s's window downloads as %s, not %s", at.name, got, sha)
	}
}
