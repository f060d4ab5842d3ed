package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestFoldPeerGroups: a dump chunk folded in one call (new groups in
// multi-row statements, their lease-choice key from their ranges) leaves
// the catalog as folding each group alone does, row for row and tally for
// tally: groups new here and known here (under an older claim, the same,
// a newer one, and one this node owns), ranges of every status and lane,
// a snapshot, a quarantine, water marks, a source error, a group named
// twice; a bad range anywhere leaves nothing.
func TestFoldPeerGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := func() time.Time { return foldStart }
	chunked := openTest(t, "", Options{NowFunc: clock})
	alone := openTest(t, "", Options{NowFunc: clock})
	for _, db := range []*DB{chunked, alone} {
		// Known here before the chunk: an own group, and peer groups
		// under claims 1 and 3.
		must(t, db.Write(ctx, func(tx *Tx) error {
			g, _, err := tx.PutGroup("own", GroupSpec{RangeSize: ptr(int64(100))})
			if err != nil {
				return err
			}
			if _, err := tx.PlanTail(g.ID, 1000); err != nil {
				return err
			}
			return tx.OwnGroup("own", 0, 5)
		}))
		foldIn(t, db, "a", foldGroup("old", 1), foldRanges())
		foldIn(t, db, "a", foldGroup("newer", 3), foldRanges())
	}
	at := foldStart.Add(-time.Minute)
	low, high := int64(5), int64(900)
	var chunk []PeerGroupState
	for i := range 6 {
		g := foldGroup(fmt.Sprintf("new%d", i), 2)
		rs := foldRanges()
		switch i {
		case 1: // both lanes, the leased range at priority 0, one failed
			for j := range rs {
				rs[j].Priority = int64(j) - 2
			}
			msg := "481 <gone> & back"
			rs[4].Status, rs[4].LastError, rs[4].LastErrorAt = leasehold.StatusFailed, &msg, &at
		case 2: // nothing open: no key
			for j := range rs {
				rs[j].Status, rs[j].Next, rs[j].Node = leasehold.StatusDone, rs[j].End+1, ""
			}
		case 3:
			g.Snapshot = &leasehold.Snapshot{Next: 201, Size: 77, SHA256: strings.Repeat("ab", 32), At: at}
			g.Quarantine = &leasehold.Quarantine{Error: "bad window", Node: "wa", At: at}
			g.Low, g.High, g.MarksAt = &low, &high, &at
			g.SourceError = &leasehold.SourceError{Error: "411", Node: "wa", At: at}
			g.Kind = "usenet"
		case 4:
			rs = nil
		}
		chunk = append(chunk, PeerGroupState{Group: g, Ranges: rs})
	}
	// Known groups between the new ones: an older claim (its plans only),
	// the same claim, and the group this node owns under a newer claim.
	chunk = append(chunk[:2], append([]PeerGroupState{
		{Group: foldGroup("newer", 2), Ranges: foldRanges()},
		{Group: foldGroup("old", 1), Ranges: foldRanges()[3:]},
		{Group: foldGroup("own", 1), Ranges: foldRanges()},
	}, chunk[2:]...)...)
	state := func(db *DB) string {
		var b strings.Builder
		for _, q := range []string{
			`SELECT * FROM groups ORDER BY id`, `SELECT * FROM group_leases ORDER BY group_id`,
			`SELECT * FROM peer_groups ORDER BY group_id`, `SELECT * FROM ranges ORDER BY id`, `SELECT * FROM tallies ORDER BY kind, state`,
		} {
			rows, err := db.r.Query(q)
			must(t, err)
			cols, _ := rows.Columns()
			for rows.Next() {
				v := make([]any, len(cols))
				p := make([]any, len(v))
				for i := range v {
					p[i] = &v[i]
				}
				must(t, rows.Scan(p...))
				fmt.Fprintln(&b, v...)
			}
			must(t, rows.Close())
		}
		return b.String()
	}
	must(t, chunked.Write(ctx, func(tx *Tx) error { return tx.FoldPeerGroups("a", chunk, 5) }))
	must(t, alone.Write(ctx, func(tx *Tx) error { return tx.foldPeerGroupsEach("a", chunk, 5) }))
	if c, a := state(chunked), state(alone); c != a {
		t.Fatalf("folded as a chunk:\n%s\nfolded one at a time:\n%s", c, a)
	}
	if n := strings.Count(state(chunked), "new"); n < 6 {
		t.Fatalf("the new groups are not all there (%d)", n)
	}

	// A chunk naming a group twice folds as one at a time does.
	twice := []PeerGroupState{{Group: foldGroup("twice", 1), Ranges: foldRanges()[:4]}, {Group: foldGroup("twice", 1), Ranges: foldRanges()[4:]}}
	must(t, chunked.Write(ctx, func(tx *Tx) error { return tx.FoldPeerGroups("a", twice, 5) }))
	must(t, alone.Write(ctx, func(tx *Tx) error { return tx.foldPeerGroupsEach("a", twice, 5) }))
	if c, a := state(chunked), state(alone); c != a {
		t.Fatalf("a group named twice, folded as a chunk:\n%s\nfolded one at a time:\n%s", c, a)
	}

	before := state(chunked)
	bad := []PeerGroupState{{Group: foldGroup("bad1", 1), Ranges: foldRanges()}, {Group: foldGroup("bad2", 1), Ranges: foldRanges()}}
	bad[1].Ranges[7].Next = bad[1].Ranges[7].End + 2
	err := chunked.Write(ctx, func(tx *Tx) error { return tx.FoldPeerGroups("a", bad, 5) })
	if !errors.Is(err, leasehold.ErrInvalid) || state(chunked) != before {
		t.Fatalf("a bad range: %v, catalog changed %v; want invalid and nothing changed", err, state(chunked) != before)
	}
}

// TestYield: with nothing queued, Yield returns at once and commits
// nothing; with writes queued behind a running one, it returns only once
// they are committed.
func TestYield(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{})
	commits := db.commits.Load()
	must(t, db.Yield(ctx))
	if n := db.commits.Load(); n != commits {
		t.Fatalf("Yield with nothing queued committed %d times", n-commits)
	}
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // a failed test must not hold the writer, or Close waits forever
	running := make(chan struct{})
	go db.Write(ctx, func(*Tx) error { close(running); <-release; return nil })
	<-running
	queued := make(chan error, 1)
	go func() {
		queued <- db.Write(ctx, func(tx *Tx) error {
			_, _, err := tx.PutGroup("queued", GroupSpec{RangeSize: ptr(int64(10))})
			return err
		})
	}()
	poll.Eventually(t, 10*time.Second, "a write queued behind the running one", func() bool { return len(db.queue) == 1 })
	yielded := make(chan error, 1)
	go func() { yielded <- db.Yield(ctx) }()
	poll.Eventually(t, 10*time.Second, "Yield queued", func() bool { return len(db.queue) == 2 })
	select {
	case err := <-yielded:
		t.Fatalf("Yield returned (%v) while the writes queued before it wait", err)
	default:
	}
	once.Do(func() { close(release) })
	must(t, <-yielded)
	if _, err := db.GroupByName(ctx, "queued"); err != nil {
		t.Fatalf("Yield returned before the queued write committed: %v", err)
	}
	must(t, <-queued)
}
