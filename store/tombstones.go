package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold"
)

// A fleet's deletions and removals in the catalog (version 14).
//
// A group deleted in a fleet is deleted by its owner, which leaves a
// tombstone (the claim revision it owned the group under) and publishes
// EventGroupDeleted; every peer folding it deletes its copy and keeps the
// same tombstone. A peer's state of that group under the tombstone's
// claim or an earlier one is then a late event (the owner's own, still in
// the stream, or an earlier owner's that was slow) and is not folded: the
// group is not made again. A group created anew is claimed under a later
// revision of the claims bucket, so it is let in. One made anew whose
// claim could not be made yet (PutGroup lets it wait for the first lease
// or admin write) goes out under claim 0 and is buried at the peers until
// then: its state under no claim cannot be told from a late one of the
// group deleted. The claim, when made, is later than the tombstone's, and
// its first state carries the whole group, so every peer has it from
// there (fleet's TestTombstoneUnclaimedGroupHeals).
//
// A member removed from the fleet is remembered by name: its events are
// not folded, it leaves the peers, and the worker nodes registered at it
// go (their tokens let in nowhere, its visitors here deleted). Its groups
// stay here as its state, for the takeover that follows its life's end.

// EventGroupDeleted is a group deleted in a fleet: its body names it and
// the claim revision it was deleted under.
const EventGroupDeleted = "group_deleted"

var (
	qTombstone    = wq(`SELECT claim_rev FROM group_tombstones WHERE name = ?`)
	qTombstoneSet = wq(`INSERT INTO group_tombstones (name, claim_rev, origin, deleted_at) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (name) DO UPDATE SET claim_rev = max(claim_rev, ?2), origin = iif(?2 >= claim_rev, ?3, origin), deleted_at = ?4`)
	qGroupOwnRev      = wq(`SELECT owned, claim_rev FROM groups WHERE id = ?`)
	qMemberRemoved    = wq(`SELECT EXISTS (SELECT 1 FROM removed_members WHERE name = ?)`)
	qMemberRemove     = wq(`INSERT INTO removed_members (name, removed_by, removed_at) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO NOTHING`)
	qMemberApprove    = wq(`DELETE FROM removed_members WHERE name = ?`)
	qPeerForget       = wq(`DELETE FROM peers WHERE name = ?`)
	qPeerNodesForget  = wq(`DELETE FROM peer_nodes WHERE origin = ?`)
	qVisitorsOf       = wq(`SELECT id, name FROM nodes WHERE home = ?`)
	qRebuildOweForget = wq(`DELETE FROM rebuilds_owed WHERE origin = ?`)
)

// tombstone is the claim revision the named group was deleted under in
// the fleet, and whether it was.
func (tx *Tx) tombstone(name string) (uint64, bool, error) {
	var rev int64
	err := tx.queryRow(qTombstone, name).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, mapError(err, "reading a group's tombstone")
	}
	return uint64(rev), true, nil
}

// buried reports whether a peer's state of group name under claim rev is
// of a group deleted since: its tombstone's claim is as new or newer.
func (tx *Tx) buried(name string, rev uint64) (bool, error) {
	dead, ok, err := tx.tombstone(name)
	return ok && rev <= dead, err
}

// DeleteFleetGroup is an operator deleting the named group at its owner,
// in a fleet: its ranges, lease row and window go as in DeleteGroup, a
// tombstone of the claim it was owned under stays, and EventGroupDeleted
// carries the deletion to every peer. It returns the group and its
// window (whose file the caller removes once tx is committed). Errors:
// not found, conflict (held, or not this node's own).
func (tx *Tx) DeleteFleetGroup(name string) (leasehold.Group, *leasehold.Snapshot, error) {
	g, err := tx.GroupByName(name)
	if err != nil {
		return g, nil, err
	}
	var owned bool
	var rev int64
	if err := tx.queryRow(qGroupOwnRev, g.ID).Scan(&owned, &rev); err != nil {
		return g, nil, mapError(err, "deleting a group")
	}
	if !owned {
		return g, nil, leasehold.Errorf(leasehold.KindConflict, "group %s is not owned by this node: delete it at its owner", name)
	}
	g, snap, err := tx.DeleteGroup(name)
	if err != nil {
		return g, nil, err
	}
	if _, err := tx.exec(qTombstoneSet, name, rev, "", ms(tx.now)); err != nil {
		return g, nil, mapError(err, "deleting a group")
	}
	return g, snap, tx.event(EventGroupDeleted, 0, 0, 0, map[string]any{"name": name, "claim_rev": rev})
}

