package store

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold"
)

// Node tokens that travel. A node's token is registered at one node of a
// fleet, its home; the home publishes the token's sha-256 with the node's
// state (FleetNode), never the token. A peer folds the hash into
// peer_nodes, and when a worker presents that token there (Visit), makes
// the node a local row, a visitor: leases need a node of their own here,
// and rule 6's fencing stays the local one. The visitor follows its
// home's events of it: its pause, kinds, capacity and token (FoldNode),
// its deletion (FoldNodeGone). Only the home changes it; here it is a
// conflict.

// FleetNode is a worker node as peer sync carries it: the node, and the
// sha-256 of its token when the node is registered at the publishing
// node. A visitor is published without one (its token is its home's to
// give), and so is every node by a build from before travelling tokens:
// a FleetNode without a hash lets no token in.
type FleetNode struct {
	leasehold.Node
	TokenHash []byte `json:"token_hash,omitempty"`
}

// ErrNameTaken is why a peer's node is kept out (an unauthorized error
// wraps it): a node of its name is registered here, or visits from
// another peer. Its worker is told so, its token being good elsewhere.
var ErrNameTaken = errors.New("a name is one node in a fleet")

// fleetNodeSelect reads nodes as FleetNodes (fleetScan).
const fleetNodeSelect = `SELECT ` + nodeColumns + `, n.token_hash, n.home FROM nodes n`

var (
	qNodeHome    = wq(`SELECT home FROM nodes WHERE id = ?`)
	qVisitorOf   = wq(`SELECT id, token_hash FROM nodes WHERE name = ?1 AND home = ?2`)
	qVisitorStep = wq(`UPDATE nodes SET token_hash = ?2, priority_min = ?3, priority_max = ?4, capacity = ?5, paused = ?6, paused_by = ?7,
		paused_at = ?8, kinds = ?9 WHERE id = ?1`)
	qPeerNodeByHash = wq(`SELECT origin, name, priority_min, priority_max, capacity, paused, paused_by, paused_at, kinds
		FROM peer_nodes WHERE token_hash = ? ORDER BY origin LIMIT 1`)
	qNodeNamed     = wq(`SELECT id, home FROM nodes WHERE name = ?`)
	qNodeSeenAway  = wq(`UPDATE nodes SET last_seen_at = ?2 WHERE name = ?1 AND home = '' AND (last_seen_at IS NULL OR last_seen_at < ?2)`)
	qVisitorInsert = wq(`INSERT INTO nodes (name, token_hash, priority_min, priority_max, capacity, paused, paused_by, paused_at, created_at, kinds, home)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)`)
)

// notVisitor refuses a change made here to a visitor: its home owns it.
func (tx *Tx) notVisitor(id int64, name string) error {
	var home string
	if err := tx.queryRow(qNodeHome, id).Scan(&home); err != nil {
		return mapError(err, "reading a node")
	}
	if home != "" {
		return leasehold.Errorf(leasehold.KindConflict, "node %s is registered at %s: change it there", name, home)
	}
	return nil
}

// validHash is hash when it is a sha-256, else nil: a peer's hash of
// another length lets nothing in.
func validHash(hash []byte) []byte {
	if len(hash) != sha256.Size {
		return nil
	}
	return hash
}

// stepVisitor keeps the visitor of origin's node n (if there is one here)
// in step with it: its band, capacity, pause, kinds and token hash; and
// a node of that name registered here takes the time n was last seen
// there, if later than its own. One
// whose home sends no hash (a node of an older build) can no longer come
// in, so it is removed, as at a deletion. A change ends remembered
// authentications and bands (NodeByTokenHash, NodeBand).
func (tx *Tx) stepVisitor(origin string, n FleetNode, kinds string, maxAttempts int64) error {
	if n.LastSeenAt != nil {
		// Seen at the peer (a visitor there, its home here): a worker
		// that works only elsewhere is not unseen at its home.
		if _, err := tx.exec(qNodeSeenAway, n.Name, ms(*n.LastSeenAt)); err != nil {
			return mapError(err, "folding a peer's node")
		}
	}
	var id int64
	var hash []byte
	err := tx.queryRow(qVisitorOf, n.Name, origin).Scan(&id, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return mapError(err, "folding a peer's node")
	}
	if validHash(n.TokenHash) == nil {
		return tx.dropVisitor(id, origin, n.Name, maxAttempts)
	}
	if _, err := tx.exec(qVisitorStep, id, n.TokenHash, n.PriorityMin, n.PriorityMax, n.Capacity, n.Paused, n.PausedBy, nullMS(n.PausedAt), kinds); err != nil {
		return mapError(err, "folding a peer's node")
	}
	if subtle.ConstantTimeCompare(hash, n.TokenHash) != 1 {
		tx.forgetAuths()
	}
	return nil
}

// dropVisitor removes visitor id of origin, releasing what it holds here:
// its home deleted it, or no longer lets its token travel.
func (tx *Tx) dropVisitor(id int64, origin, name string, maxAttempts int64) error {
	return tx.removeNode(id, name, maxAttempts, true, map[string]any{"home": origin})
}

// visitorGone removes the visitor of origin's node name, if there is one.
func (tx *Tx) visitorGone(origin, name string, maxAttempts int64) error {
	var id int64
	var hash []byte
	err := tx.queryRow(qVisitorOf, name, origin).Scan(&id, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return mapError(err, "folding a peer's node")
	}
	return tx.dropVisitor(id, origin, name, maxAttempts)
}

