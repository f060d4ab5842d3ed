-- Version 8: tallies, the counts /metrics and the backlog read instead of
-- counting rows at every scrape (a scrape counted two million planned
-- ranges at a million groups). The triggers keep them in the transaction
-- that changes a range's status or lane, or a group's state, so a count
-- is never behind the catalog; this step seeds them with one count.
CREATE TABLE tallies (
    kind  TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (kind, state)
) STRICT;

INSERT INTO tallies (kind, state, n)
    SELECT 'ranges', status || iif(priority < 0, '/tail', '/history'), count(*) FROM ranges GROUP BY 2;
INSERT INTO tallies (kind, state, n)
    SELECT 'groups', CASE WHEN quarantine_at IS NOT NULL THEN 'quarantined' WHEN held = 1 THEN 'held' WHEN active = 0 THEN 'inactive'
        WHEN urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END || iif(owned = 1, '/owned', '/unowned'),
        count(*) FROM groups GROUP BY 2;
INSERT OR IGNORE INTO tallies (kind, state, n) VALUES
    ('ranges', 'planned/tail', 0), ('ranges', 'planned/history', 0), ('ranges', 'leased/tail', 0), ('ranges', 'leased/history', 0),
    ('ranges', 'done/tail', 0), ('ranges', 'done/history', 0), ('ranges', 'failed/tail', 0), ('ranges', 'failed/history', 0),
    ('groups', 'quarantined/owned', 0), ('groups', 'held/owned', 0), ('groups', 'inactive/owned', 0), ('groups', 'waiting/owned', 0), ('groups', 'idle/owned', 0),
    ('groups', 'quarantined/unowned', 0), ('groups', 'held/unowned', 0), ('groups', 'inactive/unowned', 0), ('groups', 'waiting/unowned', 0), ('groups', 'idle/unowned', 0);

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
