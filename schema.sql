-- leasehold catalog, schema version 13 (PRAGMA user_version). A catalog at an
-- older version is brought up by the steps in migrations/, each of which also
-- stands here.
-- Times are INTEGER unix milliseconds from the node's clock; SQL never reads
-- the time itself. Every table is STRICT.

-- A worker node: who may lease, inside which band of range priorities, how
-- many groups at once. Only the hash of its token is kept.
CREATE TABLE nodes (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    token_hash   BLOB    NOT NULL,
    priority_min INTEGER NOT NULL,
    priority_max INTEGER NOT NULL,
    capacity     INTEGER NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    paused_by    TEXT    NOT NULL DEFAULT '',
    paused_at    INTEGER,
    last_seen_at INTEGER,
    created_at   INTEGER NOT NULL,
    -- The kinds of group the node's worker reads, a JSON array of names
    -- (version 12, rule 12).
    kinds        TEXT    NOT NULL DEFAULT '["default"]',
    -- The peer the node is registered at, for a visitor: a node of a peer
    -- whose worker works here, let in by its token's hash as the peer
    -- published it and kept in step with the peer's events of it; '' for
    -- a node registered here (version 13).
    home         TEXT    NOT NULL DEFAULT ''
) STRICT;

-- Authentication looks a node up by the hash of the token it presents.
CREATE UNIQUE INDEX nodes_token_hash ON nodes (token_hash);

