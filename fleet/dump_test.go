package fleet

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/proccpu"
	"github.com/leasehold/leasehold/store"
)

// dumpNode is one node of a dump, fold, ownership or snapshot test: its
// appliance and catalog in dir, assembled as cmd/leasehold assembles one.
type dumpNode struct {
	name string
	dir  string
	app  *appliance.Appliance
	db   *store.DB
}

// dumpOpen opens a node's appliance in dir, closed with the test.
func dumpOpen(t testing.TB, name, dir string) *dumpNode {
	t.Helper()
	return dumpOpenIn(t, name, dir, nil)
}

// dumpOpenIn is dumpOpen with the appliance's Fleet (nil: alone): the
// node the fleet's parts are tested over, each part's fixture (foldPeer,
// ownNode, snapNode) adding that part. It is assembled by node.Assemble
// (openApp), as serve assembles a node, but without the node's fleet part
// (node.Fleet, fleet.New over a Gate), which fleetJoin's nodes have: that
// part starts claims, ownership, publisher, folder, replicator and dumper
// together and its Gate refuses admin writes until the fleet has joined,
// while these tests run one part alone, started when the test says
// (BenchmarkPeerSync's fold-after starts the folder once the publisher
// has drained), over a catalog set up first (ownFleet lets those writes
// through until its Ownership is made), with stand-ins the whole fleet
// would not take (snapNode's PeersFunc). Nor nodetest.Start: it adds only
// an HTTP server these tests never call. The catalog's open makes the
// indexes peer sync reads, as a node in a fleet's does (no NoOutbox).
func dumpOpenIn(t testing.TB, name, dir string, fleet appliance.Fleet) *dumpNode {
	t.Helper()
	app, db, err := openApp(appliance.Config{DataDir: dir, HistoryMinFreeBytes: 0, Logger: claimQuiet, Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return &dumpNode{name: name, dir: dir, app: app, db: db}
}

// dumpConn is a plain client of url, closed with the test.
func dumpConn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// dumpServe starts n's dumper on nc, stopped with the test.
func dumpServe(t testing.TB, nc *nats.Conn, n *dumpNode) *Dumper {
	t.Helper()
	d := NewDumper(nc, n.db, n.name, claimQuiet)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// dumpWork gives node n worker "w" (registered) and group name with
// ranges of size planned through high, then finishes the first done of
// them through the coordinator, as a worker would, and releases the group.
func dumpWork(t testing.TB, n *dumpNode, name string, size, high int64, done int) {
	t.Helper()
	ctx := context.Background()
	c := n.app.Coordinator
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var w leasehold.Node
	if len(nodes) > 0 {
		w = nodes[0]
	} else if w, err = c.RegisterNode(ctx, appliance.NodeSpec{Name: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PutGroup(ctx, name, store.GroupSpec{RangeSize: &size}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PlanTail(ctx, name, high); err != nil {
		t.Fatal(err)
	}
	if done == 0 {
		return
	}
	g, err := c.Lease(ctx, w.ID)
	if err != nil || g == nil {
		t.Fatalf("lease: %+v, %v", g, err)
	}
	for i := range done {
		r, err := c.Next(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence})
		if err != nil || r == nil {
			t.Fatalf("next %d: %+v, %v", i, r, err)
		}
		if _, err := c.Finish(ctx, leasehold.RangeHolder{NodeID: w.ID, RangeID: r.ID, Fence: g.Fence}, min(int64(i%2+1), r.End-r.Start+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release(ctx, leasehold.GroupHolder{NodeID: w.ID, GroupID: g.Group.ID, Fence: g.Fence}); err != nil {
		t.Fatal(err)
	}
}

// peerGroupRow is a peer_groups row with its group's claim revision, read
// straight from a catalog file: no store reader returns it whole.
type peerGroupRow struct {
	Origin, Holder        string
	Fence, ClaimRev       int64
	LeasedAt, HeartbeatAt sql.NullInt64
	SnapNext, SnapSize    sql.NullInt64
	SnapSHA               sql.NullString
	RangesDone, Headers   int64
	Owned                 bool
}

func msOf(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// foldDiff compares origin's own state (its groups, every range, its
// worker nodes) with the copy folded into b, row for row, and lists the
// differences. withNodeActivity also compares worker nodes' held counts
// and last visits, which only a dump carries (events of leases do not).
func foldDiff(t testing.TB, origin, b *dumpNode, withNodeActivity bool) []string {
	t.Helper()
	ctx := context.Background()
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(b.dir, "catalog.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var diffs []string
	differ := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	ids, err := origin.db.OwnGroupIDs(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		want, wantRanges, _, err := origin.db.OwnState(ctx, id, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.db.GroupByName(ctx, want.Name)
		if err != nil {
			differ("group %s: %v", want.Name, err)
			continue
		}
		w, gc := want.Group, got
		w.ID = got.ID
		if !gc.CreatedAt.Equal(w.CreatedAt) {
			differ("group %s: created %s, want %s", want.Name, gc.CreatedAt, w.CreatedAt)
		}
		gc.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
		if gc != w {
			differ("group %s: got %+v, want %+v", want.Name, got, w)
		}
		var p peerGroupRow
		err = raw.QueryRow(`SELECT p.origin, p.holder, p.fence, g.claim_rev, p.leased_at, p.heartbeat_at, p.snapshot_next, p.snapshot_size,
			p.snapshot_sha256, p.ranges_done, p.headers, g.owned FROM peer_groups p JOIN groups g ON g.id = p.group_id WHERE p.group_id = ?`, got.ID).
			Scan(&p.Origin, &p.Holder, &p.Fence, &p.ClaimRev, &p.LeasedAt, &p.HeartbeatAt, &p.SnapNext, &p.SnapSize, &p.SnapSHA, &p.RangesDone, &p.Headers, &p.Owned)
		if err != nil {
			differ("group %s: its peer row: %v", want.Name, err)
			continue
		}
		wp := peerGroupRow{Origin: origin.name, Holder: want.Holder, Fence: want.Fence, ClaimRev: int64(want.ClaimRev),
			LeasedAt: msOf(want.LeasedAt), HeartbeatAt: msOf(want.HeartbeatAt), RangesDone: want.RangesDone, Headers: want.Headers}
		if s := want.Snapshot; s != nil {
			wp.SnapNext, wp.SnapSize = sql.NullInt64{Int64: s.Next, Valid: true}, sql.NullInt64{Int64: s.Size, Valid: true}
			wp.SnapSHA = sql.NullString{String: s.SHA256, Valid: true}
		}
		if p != wp {
			differ("group %s: peer state %+v, want %+v", want.Name, p, wp)
		}
		gotRanges := map[int64]leasehold.Range{}
		for after := int64(0); ; {
			page, err := b.db.Ranges(ctx, got.ID, "", after, 10000)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page {
				gotRanges[r.Start] = r
			}
			if len(page) < 10000 {
				break
			}
			after = page[len(page)-1].ID
		}
		if len(gotRanges) != len(wantRanges) {
			differ("group %s: %d ranges, want %d", want.Name, len(gotRanges), len(wantRanges))
		}
		for _, wr := range wantRanges {
			gr, ok := gotRanges[wr.Start]
			if !ok {
				differ("group %s: range %d missing", want.Name, wr.Start)
				continue
			}
			if gr.End != wr.End || gr.Next != wr.Next || gr.Status != wr.Status || gr.Priority != wr.Priority || gr.Attempts != wr.Attempts ||
				gr.RuleVersion != wr.RuleVersion || gr.Headers != wr.Headers || !gr.UpdatedAt.Equal(wr.UpdatedAt.Truncate(time.Millisecond)) {
				differ("group %s: range %d: got %+v, want %+v", want.Name, wr.Start, gr, wr.Range)
			}
			if len(diffs) > 20 {
				return diffs
			}
		}
	}
	wantNodes, err := origin.db.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	peerNodes, err := b.db.PeerNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotNodes := map[string]leasehold.Node{}
	for _, n := range peerNodes {
		if n.Origin == origin.name {
			gotNodes[n.Name] = n.Node
		}
	}
	if len(gotNodes) != len(wantNodes) {
		differ("%d nodes of %s, want %d", len(gotNodes), origin.name, len(wantNodes))
	}
	for _, wn := range wantNodes {
		gn, ok := gotNodes[wn.Name]
		if !ok {
			differ("node %s missing", wn.Name)
			continue
		}
		if !nodeSame(gn, wn, withNodeActivity) {
			differ("node %s: got %+v, want %+v", wn.Name, gn, wn)
		}
	}
	return diffs
}

// nodeSame compares a worker node's fields but its origin-local id.
func nodeSame(a, b leasehold.Node, withActivity bool) bool {
	same := a.Name == b.Name && a.PriorityMin == b.PriorityMin && a.PriorityMax == b.PriorityMax && a.Capacity == b.Capacity &&
		a.Paused == b.Paused && a.PausedBy == b.PausedBy && timeSame(a.PausedAt, b.PausedAt)
	if withActivity {
		same = same && a.Held == b.Held && timeSame(a.LastSeenAt, b.LastSeenAt)
	}
	return same
}

func timeSame(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}

// foldConverge waits until b's copy of origin equals origin's state.
func foldConverge(t testing.TB, origin, b *dumpNode, withNodeActivity bool, within time.Duration) {
	t.Helper()
	var diffs []string
	if poll.Wait(within, 50*time.Millisecond, func() error {
		if diffs = foldDiff(t, origin, b, withNodeActivity); len(diffs) > 0 {
			return errors.New("differs")
		}
		return nil
	}) != nil {
		t.Fatalf("%s's copy of %s differs after %s, %d differences, the first:\n%v", b.name, origin.name, within, len(diffs), diffs[:min(5, len(diffs))])
	}
}

// dumpChunks asks origin for its dump as Rebuild does and returns the
// chunks' bodies, answering each.
func dumpChunks(t *testing.T, nc *nats.Conn, origin string) [][]byte {
	t.Helper()
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(DumpSubjectPrefix+origin, sub.Subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		m, err := sub.NextMsg(dumpWait)
		if err != nil {
			t.Fatalf("chunk %d: %v", len(out), err)
		}
		if m.Header.Get(headerDumpAlive) != "" {
			continue // the origin is reading a large group
		}
		out = append(out, m.Data)
		var c DumpChunk
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		if m.Reply == "" {
			t.Fatalf("chunk %d asks for no answer: the dump is not paced", c.Seq)
		}
		if err := m.Respond([]byte(strconv.Itoa(c.Seq))); err != nil {
			t.Fatal(err)
		}
		if c.Last {
			return out
		}
	}
}

// TestDumpManyRanges: a group with 8,000 ranges (and another small one)
// is dumped in several chunks, none over the bound, its ranges split over
// them with the group repeated, in order, and nothing lost or repeated;
// rebuilt from it, a peer's copy equals the origin's state row for row,
// worker nodes included, and a node of the origin's that the dump does
// not name is removed.
func TestDumpManyRanges(t *testing.T) {
	// Not parallel: the dump of 8,000 ranges is CPU-bound, and beside the
	// other tests on two cores a chunk took longer than the receiver's
	// 10 s wait ("sent no dump chunk for 10s" in a loaded run).
	s := natstest.Server(t)
	a := dumpOpen(t, "node-a", t.TempDir())
	b := dumpOpen(t, "node-b", t.TempDir())
	dumpWork(t, a, "big", 1, 8000, 30)
	dumpWork(t, a, "small", 1000, 5000, 2)
	dumpServe(t, dumpConn(t, s.ClientURL()), a)
	ncB := dumpConn(t, s.ClientURL())

	chunks := dumpChunks(t, ncB, "node-a")
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want the 8,000 ranges split over several", len(chunks))
	}
	starts := map[string]map[int64]bool{"big": {}, "small": {}}
	var nodes []string
	for i, body := range chunks {
		if len(body) > dumpChunkBytes {
			t.Errorf("chunk %d is %d bytes, over %d", i, len(body), dumpChunkBytes)
		}
		var c DumpChunk
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		if c.Seq != i || c.Last != (i == len(chunks)-1) || c.Catalog != a.db.CatalogID() || c.Err != "" {
			t.Errorf("chunk %d: seq %d last %v catalog %q err %q", i, c.Seq, c.Last, c.Catalog, c.Err)
		}
		for _, g := range c.Groups {
			for _, r := range g.Ranges {
				if starts[g.Group.Name][r.Start] {
					t.Errorf("range %s/%d sent twice", g.Group.Name, r.Start)
				}
				starts[g.Group.Name][r.Start] = true
			}
		}
		for _, n := range c.Nodes {
			nodes = append(nodes, n.Name)
			if len(n.TokenHash) != 32 {
				t.Errorf("node %s dumped with a token hash of %d bytes, want its sha-256", n.Name, len(n.TokenHash))
			}
		}
	}
	if len(starts["big"]) != 8000 || len(starts["small"]) != 5 {
		t.Fatalf("dumped %d ranges of big and %d of small, want 8000 and 5", len(starts["big"]), len(starts["small"]))
	}
	if len(nodes) != 1 || nodes[0] != "w" {
		t.Fatalf("dumped nodes %v, want [w]", nodes)
	}

	// b knew of a worker of a's that a has since deleted.
	ctx := context.Background()
	if err := b.db.Write(ctx, func(tx *store.Tx) error {
		return tx.FoldNode("node-a", store.FleetNode{Node: leasehold.Node{Name: "gone", Capacity: 1}}, 3)
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := Rebuild(ctx, ncB, b.db, "node-a", 5); err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuilt 8,005 ranges from %d chunks in %s", len(chunks), time.Since(start))
	if diffs := foldDiff(t, a, b, true); len(diffs) > 0 {
		t.Fatalf("rebuilt copy differs:\n%v", diffs)
	}
	peers, err := b.db.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Name != "node-a" || peers[0].Catalog != a.db.CatalogID() ||
		peers[0].Rebuilds != 1 || peers[0].Groups != 2 || peers[0].Nodes != 1 || peers[0].LastEventAt == nil {
		t.Fatalf("peers after the rebuild: %+v, %v", peers, err)
	}
	// a's worker's token, by the hash the dump carried, works at b.
	own, err := a.db.FleetNodes(ctx)
	if err != nil || len(own) != 1 {
		t.Fatalf("a's nodes: %+v, %v", own, err)
	}
	if v, err := b.db.Visit(ctx, own[0].TokenHash); err != nil || v.Name != "w" || v.Home != "node-a" {
		t.Fatalf("a's worker at b after the rebuild: %+v, %v; want w of node-a", v, err)
	}
}

// TestDumpReceiverGone: a receiver that stops answering after the first
// chunk holds the origin's dump for no more than the wait between chunks
// (the origin sends at most a window of chunks ahead, then gives up), and
// Stop ends a dump in progress at once.
func TestDumpReceiverGone(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := dumpOpen(t, "node-a", t.TempDir())
	// 30,000 ranges make 12 chunks, more than a window; seeded in one
	// statement (planned through the API they took most of the test's time).
	if err := a.db.BulkGroups(context.Background(), "big.", 1, 1, 30000); err != nil {
		t.Fatal(err)
	}
	dumper := dumpServe(t, dumpConn(t, s.ClientURL()), a)
	nc := dumpConn(t, s.ClientURL())
	leave := func() {
		t.Helper()
		sub, err := nc.SubscribeSync(nc.NewInbox())
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(DumpSubjectPrefix+"node-a", sub.Subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < dumpWindow; {
			m, err := sub.NextMsg(dumpWait)
			if err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
			if m.Header.Get(headerDumpAlive) == "" {
				i++
			}
		}
		for {
			m, err := sub.NextMsg(time.Second)
			if err != nil {
				break
			}
			if m.Header.Get(headerDumpAlive) == "" {
				t.Fatalf("a chunk past the window came unanswered: %d bytes", len(m.Data))
			}
		}
		sub.Unsubscribe()
	}
	leave()
	left := time.Now()
	poll.Eventually(t, dumpWait+5*time.Second, "the origin ends the dump of a receiver gone", func() bool { return len(dumper.slots) == 0 })
	if took := time.Since(left); took < dumpWait-2*time.Second {
		t.Fatalf("the dump ended %s after the receiver left: it was not held by the window", took)
	}
	leave()
	stopped := time.Now()
	dumper.Stop()
	if took := time.Since(stopped); took > time.Second {
		t.Fatalf("Stop took %s with a dump waiting on its receiver", took)
	}
}

// TestRebuildUnavailable: an origin that serves no dump, or stops in the
// middle of one, makes Rebuild fail as unavailable (and the first at once,
// not after the wait between chunks); a failed dump says why.
func TestRebuildUnavailable(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	b := dumpOpen(t, "node-b", t.TempDir())
	nc := dumpConn(t, s.ClientURL())
	ctx := context.Background()
	t.Run("NoResponders", func(t *testing.T) {
		start := time.Now()
		err := Rebuild(ctx, nc, b.db, "node-x", 5)
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("rebuild from no one: %v, want unavailable", err)
		}
		if took := time.Since(start); took > dumpWait/2 {
			t.Fatalf("no responders took %s to notice", took)
		}
	})
	t.Run("Failed", func(t *testing.T) {
		origin := dumpConn(t, s.ClientURL())
		sub, err := origin.Subscribe(DumpSubjectPrefix+"node-f", func(m *nats.Msg) {
			body, _ := json.Marshal(DumpChunk{Last: true, Err: "the catalog is closed"})
			respondAs(m, "node-f", body)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		origin.Flush()
		err = Rebuild(ctx, nc, b.db, "node-f", 5)
		if !errors.Is(err, leasehold.ErrUnavailable) || !strings.Contains(err.Error(), "the catalog is closed") {
			t.Fatalf("rebuild from a failed dump: %v, want unavailable saying why", err)
		}
	})
	// Chunks sent at once are folded in fewer writes, each checked: a
	// chunk out of order fails the rebuild, unrecorded, after the ones
	// before it.
	chunked := func(seqs ...int) func(m *nats.Msg) {
		return func(m *nats.Msg) {
			for i, seq := range seqs {
				g := store.PeerGroup{Group: leasehold.Group{Name: fmt.Sprintf("batched.%d", seq), Active: true, RangeSize: 10, Start: 1, TailEnd: 10, HistoryFloor: 1}, ClaimRev: 1}
				r := store.PeerRange{Range: leasehold.Range{Start: 1, End: 10, Next: 1, Status: leasehold.StatusPlanned, Priority: -1}}
				body, _ := json.Marshal(DumpChunk{Seq: seq, Last: i == len(seqs)-1, Catalog: "cat-o", Groups: []DumpGroup{{Group: g, Ranges: []store.PeerRange{r}}}})
				if err := respondAs(m, "node-o", body); err != nil {
					t.Error(err)
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		seqs []int
		want int // groups folded
	}{{"Batched", []int{0, 1, 2, 3, 4, 5, 6}, 7}, {"OutOfOrder", []int{0, 1, 3, 2}, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			b := dumpOpen(t, "node-b", t.TempDir())
			origin := dumpConn(t, s.ClientURL())
			sub, err := origin.Subscribe(DumpSubjectPrefix+"node-o", chunked(tc.seqs...))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			origin.Flush()
			err = Rebuild(ctx, nc, b.db, "node-o", 5)
			ps, _ := b.db.Peers(ctx)
			if tc.want == len(tc.seqs) && (err != nil || len(ps) != 1 || ps[0].Groups != int64(tc.want)) {
				t.Fatalf("rebuild: %v, peers %+v; want %d groups", err, ps, tc.want)
			}
			if tc.want < len(tc.seqs) && (!errors.Is(err, leasehold.ErrUnavailable) || !strings.Contains(err.Error(), "chunk 3 came where 2 was due") || len(ps) != 0) {
				t.Fatalf("rebuild: %v, peers %+v; want unavailable, chunk 3 out of order, no peer", err, ps)
			}
			for i := range len(tc.seqs) {
				_, err := b.db.GroupByName(ctx, fmt.Sprintf("batched.%d", i))
				if folded := err == nil; folded != (i < tc.want) {
					t.Fatalf("group batched.%d folded %v: %v", i, folded, err)
				}
			}
		})
	}
	t.Run("Stalled", func(t *testing.T) {
		origin := dumpConn(t, s.ClientURL())
		sub, err := origin.Subscribe(DumpSubjectPrefix+"node-s", func(m *nats.Msg) {
			body, _ := json.Marshal(DumpChunk{Seq: 0})
			respondAs(m, "node-s", body) // and nothing more
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		origin.Flush()
		start := time.Now()
		err = Rebuild(ctx, nc, b.db, "node-s", 5)
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("rebuild from a stalled dump: %v, want unavailable", err)
		}
		if took := time.Since(start); took < dumpWait {
			t.Fatalf("gave up after %s, before the wait between chunks", took)
		}
		if ps, _ := b.db.Peers(ctx); len(ps) != 0 {
			t.Fatalf("a half dump recorded peers %+v", ps)
		}
	})
}

// BenchmarkRebuild100k measures a dump of one group of 100,000 ranges
// (the most one plan call makes), served and folded on one server.
func BenchmarkRebuild100k(b *testing.B) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	defer s.Shutdown()
	a := dumpOpen(b, "node-a", b.TempDir())
	dumpWork(b, a, "big", 1, 100000, 0)
	dumpServe(b, dumpConn(b, s.ClientURL()), a)
	nc := dumpConn(b, s.ClientURL())
	b.ResetTimer()
	for range b.N {
		peer := dumpOpen(b, "node-b", b.TempDir())
		if err := Rebuild(context.Background(), nc, peer.db, "node-a", 5); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRebuildGroups measures a joining node's catch-up: a dump of
// many groups of two ranges each (the bulk seeding path's shape), served
// and folded on one server. It reports groups/s.
//
//	go test -run '^$' -bench RebuildGroups -benchtime 1x ./fleet
//
// LEASEHOLD_BENCH_REBUILD_GROUPS sets the number of groups (100,000 by
// default; bench.sh measures 1,000,000).
func BenchmarkRebuildGroups(b *testing.B) {
	groups := 100000
	if v := os.Getenv("LEASEHOLD_BENCH_REBUILD_GROUPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("LEASEHOLD_BENCH_REBUILD_GROUPS=%q is not a count of groups", v)
		}
		groups = n
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	defer s.Shutdown()
	a := dumpOpen(b, "node-a", b.TempDir())
	if err := a.db.BulkGroups(context.Background(), "g.", int64(groups), 100, 2); err != nil {
		b.Fatal(err)
	}
	dumpServe(b, dumpConn(b, s.ClientURL()), a)
	nc := dumpConn(b, s.ClientURL())
	b.ResetTimer()
	start := time.Now()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		peer := dumpOpen(b, "node-b", b.TempDir())
		b.StartTimer()
		cpu0 := proccpu.Used()
		if err := Rebuild(context.Background(), nc, peer.db, "node-a", 5); err != nil {
			b.Fatal(err)
		}
		cpu += proccpu.Used() - cpu0
	}
	b.ReportMetric(float64(groups*b.N)/time.Since(start).Seconds(), "groups/s")
	// The process's CPU over the rebuilds: the origin's dump and the
	// receiver's fold together, both on this machine's cores.
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}
