-- Version 14: members that leave, deletes that travel. A member removed
-- from the fleet for good is remembered by name: its events are no longer
-- folded, its worker nodes' tokens no longer let in. A group deleted in a
-- fleet leaves a tombstone: the claim revision it was deleted under, so no
-- late event of it (from its owner, or an earlier owner that is slow)
-- makes it again; a group created anew under a later claim is let in.
CREATE TABLE removed_members (
    name       TEXT    PRIMARY KEY,
    removed_by TEXT    NOT NULL DEFAULT '',
    removed_at INTEGER NOT NULL
) STRICT;
CREATE TABLE group_tombstones (
    name       TEXT    PRIMARY KEY,
    claim_rev  INTEGER NOT NULL,
    origin     TEXT    NOT NULL DEFAULT '',
    deleted_at INTEGER NOT NULL
) STRICT;
