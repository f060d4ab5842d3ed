package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
)

// Members that leave, and groups deleted across the fleet.
//
// A member is removed for good by an operator at any other node (Remove):
// the removal is a key in RemovedBucket, which every node follows
// (Removals) into its catalog (store.Tx.RemoveMember): the member's
// events are not folded any more, it leaves the peers, the members gauge
// and its alert, and the worker nodes registered at it are refused
// everywhere, their visitors deleted. Its groups are claimed by the
// others once its life ends (takeOver); a member
// whose life is renewed is refused unless forced, and then its life is
// ended for it. The removed node, if it runs, sees its own removal and
// leaves the fleet (its fleet part ends with ErrRemoved). Approve takes
// the key away: a removal made by mistake is undone, and the member's
// next events are folded again.

// RemovedBucket holds the members removed from the fleet (key: node name,
// value: Removal).
const RemovedBucket = "leasehold_removed"

// Removal is the value of a removed member's key in RemovedBucket,
// signed by the node it was made at (removal_signed.go).
type Removal struct {
	Node string    `json:"node"`
	By   string    `json:"by"` // the node the operator removed it at
	At   time.Time `json:"at"`
	// Approved undoes the removal: the member was approved again at By.
	Approved bool `json:"approved,omitempty"`
	// Key is By's public key, which signed the value.
	Key string `json:"key,omitempty"`
}

// ErrRemoved is the end of the fleet part of a node that was removed
// from the fleet.
var ErrRemoved = errors.New("this node was removed from the fleet")

// KeyWithdrawer is told of each member removed and approved again, so
// that what the fleet trusts of it (its public key, once nodes sign what
// they publish) is withdrawn and given back with the removal. nil for
// none.
type KeyWithdrawer interface {
	Withdraw(node string, at time.Time) // removed at at
	Restore(node string)
}

// Removals follows RemovedBucket into the catalog, and removes and
// approves members.
type Removals struct {
	kv          jetstream.KeyValue
	db          *store.DB
	claims      *Claims
	self        string
	maxAttempts int64
	log         *slog.Logger
	// keys, if set, withdraws a removed member's key (see KeyWithdrawer).
	keys KeyWithdrawer
	// id signs the removals and approvals made here; ring checks those
	// followed (nil: believed unsigned, for tests of the catalog's part).
	id   *Identity
	ring *Keyring
	// rebuilder rebuilds an approved member's part from its dump: what it
	// published while removed was passed over here.
	rebuilder Rebuilder
	// want queues a group's claim (Ownership.Want): a removed member's
	// groups are claimed here without waiting for an idle worker, since
	// a member that gave its claims up as it left names none of them.
	want func(group string)

	mu      sync.Mutex
	removed map[string]Removal

	service.Base
}

// newRemovals makes (or opens) RemovedBucket with copies.
func newRemovals(ctx context.Context, js jetstream.JetStream, copies int, db *store.DB, self string, maxAttempts int64, log *slog.Logger) (*Removals, error) {
	kv, err := createBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: RemovedBucket, Description: "leasehold members removed from the fleet", History: 1, Replicas: copies,
	})
	if err != nil {
		return nil, err
	}
	return &Removals{kv: kv, db: db, self: self, maxAttempts: maxAttempts, log: log, removed: map[string]Removal{}}, nil
}

// Start follows the bucket until ctx ends or Stop; it ends with
// ErrRemoved when this node is removed. Errors: service.ErrStarted.
func (r *Removals) Start(ctx context.Context) error { return r.Begin(ctx, r.watch) }

// watch follows every key of the bucket, starting over while NATS is
// unreachable.
func (r *Removals) watch(ctx context.Context) error {
	for ctx.Err() == nil {
		w, err := r.kv.WatchAll(ctx)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			if err := r.seen(ctx, e); err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
	}
	return nil
}

// seen folds one write or delete of a removal into the catalog, trying
// again until it is written or ctx ends.
func (r *Removals) seen(ctx context.Context, e jetstream.KeyValueEntry) error {
	node := e.Key()
	if !leasehold.ValidNodeName(node) {
		return nil
	}
	if e.Operation() != jetstream.KeyValuePut {
		if r.ring != nil {
			// An approval is a signed write: a delete signs nothing, and
			// the removal stands.
			r.refuseRemoval(node, refused(refusedUnsigned, "", "a removal deleted, not approved by a signed write"))
			return nil
		}
		return r.approved(ctx, node)
	}
	rm, err := r.openRemoval(node, e.Value())
	if err != nil {
		r.refuseRemoval(node, err)
		return nil
	}
	if rm.Approved {
		return r.approved(ctx, node)
	}
	return r.removedSeen(ctx, node, rm, e.Revision())
}

