-- Version 6: failures speak (rule 10). A range keeps the last error a
-- worker failed it with; a group whose window would not load is
-- quarantined, out of lease choice, until an operator acts.
ALTER TABLE ranges ADD COLUMN last_error TEXT;
ALTER TABLE ranges ADD COLUMN last_error_at INTEGER;
ALTER TABLE groups ADD COLUMN quarantine_error TEXT;
ALTER TABLE groups ADD COLUMN quarantine_node TEXT;
ALTER TABLE groups ADD COLUMN quarantine_at INTEGER;
DROP INDEX groups_free_tail;
DROP INDEX groups_free_hist;
CREATE INDEX groups_free_tail ON groups (urgent_tail, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_tail IS NOT NULL;
CREATE INDEX groups_free_hist ON groups (urgent_hist, free_since, priority, id)
    WHERE held = 0 AND active = 1 AND owned = 1 AND quarantine_at IS NULL AND urgent_hist IS NOT NULL;
CREATE INDEX groups_quarantined ON groups (quarantine_at) WHERE quarantine_at IS NOT NULL;
