package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"github.com/leasehold/leasehold"
)

// A staged dump is a joining node's catch-up as SQLite files instead of
// JSON: the origin copies a slice of its own groups and their ranges into
// a small database of its own (StageOwnGroups, INSERT … SELECT on a read
// connection, no Go a row), sends the file, and the joining node attaches
// it to its writer and copies the groups new to it into its catalog the
// same way (FoldStaged), a few thousand groups a write. Neither side
// decodes a row; what is left is SQLite writing the rows and their
// indexes. A group this catalog knows already (a rebuild of a part it
// holds, a rebuild begun again after a crash) goes FoldPeerGroups' way,
// under the claim rule, read back from the file.
//
// The file is checked before it is attached (CheckStage): its format (a
// file newer than this build reads is refused), that it is a staged dump
// at all, and every row as FoldPeerGroups would check it.

// StageFormat is the format of the staged files this build writes and
// the newest it reads.
const StageFormat = 1

// stageApplicationID marks a staged dump's file ("LHSD").
const stageApplicationID = 0x4c485344

// stageTables are a staged dump's tables. dump_groups holds a group's
// state as FoldPeerGroups writes it (absent parts already as NULL), seq
// numbering the file's groups from 1 in the origin's id order;
// dump_ranges holds their ranges by seq and start.
var stageTables = []string{
	`CREATE TABLE %[1]s.dump_meta (catalog TEXT NOT NULL, groups INTEGER NOT NULL, ranges INTEGER NOT NULL)`,
	`CREATE TABLE %[1]s.dump_groups (seq INTEGER PRIMARY KEY, gid INTEGER NOT NULL, name TEXT NOT NULL, priority INTEGER NOT NULL,
		active INTEGER NOT NULL, range_size INTEGER NOT NULL, start_id INTEGER NOT NULL, tail_end INTEGER NOT NULL,
		history_floor INTEGER NOT NULL, created_at INTEGER NOT NULL, claim_rev INTEGER NOT NULL, fence INTEGER NOT NULL,
		holder TEXT NOT NULL, leased_at INTEGER, heartbeat_at INTEGER, snapshot_next INTEGER, snapshot_size INTEGER,
		snapshot_sha256 TEXT, snapshot_at INTEGER, ranges_done INTEGER NOT NULL, headers INTEGER NOT NULL,
		quarantine_error TEXT, quarantine_node TEXT, quarantine_at INTEGER, marks_low INTEGER, marks_high INTEGER, marks_at INTEGER,
		kind TEXT NOT NULL, source_error TEXT, source_error_node TEXT, source_error_at INTEGER)`,
	`CREATE TABLE %[1]s.dump_ranges (group_seq INTEGER NOT NULL, start_id INTEGER NOT NULL, end_id INTEGER NOT NULL,
		next_id INTEGER NOT NULL, status TEXT NOT NULL, priority INTEGER NOT NULL, attempts INTEGER NOT NULL,
		rule_version INTEGER NOT NULL, headers INTEGER NOT NULL, updated_at INTEGER NOT NULL, last_error TEXT,
		last_error_at INTEGER, PRIMARY KEY (group_seq, start_id)) WITHOUT ROWID`,
}

// stageGroupColumns are dump_groups' columns after seq, as written.
const stageGroupColumns = `gid, name, priority, active, range_size, start_id, tail_end, history_floor, created_at, claim_rev, fence,
	holder, leased_at, heartbeat_at, snapshot_next, snapshot_size, snapshot_sha256, snapshot_at, ranges_done, headers,
	quarantine_error, quarantine_node, quarantine_at, marks_low, marks_high, marks_at, kind, source_error, source_error_node, source_error_at`

