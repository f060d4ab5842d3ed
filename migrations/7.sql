-- Version 7: flapping groups (rule 10). A group released or taken over
-- five times in a row with no range progressing is a finding.
ALTER TABLE groups ADD COLUMN flaps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE groups ADD COLUMN flapped_at INTEGER;
ALTER TABLE group_leases ADD COLUMN progressed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX groups_flapping ON groups (flapped_at) WHERE flaps >= 5;
