-- Version 10: the headers indexed, a tally like those of version 8, so the
-- overview's total reads one row instead of summing every lease row at
-- each poll. Kept by triggers on the lease rows' headers; saturating at
-- the largest integer, as each lease's count does, so no finish ever
-- fails on the sum.
INSERT INTO tallies (kind, state, n)
    SELECT 'headers', 'indexed', CAST(min(total(headers), 9223372036854775807.0) AS INTEGER) FROM group_leases;

CREATE TRIGGER leases_headers_tally_insert AFTER INSERT ON group_leases WHEN new.headers != 0 BEGIN
    UPDATE tallies SET n = iif(n > 9223372036854775807 - new.headers, 9223372036854775807, n + new.headers)
        WHERE kind = 'headers' AND state = 'indexed';
END;
CREATE TRIGGER leases_headers_tally_delete AFTER DELETE ON group_leases WHEN old.headers != 0 BEGIN
    UPDATE tallies SET n = max(0, n - old.headers) WHERE kind = 'headers' AND state = 'indexed';
END;
CREATE TRIGGER leases_headers_tally_update AFTER UPDATE OF headers ON group_leases WHEN new.headers != old.headers BEGIN
    UPDATE tallies SET n = iif(new.headers > old.headers AND n > 9223372036854775807 - (new.headers - old.headers), 9223372036854775807,
        max(0, n + (new.headers - old.headers)))
        WHERE kind = 'headers' AND state = 'indexed';
END;