// stageGroupSelect reads this catalog's own groups id ?1 < id <= ?2 as
// stageGroupColumns: what scanOwnState and carriedColumns make of a row,
// so a group staged and folded is the group sent as JSON and folded.
const stageGroupSelect = `SELECT g.id, g.name, g.priority, g.active, g.range_size, g.start_id, g.tail_end, g.history_floor, g.created_at,
	g.claim_rev, l.fence, coalesce(n.name, ''), iif(n.name IS NULL, NULL, l.leased_at), iif(n.name IS NULL, NULL, l.heartbeat_at),
	l.snapshot_next, iif(l.snapshot_next IS NULL, NULL, coalesce(l.snapshot_size, 0)),
	iif(l.snapshot_next IS NULL, NULL, coalesce(l.snapshot_sha256, '')), iif(l.snapshot_next IS NULL, NULL, coalesce(l.snapshot_at, 0)),
	l.ranges_done, l.headers,
	iif(g.quarantine_at IS NULL, NULL, coalesce(g.quarantine_error, '')), iif(g.quarantine_at IS NULL, NULL, coalesce(g.quarantine_node, '')), g.quarantine_at,
	iif(g.marks_low IS NULL OR g.marks_high IS NULL OR g.marks_at IS NULL, NULL, g.marks_low),
	iif(g.marks_low IS NULL OR g.marks_high IS NULL OR g.marks_at IS NULL, NULL, g.marks_high),
	iif(g.marks_low IS NULL OR g.marks_high IS NULL OR g.marks_at IS NULL, NULL, g.marks_at),
	coalesce(nullif(g.kind, ''), '` + leasehold.DefaultSourceKind + `'),
	iif(g.source_error_at IS NULL, NULL, coalesce(g.source_error, '')), iif(g.source_error_at IS NULL, NULL, coalesce(g.source_error_node, '')), g.source_error_at
	FROM main.groups g JOIN main.group_leases l ON l.group_id = g.id LEFT JOIN main.nodes n ON n.id = l.node_id
	WHERE g.id > ?1 AND g.id <= ?2 AND NOT EXISTS (SELECT 1 FROM main.peer_groups p WHERE p.group_id = g.id) ORDER BY g.id`

// stageLast is the last own group id of the next staged file after ?1:
// at most ?2 groups, and no more ranges than ?3 unless the first group
// alone has more.
const stageLast = `SELECT id FROM (
	SELECT id, row_number() OVER w AS k, sum((SELECT count(*) FROM main.ranges r WHERE r.group_id = o.id)) OVER w AS n FROM (
		SELECT g.id FROM main.groups g WHERE g.id > ?1 AND NOT EXISTS (SELECT 1 FROM main.peer_groups p WHERE p.group_id = g.id)
		ORDER BY g.id LIMIT ?2) o
	WINDOW w AS (ORDER BY id))
	WHERE k = 1 OR n <= ?3 ORDER BY id DESC LIMIT 1`

// StagedPart is what a staged file holds: the origin's own groups with
// ids in (After, Last], Groups of them with Ranges ranges.
type StagedPart struct {
	After, Last    int64
	Groups, Ranges int64
}

