package fleet

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestMembers: a peer whose life is in the fleet is listed up before it
// has published, and once the catalog knows it, with the groups its
// claims name, and down once its life was not seen for the TTL, with one
// log line for each change; this node itself is never listed.
func TestMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := serverStart(t, ServerConfig{Name: "node-a", Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	js := serverJetStream(t, s)
	lives, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: LivesBucket})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ClaimsBucket})
	if err != nil {
		t.Fatal(err)
	}
	put := func(kv jetstream.KeyValue, key string, v any) {
		b := signedValue(t, kv.Bucket(), ClaimKey(key), v)
		if _, err := kv.Put(ctx, ClaimKey(key), b); err != nil {
			t.Fatal(err)
		}
	}
	var buf syncbuf.Buffer
	const ttl = 1500 * time.Millisecond
	m := NewMembers(lives, claims, "node-a", ttl, slog.New(slog.NewTextHandler(&buf, nil)))
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	put(lives, "node-a", Life{Node: "node-a", Life: "1", At: time.Now()})
	put(lives, "node-b", Life{Node: "node-b", Life: "1", At: time.Now()})
	put(claims, "alt.one", Claim{Node: "node-b", Life: "1", At: time.Now()})
	put(claims, "alt.two", Claim{Node: "node-b", Life: "1", At: time.Now()})
	state := func(peers []leasehold.Peer) string {
		var b bytes.Buffer
		for _, p := range peers {
			b.WriteString(p.Name + "=" + p.State + " ")
			if p.Owns > 0 {
				fmt.Fprintf(&b, "owns=%d ", p.Owns)
			}
		}
		return strings.TrimSpace(b.String())
	}
	poll.Eventually(t, 5*time.Second, "node-b up before it published, owning its groups", func() bool {
		return state(m.Status(nil)) == "node-b=up owns=2"
	})
	// The gauge counts what Status lists over the catalog's peers.
	known := []leasehold.Peer{}
	gauge := m.Collector(func(context.Context) ([]leasehold.Peer, error) {
		return slices.Clone(known), nil
	})
	if got, want := membersByState(t, gauge), "down=0 joining=0 unknown=0 up=1"; got != want {
		t.Fatalf("leasehold_peer_members %s, want %s", got, want)
	}
	known = []leasehold.Peer{{Name: "node-b"}, {Name: "node-c"}}
	if got, want := membersByState(t, gauge), "down=1 joining=0 unknown=0 up=1"; got != want {
		t.Fatalf("leasehold_peer_members %s, want %s", got, want)
	}
	// Known to the catalog (it published): up.
	peers := m.Status([]leasehold.Peer{{Name: "node-b"}, {Name: "node-c"}})
	if got, want := state(peers), "node-b=up owns=2 node-c=down"; got != want {
		t.Fatalf("members %s, want %s", got, want)
	}
	if peers[0].Owns != 2 || peers[0].StateSince == nil {
		t.Fatalf("node-b owns %d since %v, want 2 and a time", peers[0].Owns, peers[0].StateSince)
	}
	// Its life not renewed: down after the TTL, said once.
	poll.Eventually(t, 10*time.Second, "node-b down", func() bool { return state(m.Status(nil)) == "node-b=down owns=2" })
	// Status reads the lapse as it asks; the line is the tick's, which
	// may come a moment later on a loaded machine.
	poll.Eventually(t, 10*time.Second, "the line of node-b down", func() bool {
		return strings.Contains(buf.String(), `msg="peers: peer down" peer=node-b`)
	})
	if got := strings.Count(buf.String(), `msg="peers: peer down" peer=node-b`); got != 1 {
		t.Fatalf("%d lines of node-b down, want 1:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "groups_to_adopt=2 timeline=peer_down") {
		t.Fatalf("the down line does not count its groups or is not marked for the timeline:\n%s", buf.String())
	}
	if got, want := membersByState(t, gauge), "down=2 joining=0 unknown=0 up=0"; got != want {
		t.Fatalf("leasehold_peer_members %s, want %s", got, want)
	}
	put(lives, "node-b", Life{Node: "node-b", Life: "2", At: time.Now()})
	poll.Eventually(t, 5*time.Second, "node-b up again", func() bool { return strings.Contains(buf.String(), `msg="peers: peer up again" peer=node-b`) })
	if !strings.Contains(buf.String(), "timeline=peer_up") {
		t.Fatalf("the up line is not marked for the timeline:\n%s", buf.String())
	}
}

// membersByState is leasehold_peer_members as c collects it: state=count,
// by state.
func membersByState(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_peer_members" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out = append(out, fmt.Sprintf("%s=%g", m.GetLabel()[0].GetValue(), m.GetGauge().GetValue()))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestFleetMembers: in a real fleet, each node lists the others up, and
// a node killed is listed down by the survivors after the claim TTL; the
// members gauge counts the same.
func TestFleetMembers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ctx := context.Background()
	nodes, _, _ := fleetOf(t)
	a, c := nodes[0], nodes[2]
	states := func(n *fleetNode) string {
		st, err := n.fleet.Peers(ctx)
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, p := range st.Peers {
			out = append(out, p.Name+"="+p.State)
		}
		return strings.Join(out, " ")
	}
	poll.Eventually(t, 20*time.Second, "a lists b and c up", func() bool { return states(a) == "node-b=up node-c=up" })
	// The fleet's gauge counts what its catalog and its members say.
	if got, want := membersByState(t, a.fleet.Collector()), "down=0 joining=0 unknown=0 up=2"; got != want {
		t.Fatalf("a's leasehold_peer_members %s, want %s", got, want)
	}
	c.stop()
	poll.Eventually(t, 20*time.Second, "a lists c down", func() bool { return states(a) == "node-b=up node-c=down" })
	if got, want := membersByState(t, a.fleet.Collector()), "down=1 joining=0 unknown=0 up=1"; got != want {
		t.Fatalf("a's leasehold_peer_members %s, want %s", got, want)
	}
	st, err := a.fleet.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if since := st.Peers[1].StateSince; since == nil || time.Since(*since) < fleetTTL {
		t.Fatalf("c down since %v, want at least the claim TTL (%s) ago", since, fleetTTL)
	}
}
