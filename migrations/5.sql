-- Version 5: a rebuild a gap called for that failed is owed durably, so
-- a restart does not forget the hole the fold went on past.
CREATE TABLE rebuilds_owed (
    origin TEXT    PRIMARY KEY,
    since  INTEGER NOT NULL
) STRICT;
