package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// failWorld is a catalog with one node w (every priority) and groups
// named as asked, each with its tail planned 1..3000 in ranges of 1000.
type failWorld struct {
	t     *testing.T
	db    *DB
	clock *testClock
	node  int64
	gids  map[string]int64
}

func newFailWorld(t *testing.T, groups ...string) *failWorld {
	t.Helper()
	return newFailWorldWith(t, Options{}, groups...)
}

// newFailWorldWith is newFailWorld on a catalog opened with o (its clock
// the world's).
func newFailWorldWith(t *testing.T, o Options, groups ...string) *failWorld {
	t.Helper()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	o.NowFunc = clock.Now
	w := &failWorld{t: t, db: openTest(t, "", o), clock: clock, gids: map[string]int64{}}
	must(t, w.db.Write(context.Background(), func(tx *Tx) error {
		n, err := tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 8})
		if err != nil {
			return err
		}
		w.node = n.ID
		for _, name := range groups {
			g, _, err := tx.PutGroup(name, GroupSpec{RangeSize: ptr(int64(1000))})
			if err != nil {
				return err
			}
			if _, err := tx.PlanTail(g.ID, 3000); err != nil {
				return err
			}
			w.gids[name] = g.ID
		}
		return nil
	}))
	return w
}

const failMaxAttempts = 3

func (w *failWorld) write(fn func(tx *Tx) error) error {
	return w.db.Write(context.Background(), fn)
}

// lease leases a group to w; nil when there is none to lease.
func (w *failWorld) lease() *leasehold.Grant {
	w.t.Helper()
	var g *leasehold.Grant
	must(w.t, w.write(func(tx *Tx) error {
		var err error
		g, err = tx.LeaseGroup(LeaseRequest{NodeID: w.node, TTL: time.Minute, MaxAttempts: failMaxAttempts})
		return err
	}))
	return g
}

func (w *failWorld) next(gid, fence int64) *leasehold.Range {
	w.t.Helper()
	var r *leasehold.Range
	must(w.t, w.write(func(tx *Tx) error {
		var err error
		r, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: gid, NodeID: w.node, Fence: fence}, BandMin: -10, BandMax: 10, MaxAttempts: failMaxAttempts})
		return err
	}))
	return r
}

func (w *failWorld) fail(rangeID, fence int64, text string, retry bool) (leasehold.Range, error) {
	var r leasehold.Range
	err := w.write(func(tx *Tx) error {
		var err error
		r, err = tx.FailRange(leasehold.RangeHolder{RangeID: rangeID, NodeID: w.node, Fence: fence}, text, retry, failMaxAttempts)
		return err
	})
	return r, err
}

