package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/leasehold/leasehold"
)

// NodeAuth is what authentication needs to know of a node.
type NodeAuth struct {
	ID        int64
	Name      string
	TokenHash []byte
	// Home is the peer a visitor is registered at, "" for a node
	// registered here.
	Home string
}

const nodeColumns = `n.id, n.name, n.priority_min, n.priority_max, n.capacity, n.paused, n.paused_by, n.paused_at,
	(SELECT count(*) FROM group_leases l WHERE l.node_id = n.id), n.last_seen_at, n.created_at, n.kinds`

type scanner interface{ Scan(...any) error }

func scanNode(s scanner) (leasehold.Node, error) {
	var n leasehold.Node
	var pausedAt, seen sql.NullInt64
	var created int64
	var kinds string
	err := s.Scan(&n.ID, &n.Name, &n.PriorityMin, &n.PriorityMax, &n.Capacity, &n.Paused, &n.PausedBy, &pausedAt, &n.Held, &seen, &created, &kinds)
	n.Kinds = parseKinds(kinds)
	at := fromMS(created)
	n.PausedAt, n.LastSeenAt, n.CreatedAt = fromNullMS(pausedAt), fromNullMS(seen), &at
	return n, err
}

var (
	qNodeInsert = wq(`INSERT INTO nodes (name, token_hash, priority_min, priority_max, capacity, created_at, kinds) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	qNodeSet    = wq(`UPDATE nodes SET kinds = ?2, capacity = ?3 WHERE id = ?1`)
	qNodeByID   = wq(`SELECT ` + nodeColumns + ` FROM nodes n WHERE n.id = ?`)
	qNodePause  = wq(`UPDATE nodes SET paused = ?, paused_by = ?, paused_at = ? WHERE id = ?`)
	qNodeDelete = wq(`DELETE FROM nodes WHERE id = ?`)
	qNodeToken  = wq(`UPDATE nodes SET token_hash = ? WHERE id = ?`)
	qNodeSeen   = wq(`UPDATE nodes SET last_seen_at = ?1 WHERE id = ?2 AND (last_seen_at IS NULL OR last_seen_at < ?1 - 1000)`)
	qNodeHeld   = wq(`SELECT group_id FROM group_leases WHERE node_id = ?`)
)

// NewNode is a node to register.
type NewNode struct {
	Name        string
	TokenHash   []byte
	PriorityMin int64
	PriorityMax int64
	Capacity    int64
	// Kinds are the kinds of group it reads; none is [default].
	Kinds []string
}

// CreateNode registers a node. A taken name is a conflict; bad kinds are
// invalid.
func (tx *Tx) CreateNode(n NewNode) (leasehold.Node, error) {
	kinds, err := kindsJSON(n.Kinds)
	if err != nil {
		return leasehold.Node{}, err
	}
	res, err := tx.exec(qNodeInsert, n.Name, n.TokenHash, n.PriorityMin, n.PriorityMax, n.Capacity, ms(tx.now), kinds)
	if isUnique(err) {
		return leasehold.Node{}, leasehold.Errorf(leasehold.KindConflict, "node %q exists", n.Name)
	}
	if err != nil {
		return leasehold.Node{}, mapError(err, "registering a node")
	}
	id, _ := res.LastInsertId()
	if err := tx.event(EventNodeRegistered, 0, 0, id, map[string]any{"name": n.Name, "kinds": n.Kinds}); err != nil {
		return leasehold.Node{}, err
	}
	return tx.Node(id)
}

// Node reads a node inside the transaction; a missing one is not found.
func (tx *Tx) Node(id int64) (leasehold.Node, error) {
	n, err := scanNode(tx.queryRow(qNodeByID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return n, leasehold.Errorf(leasehold.KindNotFound, "node %d not found", id)
	}
	return n, mapError(err, "reading a node")
}

// NodeChange is what PATCH /nodes/{id} sets, the API's request type
// itself: one type from the wire to the catalog.
type NodeChange = leasehold.NodeChange

// EventNodeChanged is a node's kinds or capacity changed.
const EventNodeChanged = "node_changed"

// ChangeNode sets a node's kinds or capacity. The groups it holds stay
// its own until released: a lease already granted is not taken back.
// Errors: not found, invalid.
func (tx *Tx) ChangeNode(id int64, c NodeChange) (leasehold.Node, error) {
	n, err := tx.Node(id)
	if err != nil {
		return n, err
	}
	if err := tx.notVisitor(id, n.Name); err != nil {
		return n, err
	}
	if c.Kinds != nil {
		n.Kinds = c.Kinds
	}
	if c.Capacity != nil {
		n.Capacity = *c.Capacity
	}
	kinds, err := kindsJSON(n.Kinds)
	if err != nil {
		return n, err
	}
	if _, err := tx.exec(qNodeSet, id, kinds, n.Capacity); err != nil {
		return n, mapError(err, "changing a node")
	}
	if err := tx.event(EventNodeChanged, 0, 0, id, map[string]any{"kinds": n.Kinds, "capacity": n.Capacity}); err != nil {
		return n, err
	}
	return tx.Node(id)
}

// kindsJSON checks a node's kinds (1 to MaxNodeKinds valid, distinct
// names; none is [default]) and encodes them for the kinds column.
func kindsJSON(kinds []string) (string, error) {
	if len(kinds) == 0 {
		kinds = []string{leasehold.DefaultSourceKind}
	}
	if len(kinds) > leasehold.MaxNodeKinds {
		return "", leasehold.Errorf(leasehold.KindInvalid, "a node reads at most %d kinds, not %d", leasehold.MaxNodeKinds, len(kinds))
	}
	for i, k := range kinds {
		if !leasehold.ValidSourceKind(k) {
			return "", leasehold.Errorf(leasehold.KindInvalid, "kind %q is not valid: 1-32 bytes of a-z, 0-9 and -", k)
		}
		if leasehold.HasSourceKind(kinds[:i], k) {
			return "", leasehold.Errorf(leasehold.KindInvalid, "kind %q is given twice", k)
		}
	}
	b, err := json.Marshal(kinds)
	return string(b), err
}

// parseKinds decodes the kinds column; the catalog only holds what
// kindsJSON made, so a bad value reads as [default].
func parseKinds(s string) []string {
	var kinds []string
	if json.Unmarshal([]byte(s), &kinds) != nil || len(kinds) == 0 {
		return []string{leasehold.DefaultSourceKind}
	}
	return kinds
}

// SetPaused pauses or resumes a node. A pause is kept across restarts.
func (tx *Tx) SetPaused(id int64, paused bool, by string) (leasehold.Node, error) {
	n, err := tx.Node(id)
	if err != nil {
		return leasehold.Node{}, err
	}
	if err := tx.notVisitor(id, n.Name); err != nil {
		return leasehold.Node{}, err
	}
	var at any
	kind := EventNodeResumed
	if paused {
		at, kind = ms(tx.now), EventNodePaused
	} else {
		by = ""
	}
	if _, err := tx.exec(qNodePause, paused, by, at, id); err != nil {
		return leasehold.Node{}, mapError(err, "pausing a node")
	}
	if err := tx.event(kind, 0, 0, id, map[string]any{"by": by}); err != nil {
		return leasehold.Node{}, err
	}
	return tx.Node(id)
}

// DeleteNode removes a node and its token; the groups it held are released
// at their resume points. Unless force, a node that holds groups is a
// conflict naming how many: its worker is likely running, and the delete
// takes its work away mid-range. A visitor is a conflict: it is deleted
// at its home.
func (tx *Tx) DeleteNode(id int64, maxAttempts int64, force bool) error {
	n, err := tx.Node(id)
	if err != nil {
		return err
	}
	if err := tx.notVisitor(id, n.Name); err != nil {
		return err
	}
	return tx.removeNode(id, n.Name, maxAttempts, force, nil)
}

// removeNode deletes node id (named name), releasing what it holds when
// force; body adds to its deletion event's.
func (tx *Tx) removeNode(id int64, name string, maxAttempts int64, force bool, body map[string]any) error {
	rows, err := tx.query(qNodeHeld, id)
	if err != nil {
		return mapError(err, "deleting a node")
	}
	var held []int64
	for rows.Next() {
		var g int64
		if err := rows.Scan(&g); err != nil {
			rows.Close()
			return mapError(err, "deleting a node")
		}
		held = append(held, g)
	}
	rows.Close()
	if len(held) > 0 && !force {
		return leasehold.Errorf(leasehold.KindConflict,
			"node %s holds %d group(s); deleting it releases them from under its worker: force the delete to do it", name, len(held))
	}
	for _, g := range held {
		if err := tx.releaseGroup(g, maxAttempts); err != nil {
			return err
		}
	}
	if _, err := tx.exec(qNodeDelete, id); err != nil {
		return mapError(err, "deleting a node")
	}
	// Remembered authentications and bands end with the commit
	// (NodeByTokenHash); raising the generation now as well keeps a later
	// write of this batch from trusting them.
	tx.db.nodeGen.Add(1)
	tx.AfterCommit(func() { tx.db.nodeGen.Add(1); tx.db.seen.Delete(id) })
	if body == nil {
		body = map[string]any{}
	}
	body["name"] = name
	return tx.event(EventNodeDeleted, 0, 0, id, body)
}

// EventNodeToken is a node's token changed. Its body is empty: the new
// hash travels only in the node's state that peer sync publishes.
const EventNodeToken = "node_token_changed"

// SetNodeToken gives a node a new token (its hash): the old one is
// refused here once this commits, and at every peer once it folds the
// event (which publishes the new hash). Remembered authentications end
// with the commit, as at a deletion. Errors: not found; conflict for a
// visitor, whose token is its home's.
func (tx *Tx) SetNodeToken(id int64, hash []byte) error {
	n, err := tx.Node(id)
	if err != nil {
		return err
	}
	if err := tx.notVisitor(id, n.Name); err != nil {
		return err
	}
	if _, err := tx.exec(qNodeToken, hash, id); err != nil {
		return mapError(err, "changing a node's token")
	}
	tx.forgetAuths()
	return tx.event(EventNodeToken, 0, 0, id, nil)
}

// forgetAuths ends the authentications NodeByTokenHash remembers, now for
// the rest of this write and again once it commits (before its caller
// hears back), so no entry read before the commit is trusted after it.
func (tx *Tx) forgetAuths() {
	tx.db.nodeGen.Add(1)
	tx.AfterCommit(func() { tx.db.nodeGen.Add(1) })
}

// TouchNode records that the node was seen now (at most once a second).
//
// Every worker call touches its node, so the time last recorded is
// remembered (once committed) and the catalog is only written when it is a
// second old: most calls then cost no statement at all.
func (tx *Tx) TouchNode(id int64) error {
	now := ms(tx.now)
	if v, ok := tx.db.seen.Load(id); ok && now-v.(int64) < 1000 && now >= v.(int64) {
		return nil
	}
	res, err := tx.exec(qNodeSeen, now, id)
	if err != nil {
		return mapError(err, "recording a node's visit")
	}
	// Remember only a time the catalog now holds: when the row was left
	// alone (a visit less than a second old, recorded before this process
	// started), the time it holds is unknown here.
	if n, _ := res.RowsAffected(); n > 0 {
		tx.AfterCommit(func() { tx.db.seen.Store(id, now) })
	}
	return nil
}

// Node reads a node; a missing one is not found.
func (db *DB) Node(ctx context.Context, id int64) (leasehold.Node, error) {
	n, err := scanNode(db.queryRow(ctx, `SELECT `+nodeColumns+` FROM nodes n WHERE n.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return n, leasehold.Errorf(leasehold.KindNotFound, "node %d not found", id)
	}
	return n, mapError(err, "reading a node")
}

