-- Version 13: node tokens that travel. A peer's worker node carries the
-- hash of its token (never the token), so a worker registered at one node
-- is let in at every node of the fleet. A node registered at a peer and
-- working here gets a row in nodes (a visitor): home names the peer it is
-- registered at ('' for a node registered here), and the row is kept in
-- step with the peer's events of it.
ALTER TABLE nodes ADD COLUMN home TEXT NOT NULL DEFAULT '';
ALTER TABLE peer_nodes ADD COLUMN token_hash BLOB;
CREATE INDEX peer_nodes_token_hash ON peer_nodes (token_hash) WHERE token_hash IS NOT NULL;
