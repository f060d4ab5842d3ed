package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// Ownership in a fleet. A node leases only the groups it owns (groups.owned);
// without peers it owns every group. Peer sync decides ownership with claims
// held elsewhere (a NATS key-value bucket) and tells the store here; the
// store only keeps the lease choice to the groups this node may lease.

// Event kinds of ownership changes.
const (
	EventGroupOwned    = "group_owned"
	EventGroupDisowned = "group_disowned"
)

var (
	qGroupClaim   = wq(`SELECT name, owned, claim_rev FROM groups WHERE id = ?`)
	qRangeGroup   = wq(`SELECT group_id FROM ranges WHERE id = ?`)
	qGroupIDOwned = wq(`SELECT id, owned, held FROM groups WHERE name = ?`)
	qGroupOwn     = wq(`UPDATE groups SET owned = ?2 WHERE id = ?1`)
)

// DisownGroup stops this node leasing the named group (its claim was lost
// or lapsed): the group leaves the lease choice, and a holder here loses
// its lease at once, its range going back to planned at its resume point.
// A missing group is not found; a disowned one is left as it is.
func (tx *Tx) DisownGroup(name string, maxAttempts int64) error {
	id, owned, _, err := tx.groupOwnership(name)
	if err != nil || !owned {
		return err
	}
	return tx.disown(id, maxAttempts)
}

func (tx *Tx) disown(groupID, maxAttempts int64) error {
	if err := tx.endLease(groupID, maxAttempts, "disowned"); err != nil {
		return err
	}
	if _, err := tx.exec(qGroupOwn, groupID, 0); err != nil {
		return mapError(err, "disowning a group")
	}
	return tx.event(EventGroupDisowned, groupID, 0, 0, nil)
}

// GroupClaim reads what the fleet fence asks of a group: its name, whether
// this node owns it, and the claim revision it owns it under (every lease
// of the group here was granted under that revision). A missing group is
// not found.
func (tx *Tx) GroupClaim(groupID int64) (name string, owned bool, claimRev uint64, err error) {
	var rev int64 // the driver scans no unsigned integers
	err = tx.queryRow(qGroupClaim, groupID).Scan(&name, &owned, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, 0, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", groupID)
	}
	return name, owned, uint64(rev), mapError(err, "reading a group's claim")
}

// RangeGroup is the group of a range. A missing range is not found.
func (tx *Tx) RangeGroup(rangeID int64) (int64, error) {
	var gid int64
	err := tx.queryRow(qRangeGroup, rangeID).Scan(&gid)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, leasehold.Errorf(leasehold.KindNotFound, "range %d not found", rangeID)
	}
	return gid, mapError(err, "reading a range")
}

// endLease ends the group's lease here, if it is held, for why: its
// leased range goes back to planned at its resume point.
func (tx *Tx) endLease(groupID, maxAttempts int64, why string) error {
	var holder sql.NullInt64
	var fence int64
	if err := tx.queryRow(qLeaseHolder, groupID).Scan(&holder, &fence); err != nil {
		return mapError(err, "ending a lease")
	}
	if !holder.Valid {
		return nil
	}
	if err := tx.releaseGroup(groupID, maxAttempts); err != nil {
		return err
	}
	return tx.event(EventLeaseReleased, groupID, 0, holder.Int64, map[string]any{"fence": fence, "reason": why})
}

func (tx *Tx) groupOwnership(name string) (id int64, owned, held bool, err error) {
	err = tx.queryRow(qGroupIDOwned, name).Scan(&id, &owned, &held)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, false, leasehold.Errorf(leasehold.KindNotFound, "group %q not found", name)
	}
	return id, owned, held, mapError(err, "reading a group's ownership")
}

// OwnedGroups lists the names of the groups this node may lease, by name.
func (db *DB) OwnedGroups(ctx context.Context) ([]string, error) {
	return db.groupNames(ctx, "listing owned groups", `SELECT name FROM groups WHERE owned = 1 ORDER BY name`)
}