// TestFailRange is rule 10 for a range: a failure with retry plans the
// range again at its resume point with its error kept, until its attempts
// reach the maximum; one without retry fails it at once; a bad text or a
// caller that is not the holder changes nothing.
func TestFailRange(t *testing.T) {
	t.Parallel()
	t.Run("RetryUntilMaxAttempts", func(t *testing.T) {
		w := newFailWorld(t, "g")
		g := w.lease()
		r := w.next(g.Group.ID, g.Fence)
		must(t, w.write(func(tx *Tx) error {
			_, err := tx.Progress(leasehold.RangeHolder{RangeID: r.ID, NodeID: w.node, Fence: g.Fence}, r.Start+10)
			return err
		}))
		for attempt := int64(1); attempt <= failMaxAttempts; attempt++ {
			w.clock.now = w.clock.now.Add(time.Second)
			text := "connection reset #" + string(rune('0'+attempt))
			got, err := w.fail(r.ID, g.Fence, text, true)
			if err != nil {
				t.Fatalf("attempt %d: fail: %v", attempt, err)
			}
			wantStatus := leasehold.StatusPlanned
			if attempt == failMaxAttempts {
				wantStatus = leasehold.StatusFailed
			}
			if got.Status != wantStatus || got.Attempts != attempt || got.Next != r.Start+10 {
				t.Errorf("attempt %d: got %s attempts %d next %d, want %s attempts %d next %d",
					attempt, got.Status, got.Attempts, got.Next, wantStatus, attempt, r.Start+10)
			}
			if got.LastError == nil || *got.LastError != text || got.LastErrorAt == nil || !got.LastErrorAt.Equal(w.clock.now) {
				t.Errorf("attempt %d: last error %v at %v, want %q at %s", attempt, got.LastError, got.LastErrorAt, text, w.clock.now)
			}
			stored, err := w.db.Range(context.Background(), r.ID)
			if err != nil || stored.Status != wantStatus || stored.LastError == nil || *stored.LastError != text {
				t.Errorf("attempt %d: stored range %+v, %v", attempt, stored, err)
			}
			if attempt < failMaxAttempts {
				if again := w.next(g.Group.ID, g.Fence); again == nil || again.ID != r.ID {
					t.Fatalf("attempt %d: next after a retryable failure = %+v, want range %d again", attempt, again, r.ID)
				}
			}
		}
		if again := w.next(g.Group.ID, g.Fence); again == nil || again.ID == r.ID {
			t.Errorf("next after the range failed for good = %+v, want another range", again)
		}
	})
	t.Run("NoRetry", func(t *testing.T) {
		w := newFailWorld(t, "g")
		g := w.lease()
		r := w.next(g.Group.ID, g.Fence)
		got, err := w.fail(r.ID, g.Fence, "article format unknown", false)
		if err != nil || got.Status != leasehold.StatusFailed || got.Attempts != 1 || got.LastError == nil {
			t.Fatalf("got %+v, %v; want failed after 1 attempt with its error", got, err)
		}
		f, err := w.db.Findings(context.Background(), w.clock.now, FindingBounds{})
		if err != nil || len(f) != 1 || f[0].Kind != leasehold.FindingRangeFailed || !strings.Contains(f[0].Detail, "article format unknown") {
			t.Errorf("findings = %+v, %v; want one range_failed naming the error", f, err)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		w := newFailWorld(t, "g")
		g := w.lease()
		r := w.next(g.Group.ID, g.Fence)
		for _, c := range []struct {
			name  string
			fence int64
			text  string
			kind  leasehold.ErrorKind
		}{
			{"Empty", g.Fence, "", leasehold.KindUnprocessable},
			{"TooLong", g.Fence, strings.Repeat("x", leasehold.MaxErrorBytes+1), leasehold.KindUnprocessable},
			{"StaleFence", g.Fence - 1, "boom", leasehold.KindLeaseLost},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := w.fail(r.ID, c.fence, c.text, true)
				if leasehold.KindOf(err) != c.kind {
					t.Errorf("got %v, want kind %v", err, c.kind)
				}
				stored, _ := w.db.Range(context.Background(), r.ID)
				if stored.Status != leasehold.StatusLeased || stored.LastError != nil {
					t.Errorf("the refused fail changed the range: %+v", stored)
				}
			})
		}
		if _, err := w.fail(r.ID, g.Fence, strings.Repeat("x", leasehold.MaxErrorBytes), true); err != nil {
			t.Errorf("an error of %d bytes: %v", leasehold.MaxErrorBytes, err)
		}
	})
}