// StageOwnGroups writes the next slice of this node's own groups after
// the group id after, at most maxGroups of them and about maxRanges
// ranges, with all their ranges, to a new staged file at path, as of one
// read of the catalog. A part with no groups means there are none left
// (and no file is left at path). It runs on a connection of the reader
// pool, as Backup does: the writer is never held. Errors: invalid (path
// exists), no space, unavailable; on error no file is left at path.
func (db *DB) StageOwnGroups(ctx context.Context, path string, after int64, maxGroups, maxRanges int) (StagedPart, error) {
	part := StagedPart{After: after, Last: after}
	if _, err := os.Lstat(path); err == nil {
		return part, leasehold.Errorf(leasehold.KindInvalid, "staging a dump: %s exists already", path)
	}
	conn, err := db.r.Conn(ctx)
	if err != nil {
		return part, mapError(err, "staging a dump")
	}
	defer conn.Close()
	// The pool's connections are query_only; this one writes the staged
	// file, never the catalog, and is set back before it goes back.
	if _, err := conn.ExecContext(ctx, `PRAGMA query_only = 0`); err != nil {
		return part, mapError(err, "staging a dump")
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA query_only = 1`); err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	const alias = "staging"
	if _, err := conn.ExecContext(ctx, `ATTACH ? AS `+alias, stageURI(path)); err != nil {
		os.Remove(path)
		return part, mapError(err, "staging a dump")
	}
	part, err = stageInto(ctx, conn, alias, db.catalogID, after, maxGroups, maxRanges)
	if _, derr := conn.ExecContext(context.WithoutCancel(ctx), `DETACH `+alias); derr != nil {
		conn.Raw(func(any) error { return driver.ErrBadConn })
		err = errors.Join(err, derr)
	}
	if err != nil || part.Groups == 0 {
		os.Remove(path)
		return part, mapError(err, "staging a dump")
	}
	return part, nil
}

// stageURI is path as ATTACH takes it.
func stageURI(path string) string { return "file:" + (&url.URL{Path: path}).EscapedPath() }

// stageInto fills the attached, empty staged file alias in one read
// transaction of the catalog.
func stageInto(ctx context.Context, conn *sql.Conn, alias, catalog string, after int64, maxGroups, maxRanges int) (StagedPart, error) {
	part := StagedPart{After: after, Last: after}
	// The file is a copy for one send: no journal, no fsync.
	for _, q := range []string{`PRAGMA %[1]s.journal_mode = OFF`, `PRAGMA %[1]s.synchronous = OFF`} {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(q, alias)); err != nil {
			return part, err
		}
	}
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		return part, err
	}
	done := false
	defer func() {
		if !done {
			conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	err := conn.QueryRowContext(ctx, stageLast, after, maxGroups, maxRanges).Scan(&part.Last)
	if errors.Is(err, sql.ErrNoRows) {
		return part, nil
	}
	if err != nil {
		return part, err
	}
	qs := append([]string{}, stageTables...)
	qs = append(qs,
		`INSERT INTO %[1]s.dump_groups (`+stageGroupColumns+`) `+stageGroupSelect,
		`INSERT INTO %[1]s.dump_ranges (group_seq, start_id, end_id, next_id, status, priority, attempts, rule_version, headers, updated_at,
			last_error, last_error_at)
		 SELECT d.seq, r.start_id, r.end_id, r.next_id, r.status, r.priority, r.attempts, r.rule_version, r.headers, r.updated_at,
			r.last_error, r.last_error_at
		 FROM %[1]s.dump_groups d CROSS JOIN main.ranges r INDEXED BY ranges_group_start WHERE r.group_id = d.gid ORDER BY d.seq, r.start_id`,
		`INSERT INTO %[1]s.dump_meta (catalog, groups, ranges) VALUES (?3, (SELECT count(*) FROM %[1]s.dump_groups), (SELECT count(*) FROM %[1]s.dump_ranges))`,
		fmt.Sprintf(`PRAGMA %%[1]s.application_id = %d`, stageApplicationID),
		fmt.Sprintf(`PRAGMA %%[1]s.user_version = %d`, StageFormat),
	)
	for _, q := range qs {
		q = fmt.Sprintf(q, alias)
		var args []any
		if strings.Contains(q, "?") {
			args = []any{after, part.Last, catalog}
		}
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return part, err
		}
	}
	err = conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT groups, ranges FROM %s.dump_meta`, alias)).Scan(&part.Groups, &part.Ranges)
	if err != nil {
		return part, err
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return part, err
	}
	done = true
	return part, nil
}

// StageInfo is what CheckStage found in a staged file.
type StageInfo struct {
	Format         int
	Catalog        string
	Groups, Ranges int64
}

