package store

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestReleaseStopped: a holder that stops cleanly, its progress saved,
// hands its range back without using an attempt, however often it stops
// (more often than the range has attempts), while a plain release counts
// its lease and fails the range at the limit; a stopped release at a
// stale fence is refused and changes nothing.
func TestReleaseStopped(t *testing.T) {
	t.Parallel()
	cycle := func(w *failWorld, release func(tx *Tx, gid, fence int64) error, next int64) leasehold.Range {
		t.Helper()
		g := w.lease()
		if g == nil {
			t.Fatal("nothing to lease")
		}
		r := w.next(g.Group.ID, g.Fence)
		if r == nil || r.Start != 1 {
			t.Fatalf("next = %+v, want the range from 1", r)
		}
		must(t, w.write(func(tx *Tx) error {
			_, err := tx.Progress(leasehold.RangeHolder{RangeID: r.ID, NodeID: w.node, Fence: g.Fence}, next)
			return err
		}))
		must(t, w.write(func(tx *Tx) error { return release(tx, g.Group.ID, g.Fence) }))
		stored, err := w.db.Range(context.Background(), r.ID)
		must(t, err)
		return stored
	}
	t.Run("Stopped", func(t *testing.T) {
		w := newFailWorld(t, "g")
		for stop := int64(1); stop <= failMaxAttempts+1; stop++ {
			got := cycle(w, func(tx *Tx, gid, fence int64) error {
				return tx.ReleaseStopped(leasehold.GroupHolder{GroupID: gid, NodeID: w.node, Fence: fence}, failMaxAttempts)
			}, 1+stop*10)
			if got.Status != leasehold.StatusPlanned || got.Attempts != 0 || got.Next != 1+stop*10 {
				t.Fatalf("stop %d: range %s, attempts %d, next %d; want planned, 0 attempts, next %d", stop, got.Status, got.Attempts, got.Next, 1+stop*10)
			}
		}
	})
	t.Run("Released", func(t *testing.T) {
		w := newFailWorld(t, "g")
		for release := int64(1); release <= failMaxAttempts; release++ {
			got := cycle(w, func(tx *Tx, gid, fence int64) error {
				return tx.Release(leasehold.GroupHolder{GroupID: gid, NodeID: w.node, Fence: fence}, failMaxAttempts)
			}, 1+release*10)
			want := leasehold.StatusPlanned
			if release == failMaxAttempts {
				want = leasehold.StatusFailed
			}
			if got.Status != want || got.Attempts != release {
				t.Fatalf("release %d: range %s, attempts %d; want %s, %d attempts", release, got.Status, got.Attempts, want, release)
			}
		}
	})
	t.Run("StaleFence", func(t *testing.T) {
		w := newFailWorld(t, "g")
		g := w.lease()
		w.next(g.Group.ID, g.Fence)
		before := catalogState(t, w.db)
		err := w.write(func(tx *Tx) error {
			return tx.ReleaseStopped(leasehold.GroupHolder{GroupID: g.Group.ID, NodeID: w.node, Fence: g.Fence - 1}, failMaxAttempts)
		})
		if leasehold.KindOf(err) != leasehold.KindLeaseLost {
			t.Errorf("a stopped release at a stale fence: %v, want lease lost", err)
		}
		if after := catalogState(t, w.db); after != before {
			t.Errorf("the refused release changed the catalog:\n%s\nwant\n%s", after, before)
		}
	})
}