// TestQuarantine is rule 10 for a window that will not load: the release
// with its error quarantines the group, which lease choice passes over
// (another group is leased instead, then nothing), with a finding naming
// the node and the error; lifting it hands the same window out again;
// dropping the window is refused while held, then clears the snapshot and
// lifts the quarantine.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	w := newFailWorld(t, "a", "b")
	ctx := context.Background()
	snap := leasehold.Snapshot{Next: 1501, Size: 10, SHA256: "ab", At: w.clock.now, File: 7}
	must(t, w.write(func(tx *Tx) error { _, err := tx.SetSnapshot(w.gids["a"], 0, 0, snap); return err }))
	g := w.lease()
	if g == nil || g.Group.ID != w.gids["a"] {
		t.Fatalf("first lease = %+v, want group a", g)
	}
	r := w.next(g.Group.ID, g.Fence)
	if err := w.write(func(tx *Tx) error {
		return tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, failMaxAttempts, "")
	}); leasehold.KindOf(err) != leasehold.KindUnprocessable {
		t.Fatalf("an empty window_error: %v, want unprocessable", err)
	}
	must(t, w.write(func(tx *Tx) error {
		return tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, failMaxAttempts, "gzip: invalid header")
	}))
	a, err := w.db.GroupByName(ctx, "a")
	if err != nil || a.Quarantine == nil || a.Quarantine.Error != "gzip: invalid header" || a.Quarantine.Node != "w" || !a.Quarantine.At.Equal(w.clock.now) {
		t.Fatalf("group a after the release = %+v, %v; want quarantined by w", a.Quarantine, err)
	}
	if got, _ := w.db.Range(ctx, r.ID); got.Status != leasehold.StatusPlanned {
		t.Errorf("the range in work after the release: %s, want planned", got.Status)
	}
	f, err := w.db.Findings(ctx, w.clock.now, FindingBounds{})
	if err != nil || len(f) != 1 || f[0].Kind != leasehold.FindingWindowUnreadable || f[0].Group != "a" || f[0].Node != "w" ||
		!strings.Contains(f[0].Detail, "gzip: invalid header") {
		t.Errorf("findings = %+v, %v; want one window_unreadable of a by w with the error", f, err)
	}
	if c, err := w.db.FindingCounts(ctx, w.clock.now, FindingBounds{}); err != nil || c[leasehold.FindingWindowUnreadable] != 1 {
		t.Errorf("finding counts = %v, %v", c, err)
	}
	if g := w.lease(); g == nil || g.Group.ID != w.gids["b"] {
		t.Fatalf("the lease after the quarantine = %+v, want group b", g)
	}
	// Past the TTL b's lease is quiet, so only a quarantined group is left
	// besides a takeover of b.
	w.clock.now = w.clock.now.Add(2 * time.Minute)
	if g := w.lease(); g == nil || g.Group.ID != w.gids["b"] || !g.Takeover {
		t.Fatalf("the lease after b went quiet = %+v, want b taken over, never a", g)
	}
	if g := w.lease(); g != nil {
		t.Fatalf("with a quarantined and b held: lease = %+v, want nothing", g)
	}

	var lifted leasehold.Group
	must(t, w.write(func(tx *Tx) error { var err error; lifted, err = tx.LiftQuarantine("a"); return err }))
	if lifted.Quarantine != nil {
		t.Errorf("lifted group = %+v, want no quarantine", lifted)
	}
	again := w.lease()
	if again == nil || again.Group.ID != w.gids["a"] || again.Snapshot == nil || again.Snapshot.Next != snap.Next || again.Snapshot.File != snap.File {
		t.Fatalf("the lease after the lift = %+v, want a with its window", again)
	}

	if err := w.write(func(tx *Tx) error { _, _, err := tx.DropSnapshot("a", failMaxAttempts); return err }); !errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("dropping the window of a held group: %v, want conflict", err)
	}
	must(t, w.write(func(tx *Tx) error {
		return tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: again.Group.ID, NodeID: w.node, Fence: again.Fence}, failMaxAttempts, "truncated")
	}))
	var dropped *leasehold.Snapshot
	var afterDrop leasehold.Group
	must(t, w.write(func(tx *Tx) error {
		var err error
		afterDrop, dropped, err = tx.DropSnapshot("a", failMaxAttempts)
		return err
	}))
	if dropped == nil || dropped.File != snap.File || afterDrop.Quarantine != nil {
		t.Errorf("drop = %+v, group %+v; want the window dropped and the quarantine lifted", dropped, afterDrop)
	}
	if s, err := w.db.Snapshot(ctx, w.gids["a"]); s != nil || err != nil {
		t.Errorf("snapshot after the drop = %+v, %v; want none", s, err)
	}
	if g := w.lease(); g == nil || g.Group.ID != w.gids["a"] || g.Snapshot != nil {
		t.Fatalf("the lease after the drop = %+v, want a without a window", g)
	}
}

