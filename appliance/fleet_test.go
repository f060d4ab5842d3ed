package appliance_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/store"
)

// claimFleet is a Fleet whose claims the test sets by hand: the claims
// this node holds and their revisions, whether it has joined, and whether
// the claims lapse at the next commit of the catalog (armed by the test, as
// a node paused past its claim would find them).
type claimFleet struct {
	mu       sync.Mutex
	held     map[string]uint64
	ready    error
	lapseArm bool
}

func (f *claimFleet) Holds(group string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rev, ok := f.held[group]
	return rev, ok
}

func (f *claimFleet) set(held map[string]uint64, ready error) {
	f.mu.Lock()
	f.held, f.ready, f.lapseArm = held, ready, false
	f.mu.Unlock()
}

// armLapse makes every claim lapse once the next batch of writes commits.
func (f *claimFleet) armLapse() {
	f.mu.Lock()
	f.lapseArm = true
	f.mu.Unlock()
}

// committed is the catalog's BatchFunc: a commit with the lapse armed
// ends every claim, between the write and its answer.
func (f *claimFleet) committed(int) {
	f.mu.Lock()
	if f.lapseArm {
		f.held, f.lapseArm = map[string]uint64{}, false
	}
	f.mu.Unlock()
}

func (f *claimFleet) Want(string)                             {}
func (f *claimFleet) ClaimNow(context.Context, []string) bool { return false }
func (f *claimFleet) Ensure(context.Context, string) error    { return nil }
func (f *claimFleet) Idle(int64)                              {}
func (f *claimFleet) Forward(context.Context, string, appliance.AdminOp) (appliance.AdminResult, error) {
	return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "no forwarding in this test")
}

func (f *claimFleet) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

// fleetClaimRev is the revision of the claim the test node holds on g.
const fleetClaimRev = 5

// fleetWorld is a node in a fleet holding g's claim at fleetClaimRev, with
// worker node w holding g at fence, range r in work, and a window
// snapshot stored under that lease.
type fleetWorld struct {
	t     *testing.T
	ctx   context.Context
	app   *appliance.Appliance
	fleet *claimFleet
	dir   string
	view  *sql.DB
	w     leasehold.Node
	gid   int64
	fence int64
	r     leasehold.Range
}

func newFleetWorld(t *testing.T) *fleetWorld {
	t.Helper()
	fl := &claimFleet{held: map[string]uint64{"g": fleetClaimRev}}
	clock := nodetest.NewClock()
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Minute, Fleet: fl, Store: store.Options{BatchFunc: fl.committed}, Clock: clock.Now})
	app, dir := n.App, n.DataDir
	w := &fleetWorld{t: t, ctx: context.Background(), app: app, fleet: fl, dir: dir}
	c := app.Coordinator
	var err error
	if w.w, err = c.RegisterNode(w.ctx, appliance.NodeSpec{Name: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PutGroup(w.ctx, "g", store.GroupSpec{RangeSize: leasehold.Int(100), Start: leasehold.Int(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PlanTail(w.ctx, "g", 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Own(w.ctx, "g", fleetClaimRev); err != nil {
		t.Fatal(err)
	}
	g, err := c.Lease(w.ctx, w.w.ID)
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	w.gid, w.fence = g.Group.ID, g.Fence
	r, err := c.Next(w.ctx, leasehold.GroupHolder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence})
	if err != nil || r == nil {
		t.Fatalf("next: %v, %v", r, err)
	}
	w.r = *r
	if _, err := app.Snapshots.Put(w.ctx, appliance.Upload{GroupID: w.gid, NodeID: w.w.ID, Fence: w.fence, Next: 1, Body: strings.NewReader("the window")}); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	w.view, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "catalog.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	w.view.SetMaxOpenConns(1)
	t.Cleanup(func() { w.view.Close() })
	return w
}

// catalog is every row of the catalog's state tables, one line a row, and
// the snapshot files on disk with their sizes and hashes.
func (w *fleetWorld) catalog() []string {
	w.t.Helper()
	tx, err := w.view.Begin()
	if err != nil {
		w.t.Fatal(err)
	}
	defer tx.Rollback()
	var out []string
	for _, table := range []string{"groups", "ranges", "group_leases", "nodes", "events", "peer_groups"} {
		rows, err := tx.Query(`SELECT * FROM "` + table + `" ORDER BY rowid`)
		if err != nil {
			w.t.Fatalf("%s: %v", table, err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				w.t.Fatal(err)
			}
			var b strings.Builder
			b.WriteString(table)
			for i, c := range cols {
				fmt.Fprintf(&b, " %s=%s", c, map[bool]string{true: vals[i].String, false: "NULL"}[vals[i].Valid])
			}
			out = append(out, b.String())
		}
		if err := rows.Err(); err != nil {
			w.t.Fatal(err)
		}
		rows.Close()
	}
	entries, err := os.ReadDir(filepath.Join(w.dir, "snapshots"))
	if err != nil {
		w.t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(w.dir, "snapshots", e.Name()))
		if err != nil {
			w.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("file %s %d %x", e.Name(), len(b), sha256.Sum256(b)))
	}
	return out
}

// snapshotWhole fails the test unless the group's recorded snapshot, if
// any, can be opened and read whole.
func (w *fleetWorld) snapshotWhole() {
	w.t.Helper()
	f, snap, err := w.app.Snapshots.Open(w.ctx, w.gid)
	if err != nil {
		w.t.Fatalf("the recorded snapshot cannot be opened: %v", err)
	}
	if f == nil {
		return
	}
	defer f.Close()
	n, err := io.Copy(io.Discard, f)
	if err != nil || n != snap.Size {
		w.t.Fatalf("the recorded snapshot reads %d bytes (%v), want %d", n, err, snap.Size)
	}
}

// fleetCall is one holder call on the coordinator or the snapshot store,
// as the web answers it. A snapshot download is fenced by its heartbeat
// (web's getSnapshot calls Heartbeat before it opens the file), so the
// Heartbeat row is the download's fence.
type fleetCall struct {
	name string
	do   func(w *fleetWorld) error
}

var fleetCalls = []fleetCall{
	{"Next", func(w *fleetWorld) error {
		_, err := w.app.Coordinator.Next(w.ctx, leasehold.GroupHolder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence})
		return err
	}},
	{"Heartbeat", func(w *fleetWorld) error {
		return w.app.Coordinator.Heartbeat(w.ctx, leasehold.GroupHolder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence})
	}},
	{"Release", func(w *fleetWorld) error {
		return w.app.Coordinator.Release(w.ctx, leasehold.GroupHolder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence})
	}},
	{"Progress", func(w *fleetWorld) error {
		_, err := w.app.Coordinator.Progress(w.ctx, leasehold.RangeHolder{NodeID: w.w.ID, RangeID: w.r.ID, Fence: w.fence}, w.r.Start+10)
		return err
	}},
	{"Finish", func(w *fleetWorld) error {
		_, err := w.app.Coordinator.Finish(w.ctx, leasehold.RangeHolder{NodeID: w.w.ID, RangeID: w.r.ID, Fence: w.fence}, 7)
		return err
	}},
	{"Fail", func(w *fleetWorld) error {
		_, err := w.app.Coordinator.Fail(w.ctx, leasehold.RangeHolder{NodeID: w.w.ID, RangeID: w.r.ID, Fence: w.fence}, "connection reset", true)
		return err
	}},
	{"ReleaseUnreadable", func(w *fleetWorld) error {
		return w.app.Coordinator.ReleaseUnreadable(w.ctx, leasehold.GroupHolder{NodeID: w.w.ID, GroupID: w.gid, Fence: w.fence}, "gzip: invalid header")
	}},
	{"SnapshotUpload", func(w *fleetWorld) error {
		_, err := w.app.Snapshots.Put(w.ctx, appliance.Upload{GroupID: w.gid, NodeID: w.w.ID, Fence: w.fence, Next: 50, Body: strings.NewReader("a newer window")})
		return err
	}},
}