// approved folds node's approval into the catalog.
func (r *Removals) approved(ctx context.Context, node string) error {
	r.mu.Lock()
	_, was := r.removed[node]
	delete(r.removed, node)
	r.mu.Unlock()
	err := r.write(ctx, func(tx *store.Tx) error {
		if err := tx.ApproveMember(node); leasehold.KindOf(err) != leasehold.KindNotFound {
			return err
		}
		return nil
	})
	if was && err == nil {
		r.log.Info("peers: member approved again", "peer", node)
		if r.keys != nil {
			r.keys.Restore(node)
		}
		r.Go(func(ctx context.Context) error { r.rebuildApproved(ctx, node); return nil })
	}
	return err
}

// removedSeen folds node's removal rm (at revision rev) into the catalog.
func (r *Removals) removedSeen(ctx context.Context, node string, rm Removal, rev uint64) error {
	r.mu.Lock()
	r.removed[node] = rm
	r.mu.Unlock()
	if node == r.self {
		// A replica lagging behind (this node's own server, just
		// restarted) may still show a removal since undone: the
		// leader's word decides.
		if r.undone(ctx, node) {
			r.mu.Lock()
			delete(r.removed, node)
			r.mu.Unlock()
			r.log.Info("peers: a removal of this node undone since was seen; staying", "by", rm.By, "rev", rev)
			return nil
		}
		r.log.Error("peers: this node was removed from the fleet: it leaves it (an operator at another node approves it again with: leasehold admin fleet approve "+node+")",
			"by", rm.By, "at", rm.At)
		return fmt.Errorf("%w by node %s at %s", ErrRemoved, rm.By, rm.At.UTC().Format(time.RFC3339))
	}
	if r.keys != nil {
		r.keys.Withdraw(node, rm.At)
	}
	err := r.write(ctx, func(tx *store.Tx) error { return tx.RemoveMember(node, rm.By, r.maxAttempts) })
	if err == nil {
		r.log.Warn("peers: member removed from the fleet", "peer", node, "by", rm.By)
		r.Go(func(ctx context.Context) error { r.takeOver(ctx, node); return nil })
	}
	return err
}

// takeOver claims removed member node's groups, every half claim TTL
// while any is still its here (its claims stand until its life ends),
// until it is approved again or ctx ends.
func (r *Removals) takeOver(ctx context.Context, node string) {
	if r.want == nil {
		return
	}
	for ctx.Err() == nil && r.Removed(node) {
		groups, err := r.db.OriginGroups(ctx, node)
		if err == nil && len(groups) == 0 {
			return
		}
		for _, g := range groups {
			r.want(g)
		}
		sleep(ctx, r.claims.ttl/2)
	}
}

// approvedRebuildEvery is how often an approved member's dump is asked
// for until it answers (it may start again only after its approval).
const approvedRebuildEvery = 2 * time.Second

// rebuildApproved rebuilds approved member node's part from its dump,
// asking until it answers, it is removed again, or ctx ends: its events
// while removed, and before (its peer row, its worker nodes), were
// dropped here.
func (r *Removals) rebuildApproved(ctx context.Context, node string) {
	if r.rebuilder == nil {
		return
	}
	for ctx.Err() == nil && !r.Removed(node) {
		err := r.rebuilder.Rebuild(ctx, node)
		if err == nil {
			r.log.Info("peers: rebuilt an approved member's part from its dump", "peer", node)
			return
		}
		r.log.Debug("peers: an approved member's dump not had yet", "peer", node, "err", err)
		sleep(ctx, approvedRebuildEvery)
	}
}

// undone reports whether the leader of the bucket's stream says, at each
// of three reads a second apart, that node's removal is undone (no write
// stands, or a delete): a removal of this node seen by a lagging replica.
// An error, or a removal standing at any read, is not undone.
func (r *Removals) undone(ctx context.Context, node string) bool {
	for i := range 3 {
		if i > 0 {
			sleep(ctx, time.Second)
		}
		last, err := r.claims.lastOnLeader(ctx, RemovedBucket, node)
		if err != nil {
			return false
		}
		if last.found && !last.deleted {
			if rm, err := r.openRemoval(node, last.data); err != nil || !rm.Approved {
				return false
			}
		}
	}
	return ctx.Err() == nil
}

// write writes fn, trying again while the catalog is busy; only ctx's
// end is an error.
func (r *Removals) write(ctx context.Context, fn func(*store.Tx) error) error {
	for {
		err := r.db.Write(ctx, fn)
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Warn("peers: recording a member's removal", "err", err)
		sleep(ctx, time.Second)
	}
}

// Removed reports whether node is removed from the fleet, as this node
// has followed it.
func (r *Removals) Removed(node string) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.removed[node]
	return ok
}

// List is the members removed, by name.
func (r *Removals) List() []Removal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Removal, 0, len(r.removed))
	for _, rm := range r.removed {
		out = append(out, rm)
	}
	return out
}

