-- Version 1 → 2: this catalog's identity in a fleet, one row made with the
-- catalog. Peer sync names its events by it, so a catalog made again never
-- repeats an old one's message ids.
CREATE TABLE catalog (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    catalog_id TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
