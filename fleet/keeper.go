package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Keeper decides which idle claims a node lets go: the claims ask it
// (ClaimsConfig.Keeper), and ownership tells it of the claims it won
// (OwnershipConfig.Keeper). It stands between the two so that neither
// holds the other both ways: ownership holds the claims, the claims hold
// only their Keeper.
type Keeper struct {
	db      *store.DB
	every   time.Duration
	settled Adoption // nil: every group is settled

	mu  sync.Mutex
	won map[string]time.Time // when each group's claim was won here
}

// NewKeeper is the keeper of a node's claims over db; every is
// ownership's offer period, and settled, if set, says whether an idle
// group has left this node whole.
func NewKeeper(db *store.DB, every time.Duration, settled Adoption) *Keeper {
	return &Keeper{db: db, every: every, settled: settled, won: map[string]time.Time{}}
}

// wonNow notes that group's claim was won here now.
func (k *Keeper) wonNow(group string) {
	k.mu.Lock()
	k.won[group] = time.Now()
	k.mu.Unlock()
}

// wonAt is when group's claim was won here, if it was lately.
func (k *Keeper) wonAt(group string) (time.Time, bool) {
	if k == nil {
		return time.Time{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.won[group]
	return t, ok
}

// forget drops group's won time: its claim is let go.
func (k *Keeper) forget(group string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	delete(k.won, group)
	k.mu.Unlock()
}

// Keep answers the claims (ClaimKeeper): of a batch of claims held, those
// of groups in work here are kept; the others (owned here but not held, and
// released more than two claim TTLs ago, not won lately, and settled:
// nothing of theirs left to publish or replicate) are disowned
// in one catalog write, so no lease can slip in between, and their claims
// released. So the claims held track the groups in work, not every group
// this node ever leased, and a peer with idle workers can take the rest;
// this node's own idle workers claim them back.
func (k *Keeper) Keep(ctx context.Context, groups []string) ([]string, error) {
	since := k.db.Now().Add(-6 * k.every)
	var candidates []string
	k.mu.Lock()
	for _, g := range groups {
		if t, ok := k.won[g]; ok && t.After(since) {
			continue // won lately: this node's workers have not come yet
		}
		delete(k.won, g)
		candidates = append(candidates, g)
	}
	k.mu.Unlock()
	if k.settled != nil {
		n := 0
		for _, g := range candidates {
			if k.settled.Settled(ctx, g) {
				candidates[n] = g
				n++
			}
		}
		candidates = candidates[:n]
	}
	var idle []string
	err := k.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		idle, err = tx.DisownIdle(candidates, since)
		return err
	})
	if err != nil {
		return nil, err
	}
	gone := make(map[string]bool, len(idle))
	for _, g := range idle {
		gone[g] = true
	}
	kept := make([]string, 0, len(groups))
	for _, g := range groups {
		if !gone[g] {
			kept = append(kept, g)
		}
	}
	return kept, nil
}
