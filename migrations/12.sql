-- Version 12: kinds (rule 12) and sources that say why (rule 13). A group
-- has the kind of source it is read from and a node the kinds it reads;
-- everything made before is 'default', so existing workers lease what
-- they did. The lease-choice and water-mark indexes lead with the kind,
-- so a lease is still one seek a lane for each kind the node reads.
ALTER TABLE nodes ADD COLUMN kinds TEXT NOT NULL DEFAULT '["default"]';
ALTER TABLE peer_nodes ADD COLUMN kinds TEXT NOT NULL DEFAULT '["default"]';
ALTER TABLE groups ADD COLUMN kind TEXT NOT NULL DEFAULT 'default';
ALTER TABLE groups ADD COLUMN source_error TEXT;
ALTER TABLE groups ADD COLUMN source_error_node TEXT;
ALTER TABLE groups ADD COLUMN source_error_at INTEGER;
ALTER TABLE groups ADD COLUMN source_errors INTEGER NOT NULL DEFAULT 0;
DROP INDEX groups_free_tail;
DROP INDEX groups_free_hist;
DROP INDEX groups_marks;
CREATE INDEX groups_free_tail ON groups (kind, urgent_tail, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_tail IS NOT NULL;
CREATE INDEX groups_free_hist ON groups (kind, urgent_hist, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_hist IS NOT NULL;
CREATE INDEX groups_marks ON groups (kind, marks_at, id) WHERE active = 1 AND owned = 1;
CREATE INDEX groups_source_unreadable ON groups (source_error_at) WHERE source_errors >= 2;
CREATE INDEX groups_kind_open ON groups (kind) WHERE active = 1 AND owned = 1 AND quarantine_at IS NULL
    AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL);