// CheckStage checks the staged file at path before it is folded: that it
// is a staged dump, of a format this build reads, and that its every row
// is one FoldPeerGroups would take. It reads the file on a connection of
// its own. Errors: unprocessable for a format newer than StageFormat;
// invalid for anything else wrong with it.
func CheckStage(ctx context.Context, path string) (StageInfo, error) {
	var info StageInfo
	if _, err := os.Stat(path); err != nil {
		return info, leasehold.Wrap(leasehold.KindInvalid, err, "staged dump: %v", err)
	}
	c, err := sql.Open("sqlite", stageURI(path)+"?mode=ro&immutable=1")
	if err != nil {
		return info, leasehold.Wrap(leasehold.KindInvalid, err, "staged dump: %v", err)
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	bad := func(err error) error {
		return leasehold.Wrap(leasehold.KindInvalid, err, "%s is not a staged dump this build reads: %v", path, err)
	}
	var app int64
	if err := c.QueryRowContext(ctx, `PRAGMA application_id`).Scan(&app); err != nil {
		return info, bad(err)
	}
	if err := c.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&info.Format); err != nil {
		return info, bad(err)
	}
	if app != stageApplicationID || info.Format < 1 {
		return info, bad(fmt.Errorf("application id %#x, format %d", app, info.Format))
	}
	if info.Format > StageFormat {
		return info, leasehold.Errorf(leasehold.KindUnprocessable, "a staged dump of format %d is newer than this build reads (%d): upgrade this node", info.Format, StageFormat)
	}
	if err := c.QueryRowContext(ctx, `SELECT catalog, groups, ranges FROM dump_meta`).Scan(&info.Catalog, &info.Groups, &info.Ranges); err != nil {
		return info, bad(err)
	}
	var n, lo, hi, names, ranges, wrong int64
	err = c.QueryRowContext(ctx, `SELECT count(*), coalesce(min(seq), 0), coalesce(max(seq), 0), count(DISTINCT name) FROM dump_groups`).Scan(&n, &lo, &hi, &names)
	if err != nil {
		return info, bad(err)
	}
	if n != info.Groups || n < 1 || lo != 1 || hi != n || names != n {
		return info, bad(fmt.Errorf("%d groups (%d names, seq %d to %d) where it says %d", n, names, lo, hi, info.Groups))
	}
	err = c.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT (group_seq BETWEEN 1 AND ?1 AND start_id <= end_id
		AND next_id >= start_id AND next_id <= end_id + 1 AND status IN ('planned', 'leased', 'done', 'failed'))) FROM dump_ranges`, n).Scan(&ranges, &wrong)
	if err != nil {
		return info, bad(err)
	}
	if ranges != info.Ranges || wrong > 0 {
		return info, bad(fmt.Errorf("%d ranges, %d of them not valid, where it says %d", ranges, wrong, info.Ranges))
	}
	rows, err := c.QueryContext(ctx, `SELECT name, kind, range_size FROM dump_groups`)
	if err != nil {
		return info, bad(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, kind string
		var size int64
		if err := rows.Scan(&name, &kind, &size); err != nil {
			return info, bad(err)
		}
		if !leasehold.ValidGroupName(name) || size < 1 || !leasehold.ValidSourceKind(kind) {
			return info, leasehold.Errorf(leasehold.KindInvalid, "staged dump: group %q (kind %q, range size %d) is not valid", name, kind, size)
		}
	}
	if err := rows.Err(); err != nil {
		return info, bad(err)
	}
	return info, nil
}

// Stage is a staged file attached to the writer's connection.
type Stage struct {
	db    *DB
	alias string
	info  StageInfo
}

// stageAliases names attached files apart.
var stageAliases atomic.Int64

// AttachStage attaches the staged file at path, checked by CheckStage
// (info), to the writer's connection for FoldStaged; Detach ends it.
func (db *DB) AttachStage(ctx context.Context, path string, info StageInfo) (*Stage, error) {
	s := &Stage{db: db, alias: fmt.Sprintf("stage%d", stageAliases.Add(1)), info: info}
	err := db.writeBare(ctx, func(tx *Tx) error {
		_, err := tx.execSQL(`ATTACH ? AS `+s.alias, stageURI(path)+"?mode=ro")
		return err
	})
	if err != nil {
		return nil, mapError(err, "attaching a staged dump")
	}
	return s, nil
}

// Groups is how many groups the staged file holds, numbered from 1.
func (s *Stage) Groups() int64 { return s.info.Groups }

// Detach detaches the file; it may be removed after.
func (s *Stage) Detach(ctx context.Context) error {
	err := s.db.writeBare(context.WithoutCancel(ctx), func(tx *Tx) error {
		_, err := tx.execSQL(`DETACH ` + s.alias)
		return err
	})
	return mapError(err, "detaching a staged dump")
}

// FoldStaged folds the staged groups lo to hi (by seq) of origin's dump
// and their ranges, as FoldPeerGroups would fold them: the groups new
// here by INSERT … SELECT straight from the file, their lease-choice keys
// from their ranges; those this catalog knows (or has a tombstone of)
// read back and through FoldPeerGroups, under the claim rule.
func (tx *Tx) FoldStaged(s *Stage, origin string, lo, hi, maxAttempts int64) error {
	a := s.alias
	known, err := tx.stagedSeqs(`SELECT d.seq FROM `+a+`.dump_groups d WHERE d.seq BETWEEN ?1 AND ?2
		AND (EXISTS (SELECT 1 FROM main.groups g WHERE g.name = d.name) OR EXISTS (SELECT 1 FROM main.group_tombstones t WHERE t.name = d.name))`, lo, hi)
	if err != nil {
		return mapError(err, "folding a staged dump")
	}
	if len(known) < int(hi-lo+1) {
		if err := tx.foldStagedNew(a, origin, lo, hi, known); err != nil {
			return mapError(err, "folding a staged dump")
		}
	}
	if len(known) == 0 {
		return nil
	}
	gs, err := tx.stagedStates(a, known)
	if err != nil {
		return mapError(err, "folding a staged dump")
	}
	return tx.FoldPeerGroups(origin, gs, maxAttempts)
}

// foldStagedNew copies the groups lo to hi but those known, with their
// leases, peer rows and ranges: a group's id here is its seq moved past
// the catalog's highest id.
func (tx *Tx) foldStagedNew(a, origin string, lo, hi int64, known []int64) error {
	var next int64
	if err := tx.queryRow(qMaxGroupID).Scan(&next); err != nil {
		return err
	}
	skip, _ := json.Marshal(known)
	if known == nil {
		skip = []byte("[]")
	}
	// ?1 moves a seq to its id, ?2 and ?3 bound the seqs, ?4 the known
	// ones passed over, ?5 now, ?6 origin.
	where := ` WHERE d.seq BETWEEN ?2 AND ?3 AND d.seq NOT IN (SELECT value FROM json_each(?4))`
	open := `r.group_seq = d.seq AND r.status IN ('planned', 'leased')`
	qs := []string{
		`INSERT INTO main.groups (id, name, priority, active, range_size, start_id, tail_end, history_floor, urgent_tail, urgent_hist,
			free_since, created_at, updated_at, owned, claim_rev, quarantine_error, quarantine_node, quarantine_at, marks_low, marks_high, marks_at,
			kind, source_error, source_error_node, source_error_at, source_errors)
		 SELECT ?1 + d.seq, d.name, d.priority, d.active, d.range_size, d.start_id, d.tail_end, d.history_floor,
			(SELECT min(r.priority) FROM ` + a + `.dump_ranges r WHERE ` + open + ` AND r.priority < 0),
			(SELECT min(r.priority) FROM ` + a + `.dump_ranges r WHERE ` + open + ` AND r.priority >= 0),
			?5, d.created_at, ?5, 0, d.claim_rev, d.quarantine_error, d.quarantine_node, d.quarantine_at, d.marks_low, d.marks_high, d.marks_at,
			d.kind, d.source_error, d.source_error_node, d.source_error_at, iif(d.source_error_at IS NULL, 0, 2)
		 FROM ` + a + `.dump_groups d` + where + ` ORDER BY d.seq`,
		`INSERT INTO main.group_leases (group_id, fence) SELECT ?1 + d.seq, d.fence FROM ` + a + `.dump_groups d` + where + ` ORDER BY d.seq`,
		`INSERT INTO main.peer_groups (group_id, origin, holder, fence, leased_at, heartbeat_at, snapshot_next, snapshot_size, snapshot_sha256,
			snapshot_at, ranges_done, headers, updated_at)
		 SELECT ?1 + d.seq, ?6, d.holder, d.fence, d.leased_at, d.heartbeat_at, d.snapshot_next, d.snapshot_size, d.snapshot_sha256,
			d.snapshot_at, d.ranges_done, d.headers, ?5 FROM ` + a + `.dump_groups d` + where + ` ORDER BY d.seq`,
		`INSERT INTO main.ranges (group_id, start_id, end_id, next_id, status, priority, attempts, rule_version, headers, updated_at,
			last_error, last_error_at)
		 SELECT ?1 + d.group_seq, d.start_id, d.end_id, d.next_id, d.status, d.priority, d.attempts, d.rule_version, d.headers, d.updated_at,
			d.last_error, d.last_error_at
		 FROM ` + a + `.dump_ranges d WHERE d.group_seq BETWEEN ?2 AND ?3 AND d.group_seq NOT IN (SELECT value FROM json_each(?4))
		 ORDER BY d.group_seq, d.start_id`,
	}
	// The tally triggers would run an UPDATE for every group and range
	// copied, a fifth of the fold; for this write they are set aside and
	// the copied rows counted in one statement a table instead. They are
	// made again from their own stored text before the write ends, in its
	// transaction, so no other write or reader sees the catalog without
	// them, and a failed write takes the change back with the rest.
	made, err := tx.stagedTriggersAside()
	if err != nil {
		return err
	}
	qs = append(qs,
		`UPDATE main.tallies SET n = tallies.n + c.n FROM (
			SELECT CASE WHEN g.quarantine_at IS NOT NULL THEN 'quarantined' WHEN g.held = 1 THEN 'held' WHEN g.active = 0 THEN 'inactive'
				WHEN g.urgent_tail IS NOT NULL OR g.urgent_hist IS NOT NULL THEN 'waiting' ELSE 'idle' END || iif(g.owned = 1, '/owned', '/unowned') AS state,
				count(*) AS n
			FROM main.groups g WHERE g.id BETWEEN ?1 + ?2 AND ?1 + ?3 GROUP BY 1) c
		 WHERE tallies.kind = 'groups' AND tallies.state = c.state`,
		`UPDATE main.tallies SET n = tallies.n + c.n FROM (
			SELECT d.status || iif(d.priority < 0, '/tail', '/history') AS state, count(*) AS n
			FROM `+a+`.dump_ranges d WHERE d.group_seq BETWEEN ?2 AND ?3 AND d.group_seq NOT IN (SELECT value FROM json_each(?4)) GROUP BY 1) c
		 WHERE tallies.kind = 'ranges' AND tallies.state = c.state`)
	for _, q := range qs {
		if _, err := tx.execSQL(q, next-lo, lo, hi, string(skip), ms(tx.now), origin); err != nil {
			return err
		}
	}
	for _, q := range made {
		if _, err := tx.execSQL(q); err != nil {
			return err
		}
	}
	return nil
}

// stagedTallyTriggers are the tally triggers a staged fold sets aside:
// those that fire on the rows it inserts.
var stagedTallyTriggers = []string{"groups_tally_insert", "ranges_tally_insert"}

// stagedTriggersAside drops the tally triggers of the rows a staged fold
// inserts and returns the statements that make them again, as stored.
func (tx *Tx) stagedTriggersAside() ([]string, error) {
	var made []string
	for _, name := range stagedTallyTriggers {
		var q string
		if err := tx.queryRowSQL(`SELECT sql FROM main.sqlite_schema WHERE type = 'trigger' AND name = ?`, name).Scan(&q); err != nil {
			return nil, fmt.Errorf("the catalog's trigger %s: %w", name, err)
		}
		if _, err := tx.execSQL(`DROP TRIGGER main.` + name); err != nil {
			return nil, err
		}
		made = append(made, q)
	}
	return made, nil
}

// stagedSeqs runs a query of seqs.
func (tx *Tx) stagedSeqs(q string, args ...any) ([]int64, error) {
	var out []int64
	err := tx.stagedRows(q, args, func(rs *rows) error {
		var seq int64
		if err := rs.Scan(&seq); err != nil {
			return err
		}
		out = append(out, seq)
		return nil
	})
	return out, err
}

// stagedRows runs an ad hoc query on the writer's connection and calls
// each for its every row.
func (tx *Tx) stagedRows(q string, args []any, each func(*rows) error) error {
	st, err := prepare(tx.ctx, tx.w.c.(driver.ConnPrepareContext), q)
	if err != nil {
		return err
	}
	defer st.st.Close()
	rs, err := runQuery(tx.ctx, st.query, args)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := each(rs); err != nil {
			return err
		}
	}
	return rs.Err()
}

// stagedStates reads the staged groups seqs back as a JSON dump carries
// them, with all their ranges.
func (tx *Tx) stagedStates(a string, seqs []int64) ([]PeerGroupState, error) {
	list, _ := json.Marshal(seqs)
	var out []PeerGroupState
	at := map[int64]int{}
	err := tx.stagedRows(`SELECT seq, `+stageGroupColumns+` FROM `+a+`.dump_groups WHERE seq IN (SELECT value FROM json_each(?1)) ORDER BY seq`,
		[]any{string(list)}, func(rs *rows) error {
			var g PeerGroup
			var seq, created, claimRev int64
			var leased, beat, snapNext, snapSize, snapAt, qAt, low, high, marksAt, sAt sql.NullInt64
			var snapSHA, qErr, qNode, sErr, sNode sql.NullString
			err := rs.Scan(&seq, &g.ID, &g.Name, &g.Priority, &g.Active, &g.RangeSize, &g.Start, &g.TailEnd, &g.HistoryFloor, &created,
				&claimRev, &g.Fence, &g.Holder, &leased, &beat, &snapNext, &snapSize, &snapSHA, &snapAt, &g.RangesDone, &g.Headers,
				&qErr, &qNode, &qAt, &low, &high, &marksAt, &g.Kind, &sErr, &sNode, &sAt)
			if err != nil {
				return err
			}
			g.CreatedAt, g.ClaimRev = fromMS(created), uint64(claimRev)
			g.LeasedAt, g.HeartbeatAt = fromNullMS(leased), fromNullMS(beat)
			if snapNext.Valid {
				g.Snapshot = &leasehold.Snapshot{Next: snapNext.Int64, Size: snapSize.Int64, SHA256: snapSHA.String, At: fromMS(snapAt.Int64)}
			}
			if qAt.Valid {
				g.Quarantine = &leasehold.Quarantine{Error: qErr.String, Node: qNode.String, At: fromMS(qAt.Int64)}
			}
			if low.Valid && high.Valid && marksAt.Valid {
				g.Low, g.High, g.MarksAt = &low.Int64, &high.Int64, fromNullMS(marksAt)
			}
			if sAt.Valid {
				g.SourceError = &leasehold.SourceError{Error: sErr.String, Node: sNode.String, At: fromMS(sAt.Int64)}
			}
			at[seq] = len(out)
			out = append(out, PeerGroupState{Group: g})
			return nil
		})
	if err != nil {
		return nil, err
	}
	err = tx.stagedRows(`SELECT group_seq, start_id, end_id, next_id, status, priority, attempts, rule_version, headers, updated_at,
		last_error, last_error_at FROM `+a+`.dump_ranges WHERE group_seq IN (SELECT value FROM json_each(?1)) ORDER BY group_seq, start_id`,
		[]any{string(list)}, func(rs *rows) error {
			var seq, updated int64
			var r PeerRange
			var lastErr sql.NullString
			var lastErrAt sql.NullInt64
			var status string
			err := rs.Scan(&seq, &r.Start, &r.End, &r.Next, &status, &r.Priority, &r.Attempts, &r.RuleVersion, &r.Headers, &updated,
				&lastErr, &lastErrAt)
			if err != nil {
				return err
			}
			r.Status, r.UpdatedAt, r.LastErrorAt = leasehold.RangeStatus(status), fromMS(updated), fromNullMS(lastErrAt)
			if lastErr.Valid {
				r.LastError = &lastErr.String
			}
			i := at[seq]
			r.GroupID = out[i].Group.ID
			out[i].Ranges = append(out[i].Ranges, r)
			return nil
		})
	return out, err
}

// StageDir is the directory beside the catalog that staged files are
// kept in while a dump is sent or folded.
func (db *DB) StageDir() string { return db.path + ".staged" }