// FoldGroupGone folds origin's deletion of group name, owned there under
// claim rev: the tombstone is kept, and the group is deleted here unless
// this node's copy is of a later claim (made anew since). A lease held
// here on it ends with it: the group is no more. Nothing here is
// published (folding writes no outbox rows).
func (tx *Tx) FoldGroupGone(origin, name string, rev uint64) error {
	if !leasehold.ValidGroupName(name) {
		return leasehold.Errorf(leasehold.KindInvalid, "peer %q: group %q is not valid", origin, name)
	}
	if _, err := tx.exec(qTombstoneSet, name, int64(rev), origin, ms(tx.now)); err != nil {
		return mapError(err, "folding a peer's deleted group")
	}
	var id, have int64
	err := tx.queryRow(qFoldGroupFind, name).Scan(&id, new(bool), &have)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return mapError(err, "folding a peer's deleted group")
	}
	if uint64(have) > rev {
		return nil // made anew under a later claim
	}
	for _, q := range []*query{qGroupDeleteRanges, qGroupDeleteLease, qGroupDeletePeer, qGroupDelete} {
		if _, err := tx.exec(q, id); err != nil {
			return mapError(err, "folding a peer's deleted group")
		}
	}
	return nil
}

// MemberRemoved reports whether the fleet removed member name.
func (tx *Tx) MemberRemoved(name string) (bool, error) {
	var gone bool
	err := tx.queryRow(qMemberRemoved, name).Scan(&gone)
	return gone, mapError(err, "reading the removed members")
}

// RemoveMember records that the fleet removed member name (by whom, for
// the record), and forgets it here: its peer row, the worker nodes
// registered at it (their tokens let in nowhere now) and their visitors
// here, with what they hold released, and a rebuild owed from its dump.
// Its groups stay, as its state, for their takeover. A member removed
// already is left as it is.
func (tx *Tx) RemoveMember(name, by string, maxAttempts int64) error {
	if _, err := tx.exec(qMemberRemove, name, by, ms(tx.now)); err != nil {
		return mapError(err, "removing a member")
	}
	for _, q := range []*query{qPeerForget, qPeerNodesForget, qRebuildOweForget} {
		if _, err := tx.exec(q, name); err != nil {
			return mapError(err, "removing a member")
		}
	}
	rows, err := tx.query(qVisitorsOf, name)
	if err != nil {
		return mapError(err, "removing a member")
	}
	type visitor struct {
		id   int64
		name string
	}
	var visitors []visitor
	for rows.Next() {
		var v visitor
		if err := rows.Scan(&v.id, &v.name); err != nil {
			rows.Close()
			return mapError(err, "removing a member")
		}
		visitors = append(visitors, v)
	}
	rows.Close()
	for _, v := range visitors {
		if err := tx.dropVisitor(v.id, name, v.name, maxAttempts); err != nil {
			return err
		}
	}
	tx.forgetAuths()
	return nil
}

// ApproveMember lets member name back after a removal: its events are
// folded again from its next one (its dump rebuilds what it missed).
// Errors: not found (not removed).
func (tx *Tx) ApproveMember(name string) error {
	res, err := tx.exec(qMemberApprove, name)
	if err != nil {
		return mapError(err, "approving a member")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return leasehold.Errorf(leasehold.KindNotFound, "node %s is not removed from the fleet", name)
	}
	return nil
}

// RemovedMembers lists the members the fleet removed, by name.
func (db *DB) RemovedMembers(ctx context.Context) (map[string]bool, error) {
	rows, err := db.query(ctx, `SELECT name FROM removed_members`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, mapError(err, "listing the removed members")
		}
		out[name] = true
	}
	return out, mapError(rows.Err(), "listing the removed members")
}

// homeScan scans nodeColumns and then the node's home.
type homeScan struct {
	s    scanner
	home *string
}

func (h homeScan) Scan(dest ...any) error { return h.s.Scan(append(dest, h.home)...) }

// NodeHome is node id's name and home: "" for a node registered here, the
// peer it is registered at for a visitor. Errors: not found.
func (db *DB) NodeHome(ctx context.Context, id int64) (name, home string, err error) {
	err = db.queryRow(ctx, `SELECT name, home FROM nodes WHERE id = ?`, id).Scan(&name, &home)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", leasehold.Errorf(leasehold.KindNotFound, "node %d not found", id)
	}
	return name, home, mapError(err, "reading a node")
}

// OwnNodeID is the id of the node registered here under name. Errors:
// not found (none, or only a visitor of that name).
func (db *DB) OwnNodeID(ctx context.Context, name string) (int64, error) {
	var id int64
	err := db.queryRow(ctx, `SELECT id FROM nodes WHERE name = ? AND home = ''`, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, leasehold.Errorf(leasehold.KindNotFound, "node %s is not registered here", name)
	}
	return id, mapError(err, "reading a node")
}

// OriginGroups lists the groups whose state here is origin's, by name:
// a removed member's, to be taken over.
func (db *DB) OriginGroups(ctx context.Context, origin string) ([]string, error) {
	return db.groupNames(ctx, "listing a peer's groups",
		`SELECT g.name FROM peer_groups p JOIN groups g ON g.id = p.group_id WHERE p.origin = ? ORDER BY g.name`, origin)
}