// OwnedWithSnapshot lists the owned groups that have a window snapshot
// here, by name: what a node that ran alone replicates once it has peers.
func (db *DB) OwnedWithSnapshot(ctx context.Context) ([]string, error) {
	return db.groupNames(ctx, "listing owned groups with a snapshot", `SELECT g.name FROM group_leases l JOIN groups g ON g.id = l.group_id
		WHERE g.owned = 1 AND l.snapshot_file IS NOT NULL ORDER BY g.name`)
}

// DisownedGroups lists up to limit groups this node has but does not own
// that have work to lease, the longest unheld first, to offer their
// claims again.
func (db *DB) DisownedGroups(ctx context.Context, limit int) ([]string, error) {
	return db.groupNames(ctx, "listing disowned groups", `SELECT name FROM groups INDEXED BY groups_disowned
		WHERE owned = 0 AND active = 1 AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL) ORDER BY free_since LIMIT ?`, limit)
}

// DisownedGroupsFor lists up to limit of the groups DisownedGroups lists
// that the worker node nodeID could lease if this node owned them: of one
// of its kinds, with planned work in its band (rule 1's choice without
// the ownership), oldest free first. It is what a node whose worker found
// nothing asks its peers to hand over. A paused node, or one of capacity
// 0, wants none. Errors: not found (the node), unavailable, internal.
func (db *DB) DisownedGroupsFor(ctx context.Context, nodeID int64, limit int) ([]string, error) {
	var paused bool
	var capacity, pmin, pmax int64
	var kindsText string
	err := db.queryRow(ctx, `SELECT paused, capacity, priority_min, priority_max, kinds FROM nodes WHERE id = ?`, nodeID).
		Scan(&paused, &capacity, &pmin, &pmax, &kindsText)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, leasehold.Errorf(leasehold.KindNotFound, "node %d not found", nodeID)
	}
	if err != nil {
		return nil, mapError(err, "listing disowned groups for a node")
	}
	if paused || capacity <= 0 || pmin > pmax || limit <= 0 {
		return nil, nil
	}
	var out []string
	for _, kind := range parseKinds(kindsText) {
		names, err := db.groupNames(ctx, "listing disowned groups for a node", `SELECT name FROM groups INDEXED BY groups_disowned
			WHERE owned = 0 AND active = 1 AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL)
			AND kind = ?1 AND quarantine_at IS NULL AND (urgent_tail BETWEEN ?2 AND ?3 OR urgent_hist BETWEEN ?2 AND ?3)
			ORDER BY free_since LIMIT ?4`, kind, pmin, pmax, limit-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}

// groupNames runs a query of group names on the reader pool.
func (db *DB) groupNames(ctx context.Context, doing, q string, args ...any) ([]string, error) {
	rows, err := db.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, mapError(err, doing)
		}
		out = append(out, name)
	}
	return out, mapError(rows.Err(), doing)
}

var qGroupDisownIdle = wq(`UPDATE groups SET owned = 0 WHERE name = ?1 AND owned = 1 AND held = 0 AND free_since < ?2 RETURNING id`)

