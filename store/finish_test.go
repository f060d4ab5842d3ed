package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// catalogState is every row a holder call may change, as text: equal
// states mean a refused call changed nothing.
func catalogState(t *testing.T, db *DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, status, next_id, node_id, attempts, headers, heartbeat_at, updated_at FROM ranges ORDER BY id`,
		`SELECT group_id, node_id, fence, heartbeat_at, range_id, progressed, ranges_done, headers FROM group_leases ORDER BY group_id`,
		`SELECT id, held, urgent_tail, urgent_hist, flaps FROM groups ORDER BY id`,
		`SELECT kind, state, n FROM tallies ORDER BY kind, state`,
	} {
		rows, err := db.r.Query(q)
		must(t, err)
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		for rows.Next() {
			must(t, rows.Scan(vals...))
			for _, v := range vals {
				fmt.Fprint(&b, *(v.(*any)), " ")
			}
			b.WriteByte('\n')
		}
		must(t, rows.Err())
		rows.Close()
	}
	return b.String()
}

// wrongUrgency names the groups whose urgent_tail or urgent_hist is not
// the least priority of their open ranges in that lane, read from the
// ranges themselves.
func wrongUrgency(t *testing.T, db *DB) []string {
	t.Helper()
	rows, err := db.r.Query(`SELECT g.name, g.urgent_tail, g.urgent_hist,
		(SELECT min(priority) FROM ranges r WHERE r.group_id = g.id AND r.status IN ('planned', 'leased') AND r.priority < 0),
		(SELECT min(priority) FROM ranges r WHERE r.group_id = g.id AND r.status IN ('planned', 'leased') AND r.priority >= 0)
		FROM groups g ORDER BY g.id`)
	must(t, err)
	defer rows.Close()
	var wrong []string
	for rows.Next() {
		var name string
		var tail, hist, wantTail, wantHist *int64
		must(t, rows.Scan(&name, &tail, &hist, &wantTail, &wantHist))
		show := func(p *int64) string {
			if p == nil {
				return "NULL"
			}
			return fmt.Sprint(*p)
		}
		if show(tail) != show(wantTail) || show(hist) != show(wantHist) {
			wrong = append(wrong, fmt.Sprintf("%s: urgent %s/%s, ranges say %s/%s", name, show(tail), show(hist), show(wantTail), show(wantHist)))
		}
	}
	must(t, rows.Err())
	return wrong
}

// TestFinishNext: the worker's steady call (finish a range, lease the
// next) leaves the catalog as Finish then NextRange would, including each
// group's urgency, which it counts again only when the range it leases
// has another priority than the one it finished. Groups mix tail ranges
// (one priority) and history (a priority a range), and the walk mixes
// in lone finishes, fails and releases.
func TestFinishNext(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("Seed%d", seed), func(t *testing.T) { finishNextRun(t, seed, 300) })
	}
}

func finishNextRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 35))
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db := openTest(t, "", Options{NowFunc: clock.Now})
	ctx := context.Background()
	const maxAttempts = 3
	var node int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		n, err := tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 4})
		node = n.ID
		for i := range 4 {
			g, _, err := tx.PutGroup(fmt.Sprintf("g%d", i), GroupSpec{RangeSize: ptr(int64(100)), Start: ptr(int64(1001))})
			if err != nil {
				return err
			}
			if _, err := tx.PlanTail(g.ID, 1000+int64(1+rng.IntN(4))*100); err != nil {
				return err
			}
			if _, err := tx.PlanHistory(g.ID, 1+int64(rng.IntN(6))*100); err != nil {
				return err
			}
		}
		return err
	}))
	type held struct{ group, fence, rangeID int64 }
	var leases []held
	// inWork keeps the range a call answered as the lease's range in work.
	inWork := func(l *held, r *leasehold.Range, err error) {
		if err == nil {
			l.rangeID = 0
			if r != nil {
				l.rangeID = r.ID
			}
		}
	}
	fast := 0
	for step := range steps {
		clock.now = clock.now.Add(time.Second)
		if len(leases) == 0 || rng.IntN(6) == 0 {
			must(t, db.Write(ctx, func(tx *Tx) error {
				g, err := tx.LeaseGroup(LeaseRequest{NodeID: node, TTL: time.Hour, MaxAttempts: maxAttempts})
				if g != nil {
					leases = append(leases, held{group: g.Group.ID, fence: g.Fence})
				}
				return err
			}))
			continue
		}
		i := rng.IntN(len(leases))
		l := &leases[i]
		before := catalogState(t, db)
		var op string
		var err error
		switch k := rng.IntN(10); {
		case l.rangeID == 0 || k == 0:
			op = "next"
			err = db.Write(ctx, func(tx *Tx) error {
				r, err := tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: l.group, NodeID: node, Fence: l.fence}, BandMin: -10, BandMax: 10, MaxAttempts: maxAttempts})
				inWork(l, r, err)
				return err
			})
		case k < 7:
			op = "finish and next"
			headers := int64(rng.IntN(100))
			fence := l.fence
			if rng.IntN(8) == 0 {
				headers = 101 // more than the range's ids: refused
			}
			if rng.IntN(8) == 0 {
				fence-- // a fence of the past: lease lost
			}
			err = db.Write(ctx, func(tx *Tx) error {
				_, _, ok, _ := tx.finishHeld(leasehold.RangeHolder{RangeID: l.rangeID, NodeID: node, Fence: fence}, l.group, headers)
				if ok {
					fast++
				}
				return leasehold.Errorf(leasehold.KindConflict, "counting the usual case only")
			})
			if leasehold.KindOf(err) != leasehold.KindConflict {
				t.Fatalf("step %d: the usual case's probe: %v", step, err)
			}
			err = db.Write(ctx, func(tx *Tx) error {
				r, err := tx.FinishNext(NextParams{Holder: leasehold.GroupHolder{GroupID: l.group, NodeID: node, Fence: fence}, BandMin: -10, BandMax: 10, MaxAttempts: maxAttempts}, leasehold.FinishedRange{Range: l.rangeID, Headers: headers})
				inWork(l, r, err)
				return err
			})
		case k < 8:
			op = "finish"
			err = db.Write(ctx, func(tx *Tx) error {
				_, err := tx.Finish(leasehold.RangeHolder{RangeID: l.rangeID, NodeID: node, Fence: l.fence}, 7)
				return err
			})
		case k < 9:
			op = "fail"
			err = db.Write(ctx, func(tx *Tx) error {
				_, err := tx.FailRange(leasehold.RangeHolder{RangeID: l.rangeID, NodeID: node, Fence: l.fence}, "no route to host", true, maxAttempts)
				return err
			})
			l.rangeID = 0
		default:
			op = "release"
			err = db.Write(ctx, func(tx *Tx) error {
				return tx.Release(leasehold.GroupHolder{GroupID: l.group, NodeID: node, Fence: l.fence}, maxAttempts)
			})
			leases = append(leases[:i], leases[i+1:]...)
		}
		if err != nil {
			if after := catalogState(t, db); after != before {
				t.Fatalf("step %d: %s refused (%v) but changed the catalog:\nbefore\n%s\nafter\n%s", step, op, err, before, after)
			}
		}
		if wrong := wrongUrgency(t, db); len(wrong) > 0 {
			t.Fatalf("step %d: after %s (%v): %s", step, op, err, strings.Join(wrong, "; "))
		}
	}
	if fast == 0 {
		t.Fatalf("no finish took the usual case: the test walked only the checked path")
	}
}

// TestFinishNextRefusals: each refusal of the steady call answers as the
// finish and next calls did one after the other, and changes nothing.
func TestFinishNextRefusals(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db := openTest(t, "", Options{NowFunc: clock.Now})
	ctx := context.Background()
	var node, other int64
	var a, b *leasehold.Grant
	var ra, rb *leasehold.Range
	must(t, db.Write(ctx, func(tx *Tx) error {
		n, err := tx.CreateNode(NewNode{Name: "w", TokenHash: []byte("w"), PriorityMin: -10, PriorityMax: 10, Capacity: 4})
		node = n.ID
		m, err2 := tx.CreateNode(NewNode{Name: "v", TokenHash: []byte("v"), PriorityMin: -10, PriorityMax: 10, Capacity: 4})
		other = m.ID
		for _, name := range []string{"a", "b"} {
			g, _, err := tx.PutGroup(name, GroupSpec{RangeSize: ptr(int64(100)), Start: ptr(int64(1001))})
			if err != nil {
				return err
			}
			if _, err := tx.PlanTail(g.ID, 1400); err != nil {
				return err
			}
		}
		return errors.Join(err, err2)
	}))
	must(t, db.Write(ctx, func(tx *Tx) error {
		var err error
		req := LeaseRequest{NodeID: node, TTL: time.Hour, MaxAttempts: 3}
		if a, err = tx.LeaseGroup(req); err != nil {
			return err
		}
		if b, err = tx.LeaseGroup(req); err != nil {
			return err
		}
		if ra, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: a.Group.ID, NodeID: node, Fence: a.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 3}); err != nil {
			return err
		}
		rb, err = tx.NextRange(NextParams{Holder: leasehold.GroupHolder{GroupID: b.Group.ID, NodeID: node, Fence: b.Fence}, BandMin: -10, BandMax: 10, MaxAttempts: 3})
		return err
	}))
	steady := func(group, nodeID, fence, rangeID, headers int64) error {
		return db.Write(ctx, func(tx *Tx) error {
			_, err := tx.FinishNext(NextParams{Holder: leasehold.GroupHolder{GroupID: group, NodeID: nodeID, Fence: fence}, BandMin: -10, BandMax: 10, MaxAttempts: 3}, leasehold.FinishedRange{Range: rangeID, Headers: headers})
			return err
		})
	}
	for _, c := range []struct {
		name                           string
		group, node, fence, rng, heads int64
		want                           leasehold.ErrorKind
	}{
		{"LeaseLost", a.Group.ID, node, a.Fence + 1, ra.ID, 5, leasehold.KindLeaseLost},
		{"AnotherNode", a.Group.ID, other, a.Fence, ra.ID, 5, leasehold.KindLeaseLost},
		{"AnotherGroup", a.Group.ID, node, a.Fence, rb.ID, 5, leasehold.KindUnprocessable},
		{"NoSuchRange", a.Group.ID, node, a.Fence, 1 << 40, 5, leasehold.KindNotFound},
		{"TooManyHeaders", a.Group.ID, node, a.Fence, ra.ID, 101, leasehold.KindUnprocessable},
		{"NotInWork", b.Group.ID, node, b.Fence, rb.ID + 1, 5, leasehold.KindConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := catalogState(t, db)
			err := steady(c.group, c.node, c.fence, c.rng, c.heads)
			if leasehold.KindOf(err) != c.want {
				t.Fatalf("err = %v, want %s", err, c.want)
			}
			if after := catalogState(t, db); after != before {
				t.Fatalf("refused, but the catalog changed:\nbefore\n%s\nafter\n%s", before, after)
			}
		})
	}
	// Finished once, then again: the second answers as the first, and the
	// lease counts the range once.
	must(t, steady(a.Group.ID, node, a.Fence, ra.ID, 5))
	must(t, steady(a.Group.ID, node, a.Fence, ra.ID, 5))
	l, err := db.Lease(ctx, a.Group.ID)
	must(t, err)
	if l.RangesDone != 1 || l.Headers != 5 {
		t.Fatalf("lease after finishing twice: %d ranges, %d headers; want 1 and 5", l.RangesDone, l.Headers)
	}
}
