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
// everywhere, their visitors deleted. Its groups are taken over by the
// others once its life ends, as for any member that is down; a member
// whose life is renewed is refused unless forced, and then its life is
// ended for it. The removed node, if it runs, sees its own removal and
// leaves the fleet (its fleet part ends with ErrRemoved). Approve takes
// the key away: a removal made by mistake is undone, and the member's
// next events are folded again.

// RemovedBucket holds the members removed from the fleet (key: node name,
// value: Removal).
const RemovedBucket = "leasehold_removed"

// Removal is the value of a removed member's key in RemovedBucket.
type Removal struct {
	Node string    `json:"node"`
	By   string    `json:"by"` // the node the operator removed it at
	At   time.Time `json:"at"`
}

// ErrRemoved is the end of the fleet part of a node that was removed
// from the fleet.
var ErrRemoved = errors.New("this node was removed from the fleet")

// KeyWithdrawer is told of each member removed and approved again, so
// that what the fleet trusts of it (its public key, once nodes sign what
// they publish) is withdrawn and given back with the removal. nil for
// none.
type KeyWithdrawer interface {
	Withdraw(node string)
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

	mu      sync.Mutex
	removed map[string]Removal

	service.Base
}

// newRemovals makes (or opens) RemovedBucket with copies.
func newRemovals(ctx context.Context, js jetstream.JetStream, copies int, db *store.DB, claims *Claims, self string, maxAttempts int64, log *slog.Logger) (*Removals, error) {
	kv, err := createBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: RemovedBucket, Description: "leasehold members removed from the fleet", History: 1, Replicas: copies,
	})
	if err != nil {
		return nil, err
	}
	return &Removals{kv: kv, db: db, claims: claims, self: self, maxAttempts: maxAttempts, log: log, removed: map[string]Removal{}}, nil
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
		r.mu.Lock()
		_, was := r.removed[node]
		delete(r.removed, node)
		r.mu.Unlock()
		err := r.write(ctx, func(tx *store.Tx) error {
			if err := tx.ApproveMember(node); leasehold.ErrorKind(err) != leasehold.KindNotFound {
				return err
			}
			return nil
		})
		if was && err == nil {
			r.log.Info("peers: member approved again", "peer", node)
			if r.keys != nil {
				r.keys.Restore(node)
			}
		}
		return err
	}
	var rm Removal
	if json.Unmarshal(e.Value(), &rm) != nil {
		rm = Removal{Node: node}
	}
	r.mu.Lock()
	r.removed[node] = rm
	r.mu.Unlock()
	if node == r.self {
		r.log.Error("peers: this node was removed from the fleet: it leaves it (an operator at another node approves it again with: leasehold admin fleet approve "+node+")",
			"by", rm.By, "at", rm.At)
		return fmt.Errorf("%w by node %s at %s", ErrRemoved, rm.By, rm.At.UTC().Format(time.RFC3339))
	}
	if r.keys != nil {
		r.keys.Withdraw(node)
	}
	err := r.write(ctx, func(tx *store.Tx) error { return tx.RemoveMember(node, rm.By, r.maxAttempts) })
	if err == nil {
		r.log.Warn("peers: member removed from the fleet", "peer", node, "by", rm.By)
	}
	return err
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
// or a bad name), conflict (alive, not forced), unavailable.
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
	alive := st.found && st.life.Node == node && !r.claims.lapsedAt(st.at)
	if alive && !force {
		return leasehold.Errorf(leasehold.KindConflict,
			"node %s is running: its life in the fleet was renewed %s ago; stop it first, or force the removal (it then leaves the fleet, and its groups are taken over)",
			node, time.Since(st.at).Round(time.Second))
	}
	b, _ := json.Marshal(Removal{Node: node, By: r.self, At: time.Now().UTC()})
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

// Approve undoes node's removal. Errors: not found (not removed),
// unavailable.
func (r *Removals) Approve(ctx context.Context, node string) error {
	if !leasehold.ValidNodeName(node) {
		return leasehold.Errorf(leasehold.KindInvalid, "%q is not a node name", node)
	}
	if _, err := r.kv.Get(ctx, node); errors.Is(err, jetstream.ErrKeyNotFound) {
		return leasehold.Errorf(leasehold.KindNotFound, "node %s is not removed from the fleet", node)
	} else if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "approving node %s: %v", node, err)
	}
	if err := r.kv.Delete(ctx, node); err != nil {
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
