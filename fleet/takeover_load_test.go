package fleet

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/store"
)

// stalledAdoption is an Adoption whose Adopt of group stall waits until
// the test ends, as an adoption waiting on a stream that elects its
// leader does; entered is closed once it waits. Adopt of any other group
// is behind (ErrBehind) its first behind times, as a fold not caught up
// yet is, and counts its adoptions.
type stalledAdoption struct {
	stall   string
	entered chan struct{}
	done    <-chan struct{}
	once    atomic.Bool
	behind  int64
	adopts  atomic.Int64
}

func (a *stalledAdoption) Adopt(ctx context.Context, group string) error {
	if group == a.stall {
		if !a.once.Swap(true) {
			close(a.entered)
		}
		select {
		case <-a.done:
		case <-ctx.Done():
		}
		return nil
	}
	if a.adopts.Add(1) <= a.behind {
		return ErrBehind
	}
	return nil
}

func (*stalledAdoption) Settled(context.Context, string) bool { return true }

// takeoverLoadNode is one node's ownership over a real NATS server and
// catalog, with groups made in its catalog (with work planned: offered
// to idle workers) and, beside, groups of a member found down (orphans).
func takeoverLoadNode(t *testing.T, adopt *stalledAdoption, every time.Duration, planned, orphaned []string) (*Claims, *Ownership, *onceOrphans) {
	t.Helper()
	ctx := context.Background()
	opts := natstest.Options(t)
	opts.Port = natstest.FreePort(t)
	s := natstest.Start(t, opts)
	app, db, err := openApp(appliance.Config{DataDir: t.TempDir(), HistoryMinFreeBytes: 0, Logger: claimQuiet, Fleet: &ownFleet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	for _, g := range append(append([]string{}, planned...), orphaned...) {
		if _, _, err := app.Coordinator.PutGroup(ctx, g, store.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range planned {
		if _, err := app.Coordinator.PlanTail(ctx, g, 1000); err != nil {
			t.Fatal(err)
		}
	}
	// Made here, the groups are owned here: disowned, as a node's groups
	// are once their claims were let go.
	if err := app.Coordinator.Disown(ctx, append(append([]string{}, planned...), orphaned...), nil); err != nil {
		t.Fatal(err)
	}
	claims := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "node-b"})
	orphans := &onceOrphans{downs: make(chan struct{}, 1), groups: orphaned}
	own := NewOwnership(OwnershipConfig{Owner: app.Coordinator, DB: db, Claims: claims, Adoption: adopt, Orphans: orphans,
		Every: every, Logger: claimQuiet})
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() { claims.Stop(); cancel(); own.Stop() })
	if err := claims.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	if err := own.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	return claims, own, orphans
}

// TestTakeoverBesideOffer: a member found down has its groups taken over
// while an idle worker's offer of disowned groups is stalled (its
// adoption waiting on NATS): the takeover runs beside the offers, not
// behind them. A fault run on a loaded machine had a member found down
// wait 6 s behind an offer so.
func TestTakeoverBesideOffer(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	adopt := &stalledAdoption{stall: "alt.offered", entered: make(chan struct{}), done: done}
	claims, own, orphans := takeoverLoadNode(t, adopt, time.Second, []string{"alt.offered"}, []string{"alt.orphaned"})
	poll.Eventually(t, 10*time.Second, "an idle offer adopting the disowned group", func() bool {
		own.Idle(1)
		select {
		case <-adopt.entered:
			return true
		default:
			return false
		}
	})
	orphans.downs <- struct{}{}
	poll.Eventually(t, 10*time.Second, "the orphaned group taken over while the offer stalls", func() bool {
		return claims.Held("alt.orphaned") && adopt.adopts.Load() >= 1
	})
}

// TestTakeoverRetriesSoon: a takeover whose adoption is behind for six
// passes (the fold catching up after a member rejoined) is tried again
// at most takeoverWaitMax apart, whatever the claim TTL: with the offers'
// period long (a long TTL), passes 1, 2, 4 and 8 s apart took it 15 s.
func TestTakeoverRetriesSoon(t *testing.T) {
	t.Parallel()
	adopt := &stalledAdoption{behind: 6}
	claims, _, orphans := takeoverLoadNode(t, adopt, time.Hour, nil, []string{"alt.behind"})
	orphans.downs <- struct{}{}
	// Passes 1, 2, 2, 2, 2 and 2 s apart: about 11 s; doubling as before,
	// 1, 2, 4, 8, 16 and 32 s: 63 s. Six passes, not four, so that the
	// bound leaves a loaded machine room (four passes took 7 s against a
	// bound of 14 that a fresh-clone run under load missed) and still
	// fails the doubling.
	poll.Eventually(t, 30*time.Second, "the group taken over after six passes behind", func() bool {
		return claims.Held("alt.behind") && adopt.adopts.Load() > adopt.behind
	})
}
