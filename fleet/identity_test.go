package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// refusedCount sums a keyring's refusals of what.
func refusedCount(t *testing.T, k *Keyring, what string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { k.refusedTotal.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "what" && l.GetValue() == what {
				sum += d.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// strangerKey is a key pair no node of the fleet has, under name: what a
// holder of the transport secret can sign with.
func strangerKey(t testing.TB, name string) *Identity {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	id, err := identityOf(name, kp)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// respondAs answers m with body signed as node (its key in this
// process), as a node's dumper answers.
func respondAs(m *nats.Msg, node string, body []byte) error {
	reply := &nats.Msg{Subject: m.Reply, Data: body}
	ephemeralIdentity(node).SignMsg(reply)
	return m.RespondMsg(reply)
}

// signedValue is v (a Life or a Claim) as its node writes it on key of
// bucket: signed with the node's key in this process.
func signedValue(t *testing.T, bucket, key string, v any) []byte {
	t.Helper()
	var id *Identity
	switch x := v.(type) {
	case Life:
		id = ephemeralIdentity(x.Node)
		x.Key = id.PublicKey()
		v = x
	case Claim:
		id = ephemeralIdentity(x.Node)
		x.Key = id.PublicKey()
		v = x
	default:
		t.Fatalf("signedValue of a %T", v)
	}
	b, err := id.signValue(kvSubject(bucket, key), v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForgedEventsRefused (N1): a holder of the fleet's transport secret
// publishes events in node-a's name: on another node's subject, on
// node-a's subject unsigned or signed by a key that is not node-a's, and
// one of a newer format, which folded would hold the fold; and a publish
// record in node-a's name. Node b folds none of the events, counts each,
// and folds node-a's own next event; node-a writes its own record over
// the forged one.
func TestForgedEventsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	a, b := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-b")
	seen := func(node *fleetNode, group string) bool {
		_, err := node.db.GroupByName(ctx, group)
		return err == nil
	}
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.real1", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "b folds a's group", func() bool { return seen(b, "alt.real1") })

	js := natstest.Connect(t, s.ClientURL())
	forge := func(subject, group string, format int, signer *Identity) {
		t.Helper()
		m := Message{Format: format, Origin: "node-a", Catalog: a.db.CatalogID(), Event: 1 << 40, Parts: 1, At: time.Now(), Kind: store.EventGroupUpdated,
			Group: &store.PeerGroup{Group: leasehold.Group{Name: group, Priority: 1, Active: true, RangeSize: 100, Start: 1, Kind: "default"}}}
		body, _ := json.Marshal(m)
		msg := nats.NewMsg(subject)
		msg.Data = body
		msg.Header.Set(nats.MsgIdHdr, "forged."+group)
		msg.Header.Set(HeaderOrigin, "node-a")
		if signer != nil {
			signer.SignMsg(msg)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	forge(SubjectPrefix+"ghost", "alt.forged.ghost", FormatVersion, nil)                           // another subject, unsigned
	forge(SubjectPrefix+"ghost", "alt.forged.ghostsigned", FormatVersion, strangerKey(t, "ghost")) // signed by ghost, naming node-a
	forge(SubjectPrefix+"node-a", "alt.forged.unsigned", FormatVersion, nil)                       // node-a's subject, unsigned
	forge(SubjectPrefix+"node-a", "alt.forged.stranger", FormatVersion, strangerKey(t, "node-a"))  // node-a's name, another key
	forge(SubjectPrefix+"node-a", "alt.forged.newer", FormatVersion+1, strangerKey(t, "node-a"))   // would hold the fold

	// A publish record in node-a's name, far past its position: unsigned,
	// it vouches for nothing, and node-a's next batch writes over it.
	rec := readPublishRecord(t, js, "node-a")
	records, err := js.KeyValue(ctx, PublishedBucket)
	if err != nil {
		t.Fatal(err)
	}
	rec.Seq, rec.Key = 1<<60, ""
	forged, _ := json.Marshal(rec)
	if _, err := records.Put(ctx, "node-a", forged); err != nil {
		t.Fatal(err)
	}

	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.real2", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "a writes its own publish record over the forged one", func() bool {
		e, err := records.Get(ctx, "node-a")
		var got PublishRecord
		return err == nil && b.fleet.Keyring().openValue(kvSubject(PublishedBucket, "node-a"), e.Value(), &got) == nil && got.Seq < 1<<60
	})
	poll.Eventually(t, 20*time.Second, "b folds a's next group, past the forged events", func() bool { return seen(b, "alt.real2") })
	for _, g := range []string{"alt.forged.ghost", "alt.forged.ghostsigned", "alt.forged.unsigned", "alt.forged.stranger", "alt.forged.newer"} {
		if seen(b, g) {
			t.Errorf("b folded forged group %s", g)
		}
	}
	if n := refusedCount(t, b.fleet.Keyring(), "event"); n < 5 {
		t.Errorf("b counted %v refused events, want 5", n)
	}
	if b.fleet.folder.Newer() != nil {
		t.Errorf("b's fold holds at a forged message of a newer format: %v", b.fleet.folder.Newer())
	}
}

// TestForgedAdminAndYieldRefused (N1): an admin write and an ask to hand
// a group over, carried to node-a by a holder of the transport secret
// (unsigned, naming node-b as its sender), and an ask signed by node-b
// for a node that is not its signer, are refused as forbidden; node-a
// keeps its group, and the forged write changed nothing.
func TestForgedAdminAndYieldRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	a, b := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-b")
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.yield", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, "a holds its group, b folded it, past the keep of a group just won", func() bool {
		_, err := b.db.GroupByName(ctx, "alt.yield")
		won, ok := a.fleet.gate.through().own.keeper.wonAt("alt.yield")
		return err == nil && a.fleet.claims.Held("alt.yield") && (!ok || time.Since(won) > 2*spreadKeepWon)
	})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ask := func(op appliance.AdminOp, sender string, signer *Identity) adminAnswer {
		t.Helper()
		body, _ := json.Marshal(op)
		req := nats.NewMsg(AdminSubjectPrefix + "node-a")
		req.Data = body
		req.Header.Set(adminNodeHeader, sender)
		if signer != nil {
			signer.SignMsg(req)
		}
		m, err := nc.RequestMsg(req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ans adminAnswer
		if err := json.Unmarshal(m.Data, &ans); err != nil {
			t.Fatal(err)
		}
		return ans
	}
	for _, c := range []struct {
		what   string
		op     appliance.AdminOp
		signer *Identity
	}{
		{"unsigned yield", appliance.AdminOp{Op: opYield, Group: "alt.yield", Node: "made-up"}, nil},
		{"yield signed by a stranger as node-b", appliance.AdminOp{Op: opYield, Group: "alt.yield", Node: "node-b"}, strangerKey(t, "node-b")},
		{"yield by node-b for another node", appliance.AdminOp{Op: opYield, Group: "alt.yield", Node: "made-up"}, ephemeralIdentity("node-b")},
		{"unsigned admin write", appliance.AdminOp{Op: "put_group", Group: "alt.forged.admin"}, nil},
	} {
		if ans := ask(c.op, "node-b", c.signer); ans.Kind != leasehold.KindForbidden {
			t.Errorf("%s: answered %+v, want forbidden", c.what, ans)
		}
	}
	if !a.fleet.claims.Held("alt.yield") {
		t.Error("a gave its group away on a forged ask")
	}
	if _, err := a.db.GroupByName(ctx, "alt.forged.admin"); err == nil {
		t.Error("a applied a forged admin write")
	}
	if n := refusedCount(t, a.fleet.Keyring(), "admin"); n != 4 {
		t.Errorf("a counted %v refused admin writes, want 4", n)
	}
}

// TestForgedLifeAndClaimRefused (N1): a holder of the transport secret
// writes a life for a made-up node and a claim of a's group in its name:
// b believes neither (the group has no owner but a real node, and b can
// claim it), and does not list the made-up node. A forged life written
// over node-a's own is written over by node-a's next renewal, in the
// same life: a loses none of its claims to it.
func TestForgedLifeAndClaimRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.Server(t)
	a, b := fleetJoin(t, s.ClientURL(), "node-a"), fleetJoin(t, s.ClientURL(), "node-b")
	for _, g := range []string{"alt.taken", "alt.kept"} {
		if _, _, err := a.app.Coordinator.PutGroup(ctx, g, store.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 20*time.Second, "a holds its groups", func() bool {
		return a.fleet.claims.Held("alt.taken") && a.fleet.claims.Held("alt.kept")
	})
	js := natstest.Connect(t, s.ClientURL())
	put := func(bucket, key string, v any) {
		t.Helper()
		body, _ := json.Marshal(v)
		if _, err := js.Publish(ctx, kvSubject(bucket, key), body); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	put(LivesBucket, "intruder", Life{Node: "intruder", Life: "L1", At: now})
	put(ClaimsBucket, ClaimKey("alt.taken"), Claim{Node: "intruder", Life: "L1", At: now})
	// Signed, but by a key that is not node-a's.
	stranger := strangerKey(t, "node-a")
	life := a.fleet.claims.Life()
	forgedLife, err := stranger.signValue(kvSubject(LivesBucket, "node-a"), Life{Node: "node-a", Life: "forged", At: now, Key: stranger.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, kvSubject(LivesBucket, "node-a"), forgedLife); err != nil {
		t.Fatal(err)
	}

	cl, _, err := b.fleet.claims.Owner(ctx, "alt.taken")
	if err == nil && cl.Node == "intruder" {
		t.Fatalf("b takes the made-up node for alt.taken's owner")
	}
	if _, err := b.fleet.claims.Claim(ctx, "alt.taken"); leasehold.KindOf(err) == leasehold.KindConflict && strings.Contains(err.Error(), "intruder") {
		t.Fatalf("b cannot claim alt.taken: %v", err)
	}
	poll.Eventually(t, 10*time.Second, "a writes its own life over the forged one", func() bool {
		st, err := b.fleet.claims.readLife(ctx, "node-a")
		return err == nil && st.found && !st.forged && st.life.Life == life
	})
	if got := a.fleet.claims.Life(); got != life {
		t.Errorf("a began a new life (%s, was %s) over a forged value", got, life)
	}
	if !a.fleet.claims.Held("alt.kept") {
		t.Error("a lost alt.kept to a forged life")
	}
	b.fleet.members.mu.Lock()
	_, listed := b.fleet.members.members["intruder"]
	b.fleet.members.mu.Unlock()
	if listed {
		t.Error("b lists the made-up node as a member")
	}
	if n := refusedCount(t, b.fleet.Keyring(), "life") + refusedCount(t, b.fleet.Keyring(), "claim"); n < 2 {
		t.Errorf("b counted %v refused lives and claims, want 2 or more", n)
	}
}

// TestKeyringPinsAndRoster: a name's key is pinned at first sight and
// kept in the data dir; another key for it is refused until approved; a
// withdrawn name is refused whatever its key, and approved again with
// its pinned key. With a roster only its members, by their keys, are
// believed, and a change to the file is read.
func TestKeyringPinsAndRoster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := NewKeyring(dir, "", claimQuiet)
	if err != nil {
		t.Fatal(err)
	}
	one, two := strangerKey(t, "n1"), strangerKey(t, "n1")
	signed := func(id *Identity) (*nats.Msg, string) {
		m := nats.NewMsg(SubjectPrefix + id.Name())
		m.Data = []byte(`{"x":1}`)
		id.SignMsg(m)
		return m, id.Name()
	}
	check := func(k *Keyring, id *Identity) error {
		m, _ := signed(id)
		_, err := k.VerifyMsg(m.Subject, m.Header, m.Data, "")
		return err
	}
	if err := check(k, one); err != nil {
		t.Fatalf("first sight: %v", err)
	}
	if err := check(k, two); err == nil {
		t.Fatal("a second key for a pinned name was believed")
	}
	m, _ := signed(one)
	m.Data = []byte(`{"x":2}`)
	if _, err := k.VerifyMsg(m.Subject, m.Header, m.Data, ""); err == nil {
		t.Fatal("a changed body was believed")
	}
	if _, err := k.VerifyMsg(SubjectPrefix+"n2", m.Header, []byte(`{"x":1}`), ""); err == nil {
		t.Fatal("a signature moved to another subject was believed")
	}
	// Kept across a restart.
	k2, err := NewKeyring(dir, "", claimQuiet)
	if err != nil {
		t.Fatal(err)
	}
	if check(k2, two) == nil || check(k2, one) != nil {
		t.Fatal("the pin was not kept in the data dir")
	}
	if err := k2.Withdraw("n1"); err != nil {
		t.Fatal(err)
	}
	if check(k2, one) == nil {
		t.Fatal("a withdrawn node was believed")
	}
	if err := k2.Approve("n1", ""); err != nil {
		t.Fatal(err)
	}
	if check(k2, one) != nil || check(k2, two) == nil {
		t.Fatal("approved again, the node's pinned key is not its key")
	}
	if err := k2.Approve("n1", two.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if check(k2, two) != nil || check(k2, one) == nil {
		t.Fatal("a new key approved is not the node's key")
	}

	roster := filepath.Join(t.TempDir(), "roster")
	if err := os.WriteFile(roster, []byte(fmt.Sprintf("# the fleet\nn1 %s\n", one.PublicKey())), 0o644); err != nil {
		t.Fatal(err)
	}
	kr, err := NewKeyring("", roster, claimQuiet)
	if err != nil {
		t.Fatal(err)
	}
	n2 := strangerKey(t, "n2")
	if check(kr, one) != nil || check(kr, two) == nil || check(kr, n2) == nil {
		t.Fatal("the roster does not decide")
	}
	if err := os.WriteFile(roster, []byte(fmt.Sprintf("n1 %s\nn2 %s\n", one.PublicKey(), n2.PublicKey())), 0o644); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, "the changed roster is read", func() bool { return check(kr, n2) == nil })
	if _, err := NewKeyring("", filepath.Join(t.TempDir(), "missing"), claimQuiet); err == nil {
		t.Fatal("a missing roster was taken")
	}
}

// TestIdentityFile: a node's key is made 0600 in its data dir on its
// first start and read back the same; a key file others can read, or a
// link, is refused.
func TestIdentityFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, err := LoadIdentity(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	again, err := LoadIdentity(dir, "n1")
	if err != nil || again.PublicKey() != id.PublicKey() {
		t.Fatalf("read back %v, %v", again, err)
	}
	if err := os.Chmod(filepath.Join(dir, IdentityFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(dir, "n1"); err == nil {
		t.Fatal("a key file others can read was taken")
	}
	linked := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, IdentityFile), filepath.Join(linked, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(linked, "n1"); err == nil {
		t.Fatal("a linked key file was followed")
	}
}

// BenchmarkSignVerify is what signing costs a message published and
// verifying one folded, for a message of an event's usual size. Besides
// ns/op (wall time, which a loaded machine inflates) it reports
// cpu-ns/op, the process's CPU time a message.
func BenchmarkSignVerify(b *testing.B) {
	id := strangerKey(b, "node-a")
	k := memoryKeyring(claimQuiet)
	body := make([]byte, 600)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	b.Run("sign", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			m := &nats.Msg{Subject: SubjectPrefix + "node-a", Data: body, Header: nats.Header{}}
			id.SignMsg(m)
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	})
	m := &nats.Msg{Subject: SubjectPrefix + "node-a", Data: body, Header: nats.Header{}}
	id.SignMsg(m)
	b.Run("verify", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			if _, err := k.VerifyMsg(m.Subject, m.Header, m.Data, ""); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestForgedDumpRefused (N1): a holder of the transport secret answers a
// rebuild's ask for node-o's dump before node-o does: the forged chunk
// is passed over, and the rebuild folds node-o's own.
func TestForgedDumpRefused(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	b := dumpOpen(t, "node-b", t.TempDir())
	nc := dumpConn(t, s.ClientURL())
	ctx := context.Background()
	chunk := func(group string) []byte {
		g := store.PeerGroup{Group: leasehold.Group{Name: group, Active: true, RangeSize: 10, Start: 1, TailEnd: 10, HistoryFloor: 1}, ClaimRev: 1}
		body, _ := json.Marshal(DumpChunk{Seq: 0, Last: true, Catalog: "cat-o", Groups: []DumpGroup{{Group: g}}})
		return body
	}
	origin := dumpConn(t, s.ClientURL())
	sub, err := origin.Subscribe(DumpSubjectPrefix+"node-o", func(m *nats.Msg) {
		forged := &nats.Msg{Subject: m.Reply, Data: chunk("forged.dump")}
		strangerKey(t, "node-o").SignMsg(forged)
		_ = m.Respond(chunk("forged.unsigned"))
		_ = m.RespondMsg(forged)
		_ = respondAs(m, "node-o", chunk("real.dump"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	origin.Flush()
	ring := memoryKeyring(claimQuiet)
	ring.Approve("node-o", ephemeralIdentity("node-o").PublicKey())
	if err := rebuild(ctx, nc, b.db, "node-o", 5, ring); err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]bool{"real.dump": true, "forged.dump": false, "forged.unsigned": false} {
		if _, err := b.db.GroupByName(ctx, g); (err == nil) != want {
			t.Errorf("group %s folded %v, want %v", g, err == nil, want)
		}
	}
	if n := refusedCount(t, ring, "dump"); n != 2 {
		t.Errorf("%v forged chunks counted, want 2", n)
	}
}

// TestKeyringAcceptUnsigned: the upgrade's transition. Off, an unsigned
// message is refused; on, it is believed as the node it claims, but not
// for a withdrawn name or with a roster; a signed message is checked as
// ever.
func TestKeyringAcceptUnsigned(t *testing.T) {
	t.Parallel()
	k, err := NewKeyring(t.TempDir(), "", claimQuiet)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := func(name string) error {
		m := nats.NewMsg(SubjectPrefix + name)
		m.Data = []byte(`{"x":1}`)
		signer, err := k.VerifyMsg(m.Subject, m.Header, m.Data, name)
		if err == nil && signer != name {
			t.Fatalf("an unsigned message claimed by %q believed as %q's", name, signer)
		}
		return err
	}
	if unsigned("old1") == nil {
		t.Fatal("an unsigned message believed by default")
	}
	k.AcceptUnsigned(true)
	if err := unsigned("old1"); err != nil {
		t.Fatalf("accepting unsigned: %v", err)
	}
	var l Life
	if err := k.openValue(kvSubject(LivesBucket, "old1"), []byte(`{"node":"old1"}`), &l); err != nil || l.Node != "old1" {
		t.Fatalf("an unsigned life of an earlier release: %v %+v", err, l)
	}
	signing := strangerKey(t, "n1")
	m := nats.NewMsg(SubjectPrefix + "n1")
	m.Data = []byte(`{"x":1}`)
	signing.SignMsg(m)
	if _, err := k.VerifyMsg(m.Subject, m.Header, m.Data, "n1"); err != nil {
		t.Fatal(err)
	}
	// What a node wrote before its upgrade (a claim, a window) stays
	// unsigned after it signs: believed while the roll goes on, and no
	// longer once it is over.
	if err := unsigned("n1"); err != nil {
		t.Fatalf("an unsigned message of a node seen signing, during the roll: %v", err)
	}
	k.AcceptUnsigned(false)
	if unsigned("n1") == nil || unsigned("old1") == nil {
		t.Fatal("an unsigned message believed once the roll is over")
	}
	k.AcceptUnsigned(true)
	if unsigned("") == nil {
		t.Fatal("an unsigned message with no name believed")
	}
	if err := k.Withdraw("old2"); err != nil {
		t.Fatal(err)
	}
	if unsigned("old2") == nil {
		t.Fatal("an unsigned message of a withdrawn name believed")
	}
	roster := filepath.Join(t.TempDir(), "roster")
	if err := os.WriteFile(roster, []byte("n1 "+signing.PublicKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := NewKeyring("", roster, claimQuiet)
	if err != nil {
		t.Fatal(err)
	}
	kr.AcceptUnsigned(true)
	if _, err := kr.VerifyMsg(SubjectPrefix+"old1", nats.Header{}, []byte(`{}`), "old1"); err == nil {
		t.Fatal("an unsigned message believed with a roster")
	}
}

// TestKeyringWithdrawnBefore: a member removed at T is still believed,
// with its pinned key, for what it signed as made before T (a window it
// replicated while a member, which the node taking its group over
// resumes from), and refused for what it signed as made after, or with
// another key.
func TestKeyringWithdrawnBefore(t *testing.T) {
	t.Parallel()
	k, err := NewKeyring("", "", claimQuiet)
	if err != nil {
		t.Fatal(err)
	}
	id, other := strangerKey(t, "n1"), strangerKey(t, "n1")
	body := []byte("window")
	subject := snapshotMetaSubj + "g"
	sig := id.sign(subject, body)
	removed := time.Now()
	if err := k.verify(subject, "n1", id.PublicKey(), sig, body); err != nil {
		t.Fatal(err) // pinned at first sight
	}
	if err := k.WithdrawAt("n1", removed); err != nil {
		t.Fatal(err)
	}
	if err := k.verify(subject, "n1", id.PublicKey(), sig, body); err == nil {
		t.Fatal("a withdrawn member believed")
	}
	if err := k.verifyBefore(subject, "n1", id.PublicKey(), sig, body, removed.Add(-time.Second)); err != nil {
		t.Fatalf("a withdrawn member's window made before its removal: %v", err)
	}
	if k.verifyBefore(subject, "n1", id.PublicKey(), sig, body, removed.Add(time.Second)) == nil {
		t.Fatal("a withdrawn member's window made after its removal believed")
	}
	if k.verifyBefore(subject, "n1", other.PublicKey(), other.sign(subject, body), body, removed.Add(-time.Second)) == nil {
		t.Fatal("another key's window believed for a withdrawn member")
	}
	if k.verifyBefore(subject, "n1", id.PublicKey(), sig, []byte("changed"), removed.Add(-time.Second)) == nil {
		t.Fatal("a changed window believed")
	}
}