// DisownIdle stops this node leasing those of names that are owned here
// but idle (not held, released before since) and returns them: their
// claims are released next. One write, so no lease can be granted between
// the check and the disowning; a node that wants them again claims them
// back when its workers are idle.
func (tx *Tx) DisownIdle(names []string, since time.Time) ([]string, error) {
	var out []string
	for _, name := range names {
		var id int64
		err := tx.queryRow(qGroupDisownIdle, name, ms(since)).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, mapError(err, "disowning idle groups")
		}
		if err := tx.event(EventGroupDisowned, id, 0, 0, map[string]any{"reason": "idle"}); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

// PeerOwner names the fleet node whose state the named group holds here,
// "" when it is this node's own (or unknown). Errors: unavailable,
// internal.
func (db *DB) PeerOwner(ctx context.Context, name string) (string, error) {
	var origin string
	err := db.queryRow(ctx, `SELECT p.origin FROM groups g JOIN peer_groups p ON p.group_id = g.id WHERE g.name = ?`, name).Scan(&origin)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return origin, mapError(err, "reading a group's owner")
}

// OwnGroup lets this node lease the named group: its claim was won at
// claimRev. A group whose state was a peer's is adopted: from here on it
// is this node's own, and rule 2 is applied at once from the snapshot this
// node holds (S = its next), or from the group's start if the peer had a
// snapshot this node has no copy of, since the next worker starts from
// that window; so a group whose newest window never left its old owner is
// worked again from what did. An owned group only has its claim revision
// set. A claim won anew (another revision than the one the group is owned
// under) means this node stopped holding the group in between, however
// briefly: every lease granted under the earlier claim is ended here, its
// range back to planned at its resume point, so no holder of it is
// answered again (the fleet fence compares the claim held with the
// revision recorded here). A missing group is not found.
func (tx *Tx) OwnGroup(name string, claimRev uint64, maxAttempts int64) error {
	id, owned, _, err := tx.groupOwnership(name)
	if err != nil {
		return err
	}
	if owned {
		_, _, was, err := tx.GroupClaim(id)
		if err != nil || was == claimRev {
			return err
		}
		if err := tx.endLease(id, maxAttempts, "claim won anew"); err != nil {
			return err
		}
		if err := tx.fenceLead(id); err != nil {
			return err
		}
		if _, err = tx.exec(qGroupClaimRev, id, claimRev); err != nil {
			return mapError(err, "owning a group")
		}
		// Told, as any ownership change is: peers learn the new claim,
		// and its first state carries the whole group (the publisher).
		return tx.event(EventGroupOwned, id, 0, 0, map[string]any{"claim_rev": claimRev, "anew": true})
	}
	var start int64
	if err := tx.queryRow(qGroupAdopt, id, claimRev).Scan(&start); err != nil {
		return mapError(err, "owning a group")
	}
	var origin string
	var peerSnap sql.NullInt64
	err = tx.queryRow(qPeerGroupOf, id).Scan(&origin, &peerSnap)
	if errors.Is(err, sql.ErrNoRows) {
		return tx.event(EventGroupOwned, id, 0, 0, map[string]any{"claim_rev": claimRev})
	}
	if err != nil {
		return mapError(err, "owning a group")
	}
	if _, err := tx.exec(qPeerGroupDrop, id); err != nil {
		return mapError(err, "owning a group")
	}
	if err := tx.fenceLead(id); err != nil {
		return err
	}
	var local sql.NullInt64
	if err := tx.queryRow(qLeaseSnapNext, id).Scan(&local); err != nil {
		return mapError(err, "owning a group")
	}
	// The takeover rule, now: the window this node's workers will resume
	// is the snapshot it holds (imported just before, and possibly older
	// than the peer's newest, which may never have been replicated), so
	// every range that snapshot does not cover is planned again, done or
	// not. Without one, but with the peer having had one, the window
	// starts empty: from the group's start.
	switch {
	case local.Valid:
		next := local.Int64
		err = tx.replan(id, &next, 1<<62)
	case peerSnap.Valid:
		err = tx.replan(id, &start, 1<<62)
	default:
		err = tx.replan(id, nil, 1<<62)
	}
	if err != nil {
		return err
	}
	return tx.event(EventGroupAdopted, id, 0, 0, map[string]any{"claim_rev": claimRev, "from": origin})
}

// FenceLead is how far a node that takes a group over from a peer moves
// the group's fence past the highest it has folded. The fence a peer
// granted last may not have reached this node (granted, then the peer
// died before its event went out), and a store outside the fleet (the
// shared index) compares fences: the next holder's must be above every
// fence the group had. A peer publishes each commit's events within
// moments, so the leases it can have granted unseen are a handful, far
// below 2^20; and 2^33 takeovers of one group keep fences below 2^53,
// exact in every JSON client.
const FenceLead = 1 << 20

// fenceLead moves group id's fence FenceLead past the highest known.
func (tx *Tx) fenceLead(id int64) error {
	if _, err := tx.exec(qLeaseFenceLead, id, FenceLead); err != nil {
		return mapError(err, "owning a group")
	}
	return nil
}
