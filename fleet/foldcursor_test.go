package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// foldCursor is node n's fold consumer as the stream reports it.
func foldCursor(ctx context.Context, n *fleetNode) (jetstream.Consumer, error) {
	return n.fleet.js.Consumer(ctx, StreamName, "fold_"+consumerName(n.name))
}

// foldCursorAt is where n's fold consumer is: its server, or why it cannot
// be told.
func foldCursorAt(ctx context.Context, n *fleetNode) (string, error) {
	c, err := foldCursor(ctx, n)
	if err != nil {
		return "", err
	}
	info := c.CachedInfo()
	if got := info.Config.Replicas; got != 1 || !info.Config.MemoryStorage {
		return "", fmt.Errorf("%s's fold consumer has %d copies (memory %v), want one in memory", n.name, got, info.Config.MemoryStorage)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("%s's fold consumer has no server", n.name)
	}
	return info.Cluster.Leader, nil
}

// TestFoldCursorOwnServer: in a fleet of three on embedded NATS servers,
// each node's fold consumer is one copy in memory on its own server (its
// read cursor needs no quorum of the others: RELIABILITY.md's rolling
// upgrade whose consumers had none for a minute), the node's restart
// makes it there again, and the folds go on with a node stopped.
func TestFoldCursorOwnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	ctx := context.Background()
	nodes, ports, routes := fleetOf(t)
	a, b, c := nodes[0], nodes[1], nodes[2]
	own := func(when string, ns ...*fleetNode) {
		t.Helper()
		for _, n := range ns {
			poll.Until(t, 30*time.Second, when+": "+n.name+"'s fold consumer on its own server", func() error {
				at, err := foldCursorAt(ctx, n)
				if err == nil && at != n.name {
					err = fmt.Errorf("on server %s", at)
				}
				return err
			})
		}
	}
	own("started", a, b, c)

	c.stop()
	c2 := fleetStart(t, "node-c", c.dir, ports[2], routes)
	own("c restarted", c2)
	// b stopped: a and c fold what each other do, with no third server.
	b.stop()
	if _, _, err := a.app.Coordinator.PutGroup(ctx, "alt.cursor.a", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c2.app.Coordinator.PutGroup(ctx, "alt.cursor.c", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		n      *fleetNode
		group  string
		origin string
	}{{c2, "alt.cursor.a", "node-a"}, {a, "alt.cursor.c", "node-c"}} {
		poll.Eventually(t, 30*time.Second, p.n.name+" folds "+p.origin+"'s group with b stopped", func() bool {
			origin, err := p.n.db.PeerOwner(ctx, p.group)
			return err == nil && origin == p.origin
		})
	}
}

// TestFoldCursorServerLost: on an external NATS cluster a node's fold
// consumer is one copy on whichever server NATS picked; that server's
// loss does not stop the node's fold, which makes its consumer again on
// a server still up.
func TestFoldCursorServerLost(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kills a NATS server and waits out its elections")
	}
	ctx := context.Background()
	servers, _, urls := engineCluster(t)
	a := fleetJoinWith(t, Config{Name: "node-a", NATS: urls, ClaimTTL: engineTTL})
	b := fleetJoinWith(t, Config{Name: "node-b", NATS: urls, ClaimTTL: engineTTL})
	var at string
	poll.Until(t, 30*time.Second, "a's fold consumer made", func() error {
		var err error
		at, err = foldCursorAt(ctx, a)
		return err
	})
	for _, s := range servers {
		if s.Name() == at {
			s.Shutdown()
		}
	}
	if _, _, err := b.app.Coordinator.PutGroup(ctx, "alt.cursor.lost", store.GroupSpec{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 60*time.Second, "a folds b's group made after its fold consumer's server was lost", func() bool {
		origin, err := a.db.PeerOwner(ctx, "alt.cursor.lost")
		return err == nil && origin == "node-b"
	})
	poll.Until(t, 10*time.Second, "a's fold consumer made again elsewhere", func() error {
		now, err := foldCursorAt(ctx, a)
		if err == nil && now == at {
			err = fmt.Errorf("still on the lost server %s", at)
		}
		return err
	})
}

// TestFoldPassesFolded: a batch delivered again from before the mark (a
// consumer kept in memory, made again from its config when its server
// restarted) is folded only past the mark, and a batch all before it is
// acknowledged and passed over.
func TestFoldPassesFolded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := natstest.Connect(t, natstest.Server(t).ClientURL())
	stream := foldSetUp(t, js)
	for i := range 5 {
		if _, err := js.Publish(ctx, SubjectPrefix+"node-a", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "again", AckPolicy: jetstream.AckAllPolicy, MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(5)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 5 {
		t.Fatalf("fetched %d messages, want 5", len(msgs))
	}
	var seqs []uint64
	for _, m := range unfolded(msgs, 3) {
		md, _ := m.Metadata()
		seqs = append(seqs, md.Sequence.Stream)
	}
	if fmt.Sprint(seqs) != "[4 5]" {
		t.Fatalf("past mark 3: %v, want [4 5]", seqs)
	}
	if rest := unfolded(msgs, 5); len(rest) != 0 {
		t.Fatalf("past mark 5: %d messages, want none", len(rest))
	}
	poll.Until(t, 10*time.Second, "the batch before the mark acknowledged", func() error {
		info, err := cons.Info(ctx)
		if err == nil && info.AckFloor.Stream != 5 {
			err = fmt.Errorf("ack floor %d", info.AckFloor.Stream)
		}
		return err
	})
}