// Remove removes member node from the fleet for good. A member whose life
// is renewed now is refused unless force, and then its life is ended for
// it so its groups are taken over at once. Errors: invalid (this node,
// or a bad name), not found (no member of that name), conflict (alive,
// not forced), unavailable.
func (r *Removals) Remove(ctx context.Context, node string, force bool) error {
	if !leasehold.ValidNodeName(node) {
		return leasehold.Errorf(leasehold.KindInvalid, "%q is not a node name", node)
	}
	if node == r.self {
		return leasehold.Errorf(leasehold.KindInvalid, "node %s is the node you are talking to: remove it from another node of the fleet", node)
	}
	st, err := r.claims.readLife(ctx, node)
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "removing node %s: its life cannot be read: %v", node, err)
	}
	if !st.found && !r.known(ctx, node) {
		return leasehold.Errorf(leasehold.KindNotFound, "node %s is not a member of this fleet (GET /api/v1/peers lists them)", node)
	}
	alive := st.found && st.life.Node == node && !r.claims.lapsedAt(st.at)
	if alive && !force {
		return leasehold.Errorf(leasehold.KindConflict,
			"node %s is running: its life in the fleet was renewed %s ago; stop it first, or force the removal (it then leaves the fleet, and its groups are taken over)",
			node, time.Since(st.at).Round(time.Second))
	}
	b, err := r.removalNow(node, false)
	if err != nil {
		return err
	}
	if _, err := r.kv.Put(ctx, node, b); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "removing node %s: %v", node, err)
	}
	if st.found {
		// Its claims stand while its life does: ended now, its groups
		// are taken over without waiting for the TTL.
		if err := r.claims.lives.Delete(ctx, ClaimKey(node), jetstream.LastRevision(st.rev)); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			r.log.Warn("peers: ending a removed member's life", "peer", node, "err", err)
		}
	}
	r.log.Warn("peers: removing a member from the fleet", "peer", node, "forced", force && alive)
	return nil
}

// known reports whether node is a member this node has folded events of,
// or whose groups' state it holds; an error reading the catalog counts
// as known (the removal is the operator's word).
func (r *Removals) known(ctx context.Context, node string) bool {
	peers, err := r.db.PeerMembers(ctx)
	if err != nil {
		return true
	}
	for _, p := range peers {
		if p.Name == node {
			return true
		}
	}
	groups, err := r.db.OriginGroups(ctx, node)
	return err != nil || len(groups) > 0
}

// Approve undoes node's removal. Errors: not found (not removed),
// unavailable.
func (r *Removals) Approve(ctx context.Context, node string) error {
	if !leasehold.ValidNodeName(node) {
		return leasehold.Errorf(leasehold.KindInvalid, "%q is not a node name", node)
	}
	e, err := r.kv.Get(ctx, node)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "approving node %s: %v", node, err)
	}
	// Removed as followed here, unless the bucket's value, believed, says
	// otherwise: a value written over the removal that is not believed
	// (or a delete) undid nothing.
	standing := r.Removed(node)
	if err == nil {
		if rm, oerr := r.openRemoval(node, e.Value()); oerr == nil {
			standing = !rm.Approved
		}
	}
	if !standing {
		return leasehold.Errorf(leasehold.KindNotFound, "node %s is not removed from the fleet", node)
	}
	// Signed, as the removal was: a delete would carry no signature.
	b, err := r.removalNow(node, true)
	if err != nil {
		return err
	}
	if _, err := r.kv.Put(ctx, node, b); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "approving node %s: %v", node, err)
	}
	return nil
}

// GroupGone is a group its owner deleted, under the claim it owned it
// by (Message.GroupGone).
type GroupGone struct {
	Name     string `json:"name"`
	ClaimRev uint64 `json:"claim_rev"`
}

// groupGone reads an EventGroupDeleted's body; nil when it is not one.
func groupGone(e leasehold.Event) *GroupGone {
	var g GroupGone
	if json.Unmarshal(e.Body, &g) != nil || g.Name == "" {
		return nil
	}
	return &g
}

// Forget gives up group's claim once this node deleted the group
// (appliance.Forgetter): no peer takes it over, the tombstone stands.
func (g *Gate) Forget(ctx context.Context, group string) error {
	p := g.through()
	if p == nil {
		return g.Ready()
	}
	return p.fleet.claims.Release(ctx, group)
}

// RemoveMember removes member node from the fleet (Removals.Remove).
// Errors: as Remove's; unavailable while this node joins.
func (f *Fleet) RemoveMember(ctx context.Context, node string, force bool) error {
	if !f.isJoined() {
		return f.gate.Ready()
	}
	return f.removals.Remove(ctx, node, force)
}

// ApproveMember undoes member node's removal (Removals.Approve). Errors:
// as Approve's; unavailable while this node joins.
func (f *Fleet) ApproveMember(ctx context.Context, node string) error {
	if !f.isJoined() {
		return f.gate.Ready()
	}
	return f.removals.Approve(ctx, node)
}