-- A source of sequential ids. tail_end is the highest id the tail has
-- planned (start_id-1 before the first plan); history_floor the lowest id
-- planned by anything (start_id before the first plan).
--
-- urgent_tail, urgent_hist, held and free_since are the lease-choice key,
-- kept up to date by every change to the group's ranges or lease:
-- urgent_tail is the lowest priority of its open (planned or leased) tail
-- ranges (below 0) and urgent_hist of its open history ranges (0 and
-- above), NULL when it has none; held is 1 while a node holds the group;
-- free_since is when it was last released. Two lanes, so a node whose band
-- covers only history still finds groups whose tail is also pending.
--
-- owned (version 2) is 1 while this node may lease the group: always on a
-- node without peers; in a fleet, while this node holds the group's
-- ownership claim. Only owned groups are in the lease-choice indexes.
-- claim_rev (version 3) is the claim revision under which this node last
-- owned the group (0: never claimed); a peer's state for the group is
-- folded only under a claim at least as new, so a late event of an old
-- owner never undoes a newer one.
--
-- quarantine_at (version 6) is set when a worker could not read the
-- group's window (a release with window_error): the group is leased to
-- nobody until an operator keeps the window, drops it or restores another.
-- quarantine_error and quarantine_node say why and who.
--
-- marks_low and marks_high (version 9) are the water marks the group's
-- source last reported (NNTP GROUP: the lowest and highest article
-- numbers), marks_at when; NULL until a worker reports them (rule 11).
CREATE TABLE groups (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    priority      INTEGER NOT NULL DEFAULT 0,
    active        INTEGER NOT NULL DEFAULT 1,
    range_size    INTEGER NOT NULL,
    start_id      INTEGER NOT NULL,
    tail_end      INTEGER NOT NULL,
    history_floor INTEGER NOT NULL,
    urgent_tail   INTEGER,
    urgent_hist   INTEGER,
    held          INTEGER NOT NULL DEFAULT 0,
    free_since    INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    owned         INTEGER NOT NULL DEFAULT 1,
    claim_rev     INTEGER NOT NULL DEFAULT 0,
    quarantine_error TEXT,
    quarantine_node  TEXT,
    quarantine_at    INTEGER,
    -- flaps counts the group's lease ends in a row (release, takeover)
    -- with no range progressing under the lease; flapped_at is the last.
    flaps            INTEGER NOT NULL DEFAULT 0,
    flapped_at       INTEGER,
    marks_low     INTEGER,
    marks_high    INTEGER,
    marks_at      INTEGER,
    -- 1 when the group was created without a start: the first water marks
    -- reported before anything is planned move the start up to the low
    -- mark (version 11).
    start_from_low INTEGER NOT NULL DEFAULT 0,
    -- The source the group is read from (version 12, rule 12): only a
    -- node of this kind leases it or reports its water marks.
    kind           TEXT    NOT NULL DEFAULT 'default',
    -- What the source said when it could not be read (version 12, rule
    -- 13): the error, the node that reported it, when; source_errors
    -- counts the error reports in a row (two make a finding). A report
    -- with water marks clears them.
    source_error      TEXT,
    source_error_node TEXT,
    source_error_at   INTEGER,
    source_errors     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Lease choice, one index a lane: the free, active, unquarantined group
-- with open work, most urgent first, then unheld the longest, then its own
-- priority. One seek a kind the node reads, never a scan (a quarantined
-- group is not in them, version 6; kind leads since version 12).
CREATE INDEX groups_free_tail ON groups (kind, urgent_tail, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_tail IS NOT NULL;
CREATE INDEX groups_free_hist ON groups (kind, urgent_hist, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_hist IS NOT NULL;

-- The watchman's window_unreadable findings: quarantined groups, newest
-- first (version 6; there are few).
CREATE INDEX groups_quarantined ON groups (quarantine_at) WHERE quarantine_at IS NOT NULL;
-- Flapping groups (the flapping finding): five lease ends in a row with
-- no progress (version 7); few, so the partial index is small.
CREATE INDEX groups_flapping ON groups (flapped_at) WHERE flaps >= 5;

-- GET /watermarks: the active groups this node owns whose marks are
-- oldest, never reported (NULL) first (version 9). One seek a kind the
-- caller reads (kind leads since version 12).
CREATE INDEX groups_marks ON groups (kind, marks_at, id) WHERE active = 1 AND owned = 1;

-- The source_unreadable findings: groups whose source failed twice in a
-- row (version 12; there are few).
CREATE INDEX groups_source_unreadable ON groups (source_error_at) WHERE source_errors >= 2;

-- The no_worker_for_kind findings: which kinds have open work (version
-- 12). One entry a group with work, read as one skip-scan a kind.
CREATE INDEX groups_kind_open ON groups (kind) WHERE active = 1 AND owned = 1 AND quarantine_at IS NULL
    AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL);

-- Groups this node has but does not own, with work to lease, whose claims
-- are offered again, the longest unheld first (version 2; version 3 left
-- out groups without work, so idle groups stay where they are).
CREATE INDEX groups_disowned ON groups (free_since)
    WHERE owned = 0 AND active = 1 AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL);

-- A planned span of ids, start_id..end_id inclusive; next_id is the resume
-- point. Priority below 0 is the live tail, 0 and above history.
-- last_error and last_error_at (version 6) are what the worker said when
-- it last failed the range, and when; kept across retries.
CREATE TABLE ranges (
    id           INTEGER PRIMARY KEY,
    group_id     INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    start_id     INTEGER NOT NULL,
    end_id       INTEGER NOT NULL,
    next_id      INTEGER NOT NULL,
    status       TEXT    NOT NULL DEFAULT 'planned'
                 CHECK (status IN ('planned', 'leased', 'done', 'failed')),
    priority     INTEGER NOT NULL,
    node_id      INTEGER REFERENCES nodes (id) ON DELETE SET NULL,
    leased_at    INTEGER,
    heartbeat_at INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    rule_version INTEGER NOT NULL DEFAULT 0,
    headers      INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL,
    last_error    TEXT,
    last_error_at INTEGER,
    CHECK (start_id <= end_id AND start_id <= next_id AND next_id <= end_id + 1)
) STRICT;

-- Listing a group's ranges in id order. A range is the same across the
-- fleet by its group and start, so starts are unique in a group (version
-- 3; planning never overlaps ranges).
CREATE UNIQUE INDEX ranges_group_start ON ranges (group_id, start_id);

-- Peer sync's publisher sends, with an event, the group's ranges changed
-- since it, one seek a group, by ranges_group_updated on (group_id,
-- updated_at). It is not here: every range write pays for it, so it exists
-- only while the node runs peer sync (store.DB.PeerIndexes, version 4).

-- Counts by status, and the takeover replan: a group's leased or done
-- ranges ending at or after the snapshot's next, found by one seek each.
CREATE INDEX ranges_group_status_end ON ranges (group_id, status, end_id);

-- The takeover replan's other half: planned ranges already progressed past
-- their start (rare, so this index stays tiny).
CREATE INDEX ranges_progressed ON ranges (group_id) WHERE status = 'planned' AND next_id > start_id;

-- next(group): the lowest planned range by start_id.
CREATE INDEX ranges_planned ON ranges (group_id, start_id) WHERE status = 'planned';

-- The group's urgency in each lane: min(priority) over its open ranges.
CREATE INDEX ranges_open ON ranges (group_id, priority) WHERE status IN ('planned', 'leased');

-- A node's deletion sets its ranges' node_id to NULL (the foreign key);
-- this index lets SQLite find them by a seek, not a scan of every range
-- (version 2).
CREATE INDEX ranges_node ON ranges (node_id) WHERE node_id IS NOT NULL;

-- Watchman and backlog: leased ranges by heartbeat, planned by waiting time,
-- failed ranges.
CREATE INDEX ranges_leased_heartbeat ON ranges (heartbeat_at) WHERE status = 'leased';
CREATE INDEX ranges_planned_since ON ranges (priority < 0, updated_at) WHERE status = 'planned';
CREATE INDEX ranges_failed ON ranges (updated_at) WHERE status = 'failed';

-- One row a group, made with it. fence rises at every lease and survives
-- releases, so an old holder's fence never matches again.
CREATE TABLE group_leases (
    group_id        INTEGER PRIMARY KEY REFERENCES groups (id) ON DELETE CASCADE,
    node_id         INTEGER REFERENCES nodes (id),
    fence           INTEGER NOT NULL DEFAULT 0,
    leased_at       INTEGER,
    heartbeat_at    INTEGER,
    range_id        INTEGER,
    snapshot_next   INTEGER,
    snapshot_size   INTEGER,
    snapshot_sha256 TEXT,
    snapshot_at     INTEGER,
    snapshot_file   INTEGER,
    ranges_done     INTEGER NOT NULL DEFAULT 0,
    headers         INTEGER NOT NULL DEFAULT 0,
    -- progressed says a range progressed or finished under the current
    -- lease: its end counts as a flap otherwise.
    progressed      INTEGER NOT NULL DEFAULT 0
) STRICT;

-- A node's held count, and release of everything a deleted node held.
CREATE INDEX group_leases_node ON group_leases (node_id) WHERE node_id IS NOT NULL;

-- Takeover candidates: held leases whose holder went quiet, oldest first.
CREATE INDEX group_leases_heartbeat ON group_leases (heartbeat_at) WHERE node_id IS NOT NULL;

-- Versioned rules the workers index by; the highest version is current.
CREATE TABLE rule_sets (
    version    INTEGER PRIMARY KEY,
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- The outbox: one row per change, written in the transaction that made it.
-- The dashboard's live feed and peer sync read it in id order.
CREATE TABLE events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    kind     TEXT    NOT NULL,
    group_id INTEGER,
    range_id INTEGER,
    node_id  INTEGER,
    body     TEXT    NOT NULL DEFAULT '{}',
    sent     INTEGER NOT NULL DEFAULT 0
) STRICT;

-- The publisher reads what it has not sent yet, in order.
CREATE INDEX events_unsent ON events (id) WHERE sent = 0;

-- Version 2: this catalog's identity in a fleet, one row made with the
-- catalog. Peer sync names its events by it, so a catalog made again never
-- repeats an old one's message ids.
CREATE TABLE catalog (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    catalog_id TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- Peer sync (version 3). Groups whose state is a peer's: origin owns it
-- (or last did), and its lease and snapshot as the origin holds them. A group here without a row
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

-- Worker nodes registered at a peer, with the hash of their token (never
-- the token) when the peer sends it.
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
    -- As nodes.kinds (version 12).
    kinds        TEXT    NOT NULL DEFAULT '["default"]',
    -- The sha-256 of the node's token as its origin published it; NULL
    -- when the origin sends none (a node from before version 13): its
    -- token is not let in here (version 13).
    token_hash   BLOB,
    PRIMARY KEY (origin, name)
) STRICT;

-- A token not registered here is looked up among the peers' nodes.
CREATE INDEX peer_nodes_token_hash ON peer_nodes (token_hash) WHERE token_hash IS NOT NULL;

-- Members removed from the fleet for good (version 14): their events are
-- not folded, their worker nodes' tokens not let in, and they are not
-- listed among the peers, until an operator approves them again.
CREATE TABLE removed_members (
    name       TEXT    PRIMARY KEY,
    removed_by TEXT    NOT NULL DEFAULT '',
    removed_at INTEGER NOT NULL
) STRICT;

-- Groups deleted in a fleet (version 14): the claim revision each was
-- deleted under. A peer's state of it under that claim or an earlier one
-- (a late event) is not folded, so nothing makes it again; a group made
-- anew under a later claim is.
CREATE TABLE group_tombstones (
    name       TEXT    PRIMARY KEY,
    claim_rev  INTEGER NOT NULL,
    origin     TEXT    NOT NULL DEFAULT '',
    deleted_at INTEGER NOT NULL
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

-- The peers whose part could not be rebuilt from their dumps when a gap
-- called for it (down, or busy): the fold went on past the hole, and they
-- are asked again until a rebuild succeeds, across restarts too.
CREATE TABLE rebuilds_owed (
    origin TEXT    PRIMARY KEY,
    since  INTEGER NOT NULL
) STRICT;

-- Version 8: tallies, the counts /metrics and the backlog read instead of
-- counting rows at every scrape: ranges by status and lane
-- ('planned/tail'), groups by state and ownership ('held/owned'). A
-- group's state is the first that holds of quarantined, held, inactive,
-- waiting (open work, nobody holds it) and idle (caught up). The triggers
-- keep the counts in the transaction that changes a range's status or
-- lane or a group's state, so a count is never behind the catalog;
-- TestTallies compares them with count(*) after a random mix of writes.
CREATE TABLE tallies (
    kind  TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (kind, state)
) STRICT;

INSERT INTO tallies (kind, state, n) VALUES
    ('ranges', 'planned/tail', 0), ('ranges', 'planned/history', 0), ('ranges', 'leased/tail', 0), ('ranges', 'leased/history', 0),
    ('ranges', 'done/tail', 0), ('ranges', 'done/history', 0), ('ranges', 'failed/tail', 0), ('ranges', 'failed/history', 0),
    ('groups', 'quarantined/owned', 0), ('groups', 'held/owned', 0), ('groups', 'inactive/owned', 0), ('groups', 'waiting/owned', 0), ('groups', 'idle/owned', 0),
    ('groups', 'quarantined/unowned', 0), ('groups', 'held/unowned', 0), ('groups', 'inactive/unowned', 0), ('groups', 'waiting/unowned', 0), ('groups', 'idle/unowned', 0),
    ('headers', 'indexed', 0);

CREATE TRIGGER ranges_tally_insert AFTER INSERT ON ranges BEGIN
    UPDATE tallies SET n = n + 1 WHERE kind = 'ranges' AND state = new.status || iif(new.priority < 0, '/tail', '/history');
END;
CREATE TRIGGER ranges_tally_delete AFTER DELETE ON ranges BEGIN
    UPDATE tallies SET n = n - 1 WHERE kind = 'ranges' AND state = old.status || iif(old.priority < 0, '/tail', '/history');
END;
CREATE TRIGGER ranges_tally_update AFTER UPDATE OF status, priority ON ranges
    WHEN old.status IS NOT new.status OR (old.priority < 0) IS NOT (new.priority < 0) BEGIN
    UPDATE tallies SET n = n - 1 WHERE kind = 'ranges' AND state = old.status || iif(old.priority < 0, '/tail', '/history');
    UPDATE tallies SET n = n + 1 WHERE kind = 'ranges' AND state = new.status || iif(new.priority < 0, '/tail', '/history');
END;

CREATE TRIGGER groups_tally_insert AFTER INSERT ON groups BEGIN
    UPDATE tallies SET n = n + 1 WHERE kind = 'groups' AND state =
        CASE WHEN new.quarantine_at IS NOT NULL THEN 'quarantined' WHEN new.held = 1 THEN 'held' WHEN new.active = 0 THEN 'inactive'
        WHEN new.urgent_tail IS NOT NULL OR new.urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END || iif(new.owned = 1, '/owned', '/unowned');
END;
CREATE TRIGGER groups_tally_delete AFTER DELETE ON groups BEGIN
    UPDATE tallies SET n = n - 1 WHERE kind = 'groups' AND state =
        CASE WHEN old.quarantine_at IS NOT NULL THEN 'quarantined' WHEN old.held = 1 THEN 'held' WHEN old.active = 0 THEN 'inactive'
        WHEN old.urgent_tail IS NOT NULL OR old.urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END || iif(old.owned = 1, '/owned', '/unowned');
END;
CREATE TRIGGER groups_tally_update AFTER UPDATE OF quarantine_at, held, active, urgent_tail, urgent_hist, owned ON groups
    WHEN (old.quarantine_at IS NULL) IS NOT (new.quarantine_at IS NULL) OR old.held IS NOT new.held OR old.active IS NOT new.active
        OR (old.urgent_tail IS NULL AND old.urgent_hist IS NULL) IS NOT (new.urgent_tail IS NULL AND new.urgent_hist IS NULL)
        OR old.owned IS NOT new.owned BEGIN
    UPDATE tallies SET n = n - 1 WHERE kind = 'groups' AND state =
        CASE WHEN old.quarantine_at IS NOT NULL THEN 'quarantined' WHEN old.held = 1 THEN 'held' WHEN old.active = 0 THEN 'inactive'
        WHEN old.urgent_tail IS NOT NULL OR old.urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END || iif(old.owned = 1, '/owned', '/unowned');
    UPDATE tallies SET n = n + 1 WHERE kind = 'groups' AND state =
        CASE WHEN new.quarantine_at IS NOT NULL THEN 'quarantined' WHEN new.held = 1 THEN 'held' WHEN new.active = 0 THEN 'inactive'
        WHEN new.urgent_tail IS NOT NULL OR new.urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END || iif(new.owned = 1, '/owned', '/unowned');
END;

-- The headers indexed on this node's own leases, for the overview's total
-- (version 10): kept like the tallies above, saturating at the largest
-- integer as each lease's count does, so no finish fails on the sum.
CREATE TRIGGER leases_headers_tally_insert AFTER INSERT ON group_leases WHEN new.headers != 0 BEGIN
    UPDATE tallies SET n = iif(n > 9223372036854775807 - new.headers, 9223372036854775807, n + new.headers)
        WHERE kind = 'headers' AND state = 'indexed';
END;
CREATE TRIGGER leases_headers_tally_delete AFTER DELETE ON group_leases WHEN old.headers != 0 BEGIN
    UPDATE tallies SET n = max(0, n - old.headers) WHERE kind = 'headers' AND state = 'indexed';
END;
CREATE TRIGGER leases_headers_tally_update AFTER UPDATE OF headers ON group_leases WHEN new.headers != old.headers BEGIN
    UPDATE tallies SET n = iif(new.headers > old.headers AND n > 9223372036854775807 - (new.headers - old.headers), 9223372036854775807,
        max(0, n + (new.headers - old.headers)))
        WHERE kind = 'headers' AND state = 'indexed';
END;