// TestFleetFencing is rule 6's ownership fence: in a fleet, every holder
// call of a worker that holds its lease at the right fence is still
// refused with lease lost, and changes nothing in the catalog or the
// snapshot files, when this node does not hold the group's claim, holds a
// claim won anew (a revision other than the one the lease was granted
// under), or has not joined its fleet. A claim that lapses after the
// call's write committed but before it is answered is lease lost too, and
// leaves a recorded snapshot whole. The same call with the claim restored
// succeeds, so each refusal is the fleet's doing.
func TestFleetFencing(t *testing.T) {
	t.Parallel()
	notJoined := leasehold.Errorf(leasehold.KindUnavailable, "waiting for the fleet's NATS servers")
	cases := []struct {
		name string
		// claims and ready set the fleet before the call; lapse arms the
		// claims to lapse at the call's commit instead.
		claims map[string]uint64
		ready  error
		lapse  bool
	}{
		{"ClaimNotHeld", map[string]uint64{}, nil, false},
		{"ClaimWonAnew", map[string]uint64{"g": fleetClaimRev + 1}, nil, false},
		{"NotJoined", map[string]uint64{"g": fleetClaimRev}, notJoined, false},
		{"ClaimLapsesBeforeAnswer", map[string]uint64{"g": fleetClaimRev}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, call := range fleetCalls {
				t.Run(call.name, func(t *testing.T) {
					w := newFleetWorld(t)
					w.fleet.set(tc.claims, tc.ready)
					if tc.lapse {
						w.fleet.armLapse()
					}
					before := w.catalog()
					err := call.do(w)
					if !errors.Is(err, leasehold.ErrLeaseLost) {
						t.Fatalf("%s: got %v (kind %q), want lease lost", call.name, err, leasehold.KindOf(err))
					}
					if tc.lapse {
						// The write may stand (the answer says so); what
						// it recorded must be whole.
						w.snapshotWhole()
					} else if after := w.catalog(); !slices.Equal(before, after) {
						t.Errorf("the refused call changed the catalog:\nbefore %s\nafter  %s", strings.Join(before, "\n       "), strings.Join(after, "\n       "))
					}
					if tc.lapse {
						return
					}
					w.fleet.set(map[string]uint64{"g": fleetClaimRev}, nil)
					if err := call.do(w); err != nil {
						t.Errorf("%s with the claim held: %v", call.name, err)
					}
				})
			}
		})
	}
}