// Visit lets in a worker whose token (its hash) is not registered here
// but at a peer: the peer's node becomes a visitor here, with the band,
// capacity, pause and kinds its home published, and the node it
// authenticates as is returned. A hash no peer published is not found. A
// name registered here, or visiting from another peer, is one node per
// name here: the token is refused (unauthorized), naming both.
func (tx *Tx) Visit(hash []byte) (NodeAuth, error) {
	var home, kinds string
	var n leasehold.Node
	var pausedAt sql.NullInt64
	err := tx.queryRow(qPeerNodeByHash, hash).Scan(&home, &n.Name, &n.PriorityMin, &n.PriorityMax, &n.Capacity, &n.Paused, &n.PausedBy, &pausedAt, &kinds)
	if errors.Is(err, sql.ErrNoRows) {
		return NodeAuth{}, leasehold.Errorf(leasehold.KindNotFound, "no node has that token")
	}
	if err != nil {
		return NodeAuth{}, mapError(err, "authenticating a peer's node")
	}
	var id int64
	var here string
	err = tx.queryRow(qNodeNamed, n.Name).Scan(&id, &here)
	switch {
	case err == nil && here == home:
		// Let in already (a write queued behind another of the same
		// visit): the row follows its home's events.
		if _, err := tx.exec(qNodeToken, hash, id); err != nil {
			return NodeAuth{}, mapError(err, "authenticating a peer's node")
		}
		return NodeAuth{ID: id, Name: n.Name, TokenHash: hash, Home: home}, nil
	case err == nil && here == "":
		return NodeAuth{}, leasehold.Wrap(leasehold.KindUnauthorized, ErrNameTaken,
			"node %s of %s cannot come in: a node of that name is registered here; a name is one node in a fleet", n.Name, home)
	case err == nil:
		return NodeAuth{}, leasehold.Wrap(leasehold.KindUnauthorized, ErrNameTaken,
			"node %s of %s cannot come in: the node of that name registered at %s is working here; a name is one node in a fleet", n.Name, home, here)
	case !errors.Is(err, sql.ErrNoRows):
		return NodeAuth{}, mapError(err, "authenticating a peer's node")
	}
	res, err := tx.exec(qVisitorInsert, n.Name, hash, n.PriorityMin, n.PriorityMax, n.Capacity, n.Paused, n.PausedBy, pausedAt, ms(tx.now), kinds, home)
	if err != nil {
		return NodeAuth{}, mapError(err, "letting in a peer's node")
	}
	if id, err = res.LastInsertId(); err != nil {
		return NodeAuth{}, mapError(err, "letting in a peer's node")
	}
	return NodeAuth{ID: id, Name: n.Name, TokenHash: hash, Home: home}, nil
}

// Visit lets in a worker whose token is registered at a peer (Tx.Visit).
// The hash is looked for among the peers' nodes by a read first, so a
// token no one knows, as a stranger's guesses, costs no write. Errors:
// not found, unauthorized.
func (db *DB) Visit(ctx context.Context, hash []byte) (NodeAuth, error) {
	var known bool
	err := db.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM peer_nodes WHERE token_hash = ?)`, hash).Scan(&known)
	if err != nil {
		return NodeAuth{}, mapError(err, "authenticating a peer's node")
	}
	if !known {
		return NodeAuth{}, leasehold.Errorf(leasehold.KindNotFound, "no node has that token")
	}
	var a NodeAuth
	err = db.Write(ctx, func(tx *Tx) error {
		var err error
		a, err = tx.Visit(hash)
		return err
	})
	return a, err
}

// FleetNode reads node id as peer sync publishes it, and its home (""
// when registered here): the token's hash only for a node registered
// here. A missing one is not found.
func (db *DB) FleetNode(ctx context.Context, id int64) (FleetNode, string, error) {
	var f FleetNode
	var home string
	n, err := scanNode(fleetScan{db.queryRow(ctx, fleetNodeSelect+` WHERE n.id = ?`, id), &f.TokenHash, &home})
	if errors.Is(err, sql.ErrNoRows) {
		return f, "", leasehold.Errorf(leasehold.KindNotFound, "node %d not found", id)
	}
	f.Node = n
	if home != "" {
		f.TokenHash = nil
	}
	return f, home, mapError(err, "reading a node")
}

// FleetNodes lists the nodes a state dump carries, by id: those
// registered here with their token's hash, and visitors without one.
func (db *DB) FleetNodes(ctx context.Context) ([]FleetNode, error) {
	rows, err := db.query(ctx, fleetNodeSelect+` ORDER BY n.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []FleetNode{}
	for rows.Next() {
		var f FleetNode
		var home string
		if f.Node, err = scanNode(fleetScan{rows, &f.TokenHash, &home}); err != nil {
			return nil, mapError(err, "listing nodes")
		}
		if home != "" {
			f.TokenHash = nil
		}
		out = append(out, f)
	}
	return out, mapError(rows.Err(), "listing nodes")
}

// fleetScan scans nodeColumns and then the token hash and home.
type fleetScan struct {
	s    scanner
	hash *[]byte
	home *string
}

func (f fleetScan) Scan(dest ...any) error { return f.s.Scan(append(dest, f.hash, f.home)...) }