// Nodes lists every node registered here by id; visitors are their
// home's (PeerNodes lists them there).
func (db *DB) Nodes(ctx context.Context) ([]leasehold.Node, error) {
	rows, err := db.query(ctx, `SELECT `+nodeColumns+`, n.home FROM nodes n ORDER BY n.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []leasehold.Node{}
	for rows.Next() {
		var home string
		n, err := scanNode(homeScan{rows, &home})
		if err != nil {
			return nil, mapError(err, "listing nodes")
		}
		n.Home = home
		out = append(out, n)
	}
	return out, mapError(rows.Err(), "listing nodes")
}

// NodeByTokenHash finds the node a token hash belongs to; none is not found.
//
// Every worker call authenticates, and a catalog read for each was a third
// of the node's HTTP work, so found nodes are remembered. A node's id and
// name never change; its deletion, a new token, or a visitor's home
// changing it (a fold) end them. Each entry carries the generation read
// before its catalog lookup, and each of those raises the generation once
// committed (before its caller hears back), so an entry that raced one is
// never trusted.
func (db *DB) NodeByTokenHash(ctx context.Context, hash []byte) (NodeAuth, error) {
	key := string(hash)
	gen := db.nodeGen.Load()
	if v, ok := db.auths.Load(key); ok {
		if e := v.(authEntry); e.gen == gen {
			return e.auth, nil
		}
		db.auths.Delete(key)
	}
	var a NodeAuth
	err := db.queryRow(ctx, `SELECT id, name, token_hash, home FROM nodes WHERE token_hash = ?`, hash).Scan(&a.ID, &a.Name, &a.TokenHash, &a.Home)
	if errors.Is(err, sql.ErrNoRows) {
		return a, leasehold.Errorf(leasehold.KindNotFound, "no node has that token")
	}
	if err == nil {
		db.auths.Store(key, authEntry{auth: a, gen: gen})
	}
	return a, mapError(err, "authenticating a node")
}

type authEntry struct {
	auth NodeAuth
	gen  int64
}
