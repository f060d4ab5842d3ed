-- Version 2 → 3: peer sync. A fleet's other nodes' state, folded here from
-- their events so this node's API shows the whole fleet, and what this
-- node needs to take their groups over.

-- The claim revision under which this node last owned the group (0: never
-- claimed). A peer's state for the group is folded only under a claim at
-- least as new, so a late event of an old owner never undoes a newer one.
ALTER TABLE groups ADD COLUMN claim_rev INTEGER NOT NULL DEFAULT 0;

-- Groups whose state is a peer's: origin owns it (or last did), and its
-- lease and snapshot as the origin holds them. A group here without a row
-- is this node's own.
CREATE TABLE peer_groups (
    group_id        INTEGER PRIMARY KEY REFERENCES groups (id) ON DELETE CASCADE,
    origin          TEXT    NOT NULL,
    holder          TEXT    NOT NULL DEFAULT '',
    fence           INTEGER NOT NULL DEFAULT 0,
    leased_at       INTEGER,
    heartbeat_at    INTEGER,
    snapshot_next   INTEGER,
    snapshot_size   INTEGER,
    snapshot_sha256 TEXT,
    snapshot_at     INTEGER,
    ranges_done     INTEGER NOT NULL DEFAULT 0,
    headers         INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL
) STRICT;

-- An origin's groups: its count, and its part in a rebuild.
CREATE INDEX peer_groups_origin ON peer_groups (origin);

-- Worker nodes registered at a peer (no token or hash ever leaves it).
CREATE TABLE peer_nodes (
    origin       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    priority_min INTEGER NOT NULL,
    priority_max INTEGER NOT NULL,
    capacity     INTEGER NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    paused_by    TEXT    NOT NULL DEFAULT '',
    paused_at    INTEGER,
    held         INTEGER NOT NULL DEFAULT 0,
    last_seen_at INTEGER,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (origin, name)
) STRICT;

-- The fleet's other nodes as seen here: the last of their events folded.
CREATE TABLE peers (
    name          TEXT    PRIMARY KEY,
    catalog_id    TEXT    NOT NULL,
    last_event    INTEGER NOT NULL DEFAULT 0,
    last_event_at INTEGER,
    folded_seq    INTEGER NOT NULL DEFAULT 0,
    rebuilds      INTEGER NOT NULL DEFAULT 0,
    updated_at    INTEGER NOT NULL
) STRICT;

-- How far this node has folded the stream: through seq of the stream's
-- incarnation named by stream (a mark of another incarnation vouches for
-- nothing). Written in the transaction of the fold it marks.
CREATE TABLE fold_mark (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    stream     TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- A range is the same across the fleet by its group and start, so starts
-- are unique in a group (planning never overlaps ranges), and the fold
-- upserts a range in one statement.
DROP INDEX ranges_group_start;
CREATE UNIQUE INDEX ranges_group_start ON ranges (group_id, start_id);

-- Only disowned groups with work to lease are offered to take on, so an
-- idle group does not move between idle nodes.
DROP INDEX groups_disowned;
CREATE INDEX groups_disowned ON groups (free_since)
    WHERE owned = 0 AND active = 1 AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL);

-- The publisher sends, with an event, the group's ranges changed since it:
-- one seek a group.
CREATE INDEX ranges_group_updated ON ranges (group_id, updated_at);