// TestQuarantineLeaseChoiceSeeks: lease choice still reaches the free
// groups by one seek of its partial indexes, which leave quarantined
// groups out, so a quarantine costs the choice nothing.
func TestQuarantineLeaseChoiceSeeks(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	for q, index := range map[*query]string{qChooseFreeTail: "groups_free_tail", qChooseFreeHist: "groups_free_hist"} {
		p := plan(t, db, q.sql, -10, 10, leasehold.DefaultSourceKind)
		if len(p) != 1 || !strings.Contains(p[0], "USING INDEX "+index) {
			t.Errorf("plan of %q: %q, want one walk of %s", q.sql, p, index)
		}
	}
}

// TestMigrationFromV5: a catalog at version 5 (the schema before rule 10)
// keeps its groups and ranges, which come without errors or quarantine,
// and takes a range's error after.
func TestMigrationFromV5(t *testing.T) {
	t.Parallel()
	path := migrateFrom(t, "testdata/schema-v5.sql", 5,
		`INSERT INTO groups (id, name, range_size, start_id, tail_end, history_floor, free_since, created_at, updated_at) VALUES (1, 'alt.kept', 10, 1, 10, 1, 0, 0, 0)`,
		`INSERT INTO group_leases (group_id) VALUES (1)`,
		`INSERT INTO ranges (group_id, start_id, end_id, next_id, priority, updated_at) VALUES (1, 1, 10, 1, -1, 0)`)
	db := openTest(t, path, Options{})
	ctx := context.Background()
	g, err := db.GroupByName(ctx, "alt.kept")
	if err != nil || g.Quarantine != nil {
		t.Fatalf("group after migration: %+v, %v", g, err)
	}
	rs, err := db.Ranges(ctx, g.ID, "", 0, 10)
	if err != nil || len(rs) != 1 || rs[0].LastError != nil || rs[0].LastErrorAt != nil {
		t.Fatalf("ranges after migration: %+v, %v", rs, err)
	}
	must(t, db.rawExec(`UPDATE ranges SET last_error = 'x', last_error_at = 1 WHERE id = ?`, rs[0].ID))
	if r, err := db.Range(ctx, rs[0].ID); err != nil || r.LastError == nil || *r.LastError != "x" {
		t.Errorf("range error after migration: %+v, %v", r, err)
	}
}

