-- Version 9: sources plan themselves (rule 11). A group keeps the water
-- marks its source last reported (low and high) and when; workers ask
-- about the active groups whose marks are oldest first.
ALTER TABLE groups ADD COLUMN marks_low INTEGER;
ALTER TABLE groups ADD COLUMN marks_high INTEGER;
ALTER TABLE groups ADD COLUMN marks_at INTEGER;
CREATE INDEX groups_marks ON groups (marks_at, id) WHERE active = 1 AND owned = 1;
