-- Version 11: a group created without a start (the node's default) is
-- planned from its source's low water mark: ids below it have expired
-- at the source (rule 11), and planning them would only lease empty
-- ranges. start_from_low is 1 for such a group; the first report of
-- water marks, before anything is planned, moves its start up to the low
-- mark. Groups made before this version keep their start (0).
ALTER TABLE groups ADD COLUMN start_from_low INTEGER NOT NULL DEFAULT 0;
