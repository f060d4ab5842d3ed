-- Version 1 → 2: this catalog's identity in a fleet, one row made with the
-- catalog. Peer sync names its events by it, so a catalog made again never
-- repeats an old one's message ids.
CREATE TABLE catalog (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    catalog_id TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- A node's deletion sets its ranges' node_id to NULL (the foreign key);
-- this index lets SQLite find them by a seek, not a scan of every range.
CREATE INDEX ranges_node ON ranges (node_id) WHERE node_id IS NOT NULL;

-- Ownership in a fleet: only groups this node owns are leased here, and
-- only they are in the lease-choice indexes.
ALTER TABLE groups ADD COLUMN owned INTEGER NOT NULL DEFAULT 1;
DROP INDEX groups_free_tail;
DROP INDEX groups_free_hist;
CREATE INDEX groups_free_tail ON groups (urgent_tail, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND urgent_tail IS NOT NULL;
CREATE INDEX groups_free_hist ON groups (urgent_hist, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND urgent_hist IS NOT NULL;
CREATE INDEX groups_disowned ON groups (free_since) WHERE owned = 0;
