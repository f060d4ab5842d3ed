package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestMembersOwnClaimUnchecked: a claim this node signed and wrote is
// named its own by the members' watch without a check of its signature
// (Claims.Signed), while a claim on a key this node wrote, in other bytes
// (signed by a stranger in this node's name), is checked and refused.
func TestMembersOwnClaimUnchecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	js := natstest.Connect(t, s.ClientURL())
	id := ephemeralIdentity("node-a")
	c := claimNew(t, js, ClaimsConfig{Node: "node-a", Identity: id})
	m := NewMembers(c.lives, c.kv, "node-a", claimTestTTL, claimQuiet)
	m.ring.own(id)
	m.signed = c.Signed
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)

	if _, err := c.Claim(ctx, "alt.own"); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the own claim named node-a's", func() bool { return m.Owned()["node-a"] == 1 })
	c.signedMu.Lock()
	_, kept := c.signed[ClaimKey("alt.own")]
	c.signedMu.Unlock()
	if kept {
		t.Fatal("the own claim's value is still kept: the watch checked it instead of knowing it")
	}

	// This node signs a claim of alt.forged (as Claim does before its
	// write), and a stranger writes other bytes there in its name.
	key := ClaimKey("alt.forged")
	own, err := c.value(key, c.Life())
	if err != nil {
		t.Fatal(err)
	}
	c.noteSigned(key, own)
	forged, err := strangerKey(t, "node-a").signValue(kvSubject(ClaimsBucket, key), Claim{Node: "node-a", Life: c.Life(), At: time.Now().UTC(), Key: id.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.kv.Put(ctx, key, forged); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the forged claim refused", func() bool { return refusedCount(t, m.ring, "claim") >= 1 })
	if n := m.Owned()["node-a"]; n != 1 {
		t.Fatalf("node-a named the owner of %d groups, want 1: a forged claim in its name was believed", n)
	}
}
