package fleet

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/store"
)

// Work spread. A group is leased only where its claim is held, and a node
// claims a group lazily, for the workers that reach it; left alone, a
// group planned at a node without idle workers waits there while workers
// at its peers find nothing, until its owner lets the idle claim go (six
// offers, about a minute at the default claim TTL). So ownership moves
// toward idle workers: a node whose worker's lease found nothing lists
// the groups in that worker's band and kinds it does not own and which
// have planned work (DisownedGroupsFor) in the owner's state as folded
// here, and asks each one's owner to hand it over (a "yield" carried like an admin write). The owner hands it over
// only if no lease holds it here (the disowning and the check are one
// catalog write, so no lease slips in), it was not won in the last
// spreadKeepWon (its own workers come first), and everything of it has
// left this node (events published, newest window replicated); then it
// releases the claim and the asker claims and adopts the group as it
// adopts a dead peer's. Rule 6 and the claims stand throughout: the
// group is owned by at most one node, under the claim's revision.

// opYield is the carried write that asks a group's owner to hand it over.
const opYield = "yield"

// spreadIdleNodes bounds the idle worker nodes remembered between offers.
const spreadIdleNodes = 16

// spreadAsks bounds the groups asked of their owners in one offer.
const spreadAsks = 4

// spreadAskAgain is how long a group asked for is not asked again: about
// an offer, so a group kept because it was just won is asked for again at
// the next one.
const spreadAskAgain = 900 * time.Millisecond

// spreadAskTimeout bounds the owner's answer to a yield.
const spreadAskTimeout = 3 * time.Second

// spreadKeepWon is how long a group just won is kept from a peer's ask:
// the workers of the node that won it (or made it) come first.
const spreadKeepWon = time.Second

// spread asks the owners of groups idle workers here could lease to hand
// them over, and claims those handed over (see the comment above).
func (o *Ownership) spread(ctx context.Context) {
	o.mu.Lock()
	nodes := make([]int64, 0, len(o.idleNodes))
	for n := range o.idleNodes {
		nodes = append(nodes, n)
	}
	o.idleNodes = nil
	o.mu.Unlock()
	if o.asker == nil {
		return
	}
	asks := 0
	for _, node := range nodes {
		groups, err := o.db.DisownedGroupsFor(ctx, node, spreadAsks)
		if err != nil {
			if leasehold.KindOf(err) != leasehold.KindNotFound {
				o.log.Warn("ownership: listing groups an idle worker could lease", "node_id", node, "err", err)
			}
			continue
		}
		for _, g := range groups {
			if asks >= spreadAsks || ctx.Err() != nil {
				return
			}
			if o.claims.Held(g) || !o.mayAsk(g) {
				continue
			}
			cl, _, err := o.claims.Owner(ctx, g)
			if err != nil || cl.Node == o.claims.Node() {
				continue // no owner (the offer's ClaimFree takes those) or this node
			}
			// Only a group whose state here is its owner's: a node that has
			// not folded the owner's state yet (a node restarted on an older
			// catalog that still calls the group its own) would see work
			// the owner may have done, and adopt that older state.
			if origin, err := o.db.PeerOwner(ctx, g); err != nil || origin != cl.Node {
				continue
			}
			asks++
			actx, cancel := context.WithTimeout(ctx, spreadAskTimeout)
			err = o.asker.AskYield(actx, cl.Node, g)
			cancel()
			if err != nil {
				o.log.Debug("ownership: a peer keeps a group an idle worker here could lease", "group", g, "owner", cl.Node, "why", err)
				continue
			}
			if o.claim(ctx, g) {
				o.log.Info("ownership: group handed over by a peer for an idle worker here", "group", g, "from", cl.Node, "node_id", node)
			}
		}
	}
}

// mayAsk reports whether group may be asked of its owner now, and notes
// the ask.
func (o *Ownership) mayAsk(group string) bool {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.asked == nil || len(o.asked) > ownershipWanted {
		o.asked = map[string]time.Time{}
	}
	if t, ok := o.asked[group]; ok && now.Sub(t) < spreadAskAgain {
		return false
	}
	o.asked[group] = now
	return true
}

// Yield is the owner's side of a peer's ask for group, for an idle worker
// at node to: the group is disowned here and its claim released when no
// lease holds it, it was not won lately and it is settled. Errors: not
// found (the claim is not held here), conflict (leased here, or won
// lately), unavailable (not settled yet, NATS).
func (o *Ownership) Yield(ctx context.Context, group, to string) error {
	if !o.claims.Held(group) {
		return leasehold.Errorf(leasehold.KindNotFound, "this node does not hold group %q's claim", group)
	}
	if won, ok := o.keeper.wonAt(group); ok && time.Since(won) < spreadKeepWon {
		return leasehold.Errorf(leasehold.KindConflict, "group %q was won here %v ago; its workers here come first", group, time.Since(won).Round(time.Millisecond))
	}
	if o.adoption != nil && !o.adoption.Settled(ctx, group) {
		return leasehold.Errorf(leasehold.KindUnavailable, "group %q has events or a window not yet sent to the fleet", group)
	}
	var gone []string
	err := o.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		// Released before now: any group not held by a lease.
		gone, err = tx.DisownIdle([]string{group}, o.db.Now().Add(time.Millisecond))
		return err
	})
	if err != nil {
		return err
	}
	if len(gone) == 0 {
		return leasehold.Errorf(leasehold.KindConflict, "group %q is leased here", group)
	}
	o.keeper.forget(group)
	if err := o.claims.Release(ctx, group); err != nil {
		return err
	}
	o.log.Info("ownership: group handed to a peer whose worker is idle", "group", group, "to", to)
	return nil
}

// AskYield asks owner to hand group over to this node (Ownership.Yield
// there). Errors: owner's refusal, with its kind; unavailable.
func (a Carrier) AskYield(ctx context.Context, owner, group string) error {
	_, err := a.Forward(ctx, owner, appliance.AdminOp{Op: opYield, Group: group, Node: a.node})
	return err
}
