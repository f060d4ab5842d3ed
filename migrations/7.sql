-- Version 7: a placeholder on the ops branch only. Migration 7 is being
-- written on another branch; the merge takes that one's text for this
-- file, and version 8 (tallies) follows it.
SELECT 1;