// TestFoldFailures: a range's last error and a group's quarantine travel
// with the state peer sync publishes (OwnState) and are folded at a peer,
// so the fleet shows them and a node that takes the group over keeps it
// quarantined.
func TestFoldFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newFailWorld(t, "g")
	if _, err := w.db.PeerIndexes(ctx, true); err != nil {
		t.Fatal(err)
	}
	g := w.lease()
	r := w.next(g.Group.ID, g.Fence)
	if _, err := w.fail(r.ID, g.Fence, "nntp: 430 no such article", false); err != nil {
		t.Fatal(err)
	}
	must(t, w.write(func(tx *Tx) error {
		return tx.ReleaseUnreadable(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, failMaxAttempts, "gzip: invalid header")
	}))
	state, ranges, _, err := w.db.OwnState(ctx, g.Group.ID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if q := state.Quarantine; q == nil || q.Error != "gzip: invalid header" || q.Node != "w" {
		t.Fatalf("published quarantine = %+v", q)
	}
	peer := openTest(t, "", Options{NowFunc: w.clock.Now})
	id, ok := foldIn(t, peer, "a", state, ranges)
	if !ok {
		t.Fatal("the state was refused")
	}
	folded, err := peer.GroupByID(ctx, id)
	if err != nil || folded.Quarantine == nil || folded.Quarantine.Error != "gzip: invalid header" || !folded.Quarantine.At.Equal(state.Quarantine.At) {
		t.Errorf("folded group: %+v, %v; want the quarantine", folded.Quarantine, err)
	}
	rs, err := peer.Ranges(ctx, id, leasehold.StatusFailed, 0, 10)
	if err != nil || len(rs) != 1 || rs[0].Start != r.Start || rs[0].LastError == nil || *rs[0].LastError != "nntp: 430 no such article" || rs[0].LastErrorAt == nil {
		t.Errorf("folded failed ranges: %+v, %v; want range %d with its error", rs, err, r.Start)
	}
	// Lifted at the owner, the next state lifts it at the peer too.
	must(t, w.write(func(tx *Tx) error { _, err := tx.LiftQuarantine("g"); return err }))
	state, ranges, _, err = w.db.OwnState(ctx, g.Group.ID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	foldIn(t, peer, "a", state, ranges)
	if folded, err := peer.GroupByID(ctx, id); err != nil || folded.Quarantine != nil {
		t.Errorf("folded group after the lift: %+v, %v", folded.Quarantine, err)
	}
}

// TestAttemptLimitTold: every write that fails a range because it used up
// its attempts tells Options.AttemptLimitFunc of it once it commits, with
// the write's context and the range as failed; a write rolled back tells
// nothing, and neither does a worker failing its own range (its call
// answers with it).
func TestAttemptLimitTold(t *testing.T) {
	t.Parallel()
	type callerKey struct{}
	type told struct {
		caller any
		ranges []leasehold.Range
	}
	open := func(t *testing.T) (*failWorld, *[]told, context.Context) {
		var calls []told
		w := newFailWorldWith(t, Options{AttemptLimitFunc: func(ctx context.Context, failed []leasehold.Range) {
			calls = append(calls, told{ctx.Value(callerKey{}), failed})
		}}, "g")
		return w, &calls, context.WithValue(context.Background(), callerKey{}, "the caller")
	}
	// leasedAtLimit leases g's first range to w and marks it leased
	// failMaxAttempts times.
	leasedAtLimit := func(w *failWorld) (*leasehold.Grant, *leasehold.Range) {
		g := w.lease()
		r := w.next(g.Group.ID, g.Fence)
		must(w.t, w.db.rawExec(`UPDATE ranges SET attempts = ? WHERE id = ?`, failMaxAttempts, r.ID))
		return g, r
	}
	wantTold := func(t *testing.T, calls []told, rangeID int64) {
		t.Helper()
		if len(calls) != 1 || len(calls[0].ranges) != 1 {
			t.Fatalf("told %+v, want range %d once", calls, rangeID)
		}
		c := calls[0]
		if r := c.ranges[0]; r.ID != rangeID || r.Status != leasehold.StatusFailed || r.Attempts != failMaxAttempts || c.caller != "the caller" {
			t.Errorf("told range %d %s after %d attempts, by %v; want range %d failed after %d, by the caller",
				r.ID, r.Status, r.Attempts, c.caller, rangeID, failMaxAttempts)
		}
	}

	t.Run("Release", func(t *testing.T) {
		w, calls, ctx := open(t)
		g, r := leasedAtLimit(w)
		must(t, w.db.Write(ctx, func(tx *Tx) error {
			return tx.Release(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, failMaxAttempts)
		}))
		wantTold(t, *calls, r.ID)
	})
	t.Run("Disown", func(t *testing.T) {
		w, calls, ctx := open(t)
		_, r := leasedAtLimit(w)
		must(t, w.db.Write(ctx, func(tx *Tx) error { return tx.DisownGroup("g", failMaxAttempts) }))
		wantTold(t, *calls, r.ID)
	})
	t.Run("NextPassesOver", func(t *testing.T) {
		w, calls, ctx := open(t)
		g := w.lease()
		first := w.next(g.Group.ID, g.Fence)
		must(t, w.db.rawExec(`UPDATE ranges SET status = 'planned', node_id = NULL, attempts = ? WHERE id = ?`, failMaxAttempts, first.ID))
		var r *leasehold.Range
		must(t, w.db.Write(ctx, func(tx *Tx) error {
			var err error
			r, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: failMaxAttempts})
			return err
		}))
		if r == nil || r.ID == first.ID {
			t.Fatalf("next = %+v, want a range after %d", r, first.ID)
		}
		wantTold(t, *calls, first.ID)
	})
	t.Run("RolledBack", func(t *testing.T) {
		w, calls, ctx := open(t)
		g, r := leasedAtLimit(w)
		undone := errors.New("undone")
		err := w.db.Write(ctx, func(tx *Tx) error {
			if err := tx.Release(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, failMaxAttempts); err != nil {
				return err
			}
			return undone
		})
		if !errors.Is(err, undone) {
			t.Fatalf("write: %v, want it undone", err)
		}
		if len(*calls) != 0 {
			t.Errorf("told %+v of a write rolled back", *calls)
		}
		if stored, err := w.db.Range(context.Background(), r.ID); err != nil || stored.Status != leasehold.StatusLeased {
			t.Errorf("range after the rollback: %+v, %v; want it leased still", stored, err)
		}
	})
	t.Run("WorkerFail", func(t *testing.T) {
		w, calls, _ := open(t)
		g, r := leasedAtLimit(w)
		if got, err := w.fail(r.ID, g.Fence, "timeout", true); err != nil || got.Status != leasehold.StatusFailed {
			t.Fatalf("fail: %+v, %v; want it failed", got, err)
		}
		if len(*calls) != 0 {
			t.Errorf("told %+v of a worker's own failure", *calls)
		}
	})
}

// TestDeleteGroup: a held group is not deleted; an unheld one goes with
// its ranges and lease row in one write, which hands back its snapshot
// for the file to be removed, and the tallies count it no more; the other
// groups are untouched.
func TestDeleteGroup(t *testing.T) {
	t.Parallel()
	w := newFailWorld(t, "a", "b")
	ctx := context.Background()
	before, err := w.db.Tallies(ctx)
	must(t, err)
	snap := leasehold.Snapshot{Next: 1501, Size: 10, SHA256: "ab", At: w.clock.now, File: 7}
	must(t, w.write(func(tx *Tx) error { _, err := tx.SetSnapshot(w.gids["a"], 0, 0, snap); return err }))
	g := w.lease()
	if g == nil || g.Group.ID != w.gids["a"] {
		t.Fatalf("first lease = %+v, want group a", g)
	}
	del := func(name string) (*leasehold.Snapshot, error) {
		var old *leasehold.Snapshot
		err := w.write(func(tx *Tx) error {
			var err error
			_, old, err = tx.DeleteGroup(name)
			return err
		})
		return old, err
	}
	if _, err := del("a"); leasehold.KindOf(err) != leasehold.KindConflict {
		t.Fatalf("deleting held a: %v, want a conflict", err)
	}
	if _, err := del("nope"); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Fatalf("deleting an unknown group: %v, want not found", err)
	}
	must(t, w.write(func(tx *Tx) error {
		return tx.Release(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence}, failMaxAttempts)
	}))
	old, err := del("a")
	if err != nil || old == nil || old.File != 7 {
		t.Fatalf("deleting a: %+v, %v; want its snapshot (file 7) back", old, err)
	}
	if _, err := w.db.GroupByName(ctx, "a"); leasehold.KindOf(err) != leasehold.KindNotFound {
		t.Errorf("a after its deletion: %v, want not found", err)
	}
	if rs, err := w.db.Ranges(ctx, w.gids["a"], "", 0, 100); err != nil || len(rs) != 0 {
		t.Errorf("a's ranges after its deletion: %d, %v; want none", len(rs), err)
	}
	if files, err := w.db.SnapshotFiles(ctx); err != nil || len(files) != 0 {
		t.Errorf("snapshot files the catalog points at after a's deletion: %v, %v; want none", files, err)
	}
	bRanges, err := w.db.Ranges(ctx, w.gids["b"], "", 0, 100)
	if err != nil || len(bRanges) == 0 {
		t.Fatalf("b's ranges: %d, %v; want b untouched", len(bRanges), err)
	}
	after, err := w.db.Tallies(ctx)
	must(t, err)
	var groupsBefore, groupsAfter int64
	for _, s := range leasehold.GroupStates {
		groupsBefore += before.Owned[s] + before.Unowned[s]
		groupsAfter += after.Owned[s] + after.Unowned[s]
	}
	var rangesAfter int64
	for _, n := range after.Ranges {
		rangesAfter += n
	}
	if groupsAfter != groupsBefore-1 || rangesAfter != int64(len(bRanges)) {
		t.Errorf("tallies after the deletion: %d groups (was %d), %d ranges (b has %d)", groupsAfter, groupsBefore, rangesAfter, len(bRanges))
	}
}
