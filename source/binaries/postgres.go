package binaries

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
)

// Lease is the group and fence of the lease a holder writes records under
// (DESIGN.md rule 15): a store that checks them refuses the writes of a
// holder whose group was taken over since.
type Lease struct {
	Group string
	Fence int64
}

type leaseKey struct{}

// WithLease returns ctx carrying the lease the records written under it
// belong to; the Indexer hands it to its Sink.
func WithLease(ctx context.Context, l Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseOf is the lease ctx carries (the zero Lease when none).
func LeaseOf(ctx context.Context) Lease {
	l, _ := ctx.Value(leaseKey{}).(Lease)
	return l
}

// IndexSchemaVersion is the version of the PostgreSQL index's tables this
// leasehold writes (the one row of leasehold_index_schema).
const IndexSchemaVersion = 2

// FencedError is a write the index refused because a row it would change
// was written under a newer lease of the same group: the writer's lease
// was taken over. It is a lost lease (errors.Is(err,
// leasehold.ErrLeaseLost)), and nothing of the write was applied.
type FencedError struct {
	Lease   Lease
	Refused int // rows refused
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("binaries: the index refused %d rows of group %s at fence %d: a newer lease of the group wrote them (lease lost)",
		e.Refused, e.Lease.Group, e.Lease.Fence)
}

// Is makes errors.Is(err, leasehold.ErrLeaseLost) true.
func (e *FencedError) Is(target error) bool { return target == leasehold.ErrLeaseLost }

// IndexSetupError is an index that cannot be used at all as named (a
// wrong password, a database that does not exist, a schema newer than
// this leasehold's): retrying will not help.
type IndexSetupError struct{ Err error }

func (e *IndexSetupError) Error() string { return e.Err.Error() }
func (e *IndexSetupError) Unwrap() error { return e.Err }

// Postgres writes records into a shared PostgreSQL index (tables files,
// releases and segments) that many workers on many boxes write at once.
// Every row carries the lease that wrote it; a write is applied only when
// its fence is at least the fence its own lease group last wrote to that
// row, in one INSERT … ON CONFLICT … DO UPDATE … WHERE, so a holder whose
// group was taken over cannot write over its successor (FencedError).
//
// A database that cannot be reached is waited for: Write retries until
// it answers or its context ends, and Reachable says false meanwhile, so
// a worker takes no new groups and finishes no range whose records are
// not in the index.
type Postgres struct {
	pool *pgxpool.Pool
	// Logger gets refused writes and outages; slog.Default() when nil.
	Logger *slog.Logger
	// Retry bounds the wait between tries while the database cannot be
	// reached; 0 means 5 s.
	Retry time.Duration
	// NoFence writes without the fence check. Only the fault harness
	// sets it (LEASEHOLD_TEST_UNFENCED), to show that the check is what
	// keeps a stale holder's records out.
	NoFence bool

	refused     atomic.Int64
	down        atomic.Bool
	downLogMu   sync.Mutex
	downLoggedT time.Time
}

// IdleInTransaction is how long the index lets a worker's session sit
// in a transaction without a statement before it ends the session (the
// connection's idle_in_transaction_session_timeout, unless dsn sets
// one): a batch's statements follow each other at once.
const IdleInTransaction = "10s"

// OpenPostgres connects to the index at dsn (postgres://…), checks that
// it answers, and makes or migrates its tables. A wrong password, a
// missing database or a schema newer than IndexSchemaVersion is an
// *IndexSetupError.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, &IndexSetupError{fmt.Errorf("binaries: postgres: %s: %v", redact(dsn), err)}
	}
	cfg.MaxConns = 4
	// A worker paused inside a transaction (SIGSTOP, a frozen VM, a GC
	// pause) holds the rows it wrote locked, and the next holder of a
	// group its cross-posted files share would wait on them as long as
	// the pause lasts. The server ends such a session after this long,
	// which frees the rows; the paused worker, woken, finds its
	// connection gone, writes again and is refused by fence.
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = IdleInTransaction
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &IndexSetupError{fmt.Errorf("binaries: postgres: %s: %v", redact(dsn), err)}
	}
	p := &Postgres{pool: pool}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		if setupFailure(err) {
			return nil, &IndexSetupError{fmt.Errorf("binaries: postgres %s: %w", redact(dsn), err)}
		}
		return nil, fmt.Errorf("binaries: postgres %s: %w", redact(dsn), err)
	}
	return p, nil
}

// redact is dsn without its password, to be logged.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// setupFailure reports whether err says the index is named wrong: the
// login refused, the database or role missing, a schema too new.
func setupFailure(err error) bool {
	var ie *IndexSetupError
	if errors.As(err, &ie) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000", "3D000", "42501": // invalid password or authorization, no such database, no privilege
			return true
		}
	}
	return false
}

// Refused is how many rows this sink's writes had refused for an older
// fence.
func (p *Postgres) Refused() int64 { return p.refused.Load() }

// Reachable is false while the database could not be reached at the last
// try.
func (p *Postgres) Reachable() bool { return !p.down.Load() }

// Close closes the connections.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

func (p *Postgres) log() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}

// indexSchema is version 1 of the index (PGSCHEMA): the columns the
// newznab API reads, and fences, the highest fence each lease group wrote
// to the row (what a write is checked against; lease_group and fence say
// which lease wrote it last).
const indexSchema = `
CREATE TABLE files (
  key text PRIMARY KEY, release text NOT NULL, grp text NOT NULL, groups text[] NOT NULL,
  poster text NOT NULL, subject text NOT NULL, name text NOT NULL,
  file integer, files integer, parts integer NOT NULL, total integer,
  complete boolean NOT NULL, bytes bigint NOT NULL, posted timestamptz NOT NULL,
  posted_text text, -- the date as the server gave it, when it is not a date
  lease_group text NOT NULL, fence bigint NOT NULL, fences jsonb NOT NULL
);
CREATE INDEX ON files (release); CREATE INDEX ON files (grp); CREATE INDEX ON files (poster); CREATE INDEX ON files (posted);
CREATE TABLE releases (
  key text PRIMARY KEY, name text NOT NULL, poster text NOT NULL, grp text NOT NULL, groups text[] NOT NULL,
  files integer NOT NULL, total_files integer, complete_files integer NOT NULL, complete boolean NOT NULL,
  bytes bigint NOT NULL, posted timestamptz NOT NULL, posted_text text, nzb text,
  category integer NOT NULL DEFAULT 0,
  lease_group text NOT NULL, fence bigint NOT NULL, fences jsonb NOT NULL
);
CREATE INDEX ON releases (grp); CREATE INDEX ON releases (poster); CREATE INDEX ON releases (posted DESC);
CREATE INDEX ON releases (category, posted DESC);
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX releases_name_trgm ON releases USING gin (name gin_trgm_ops);
CREATE TABLE segments (
  file text NOT NULL, number integer NOT NULL, article bigint NOT NULL,
  message_id text NOT NULL, bytes bigint NOT NULL,
  lease_group text NOT NULL, fence bigint NOT NULL, fences jsonb NOT NULL,
  PRIMARY KEY (file, number)
);`

// indexByDay is version 2: the trigram index on release names becomes
// one GIN index over the day a release was posted and its name, so that
// the newznab API finds a common word's newest releases by reading the
// newest days' matches only (a day bound and the name's trigrams
// answered from the index together) instead of every match's row.
// leasehold_posted_day is a day number (UTC), made of immutable parts
// only (an interval since 1970, not extract of a timestamptz, which
// depends on the session's time zone), so PostgreSQL inlines it in a
// query's conditions as it does in the index.
const indexByDay = `
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE FUNCTION leasehold_posted_day(timestamptz) RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS 'SELECT floor(extract(epoch FROM ($1 - timestamptz ''1970-01-01 00:00:00+00'')) / 86400)::integer';
CREATE INDEX releases_day_name ON releases USING gin (leasehold_posted_day(posted), name gin_trgm_ops);
DROP INDEX releases_name_trgm;`

// migrations[v] takes the index from version v to v+1; version 0 is an
// empty database.
var migrations = []string{indexSchema, indexByDay}

// migrate makes or migrates the tables, under an advisory lock so that
// workers starting together do it once.
func (p *Postgres) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// The key is arbitrary but fixed: "leasehold-index".
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7400139855227433317)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS leasehold_index_schema (version integer NOT NULL)`); err != nil {
			return err
		}
		var v int
		err := tx.QueryRow(ctx, `SELECT version FROM leasehold_index_schema`).Scan(&v)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := tx.Exec(ctx, `INSERT INTO leasehold_index_schema (version) VALUES (0)`); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		if v > IndexSchemaVersion {
			return &IndexSetupError{fmt.Errorf("the index's schema is version %d, newer than this leasehold's %d: upgrade this worker's leasehold", v, IndexSchemaVersion)}
		}
		for ; v < IndexSchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrating the index from version %d: %w", v, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE leasehold_index_schema SET version = $1`, IndexSchemaVersion)
		return err
	})
}

// The upserts take a whole batch as arrays (one statement a table). The
// WHERE is the fence: a row is changed only by a lease whose fence is at
// least the highest its group wrote to the row. Groups of a cross-posted
// file each keep their own fence in fences, so a stale holder of one group
// is refused whichever group's lease wrote the row last.
const (
	fenceCheck = ` WHERE $%d::bigint >= COALESCE((t.fences ->> $%d::text)::bigint, 0)`
	setLease   = `lease_group = EXCLUDED.lease_group, fence = EXCLUDED.fence, fences = t.fences || EXCLUDED.fences`

	upsertFiles = `INSERT INTO files AS t (key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted, posted_text, lease_group, fence, fences)
SELECT u.key, u.release, u.grp, ARRAY(SELECT jsonb_array_elements_text(u.groups)), u.poster, u.subject, u.name, u.file, u.files, u.parts, u.total, u.complete, u.bytes, u.posted, u.posted_text,
  $16::text, $17::bigint, jsonb_build_object($16::text, $17::bigint)
FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::text[], $8::int[], $9::int[], $10::int[], $11::int[], $12::bool[], $13::bigint[], $14::timestamptz[], $15::text[])
  AS u(key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted, posted_text)
ON CONFLICT (key) DO UPDATE SET release = EXCLUDED.release, grp = EXCLUDED.grp, groups = EXCLUDED.groups, poster = EXCLUDED.poster,
  subject = EXCLUDED.subject, name = EXCLUDED.name, file = EXCLUDED.file, files = EXCLUDED.files, parts = EXCLUDED.parts, total = EXCLUDED.total,
  complete = EXCLUDED.complete, bytes = EXCLUDED.bytes, posted = EXCLUDED.posted, posted_text = EXCLUDED.posted_text, ` + setLease

	upsertSegments = `INSERT INTO segments AS t (file, number, article, message_id, bytes, lease_group, fence, fences)
SELECT u.file, u.number, u.article, u.message_id, u.bytes, $6::text, $7::bigint, jsonb_build_object($6::text, $7::bigint)
FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[], $5::bigint[]) AS u(file, number, article, message_id, bytes)
ON CONFLICT (file, number) DO UPDATE SET article = EXCLUDED.article, message_id = EXCLUDED.message_id, bytes = EXCLUDED.bytes, ` + setLease

	upsertReleases = `INSERT INTO releases AS t (key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, posted_text, nzb, category, lease_group, fence, fences)
SELECT u.key, u.name, u.poster, u.grp, ARRAY(SELECT jsonb_array_elements_text(u.groups)), u.files, u.total_files, u.complete_files, u.complete, u.bytes, u.posted, u.posted_text, u.nzb, u.category,
  $15::text, $16::bigint, jsonb_build_object($15::text, $16::bigint)
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::int[], $7::int[], $8::int[], $9::bool[], $10::bigint[], $11::timestamptz[], $12::text[], $13::text[], $14::int[])
  AS u(key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, posted_text, nzb, category)
ON CONFLICT (key) DO UPDATE SET name = EXCLUDED.name, poster = EXCLUDED.poster, grp = EXCLUDED.grp, groups = EXCLUDED.groups,
  files = EXCLUDED.files, total_files = EXCLUDED.total_files, complete_files = EXCLUDED.complete_files, complete = EXCLUDED.complete,
  bytes = EXCLUDED.bytes, posted = EXCLUDED.posted, posted_text = EXCLUDED.posted_text, nzb = EXCLUDED.nzb, category = EXCLUDED.category, ` + setLease
)

// Write upserts the changed files, their segments and the releases of
// updates under lease, in one transaction, fenced: when any row is
// refused for an older fence, nothing is applied and the error is a
// *FencedError (a lost lease). While the database cannot be reached it
// tries again, until it can or ctx ends.
func (p *Postgres) Write(ctx context.Context, lease Lease, updates []Update) error {
	if lease.Group == "" {
		return errors.New("binaries: postgres: a write without a lease (no group and fence to fence it by)")
	}
	b := newPgBatch(updates)
	if b.rows() == 0 {
		return nil
	}
	wait := 200 * time.Millisecond
	for {
		err := p.writeOnce(ctx, lease, b)
		if err == nil {
			if p.down.Swap(false) {
				p.log().Info("the index answers again; writing on", "group", lease.Group)
			}
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			var fe *FencedError
			if errors.As(err, &fe) {
				p.refused.Add(int64(fe.Refused))
				p.log().Warn("the index refused a write for an older fence: the lease is lost", "group", lease.Group,
					"fence", lease.Fence, "rows_refused", fe.Refused, "refused_total", p.refused.Load())
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
		p.down.Store(true)
		p.logDown(lease, err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		wait = min(wait*2, cmp.Or(p.Retry, 5*time.Second))
	}
}

// logDown logs an outage at most once every 30 s.
func (p *Postgres) logDown(lease Lease, err error) {
	p.downLogMu.Lock()
	defer p.downLogMu.Unlock()
	if time.Since(p.downLoggedT) < 30*time.Second {
		return
	}
	p.downLoggedT = time.Now()
	p.log().Warn("the index cannot be reached; holding the range's records and taking no new groups until it answers",
		"group", lease.Group, "err", err)
}

// transient reports whether err is the database not answering (a
// connection refused or lost, a server shutting down or starting, too
// many connections) or a conflict between writers (deadlock,
// serialization): worth trying again.
func transient(err error) bool {
	var fe *FencedError
	if errors.As(err, &fe) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") || strings.HasPrefix(pe.Code, "57P") ||
			pe.Code == "40001" || pe.Code == "40P01"
	}
	if setupFailure(err) {
		return false
	}
	// The connection refused, cut or closed under the write: anything
	// else (a value pgx cannot encode) would fail again, and fails the
	// range instead of looping.
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) || strings.Contains(err.Error(), "conn closed")
}

func (p *Postgres) writeOnce(ctx context.Context, lease Lease, b *pgBatch) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	applied := int64(0)
	exec := func(sql string, args ...any) error {
		if !p.NoFence {
			n := len(args)
			sql += fmt.Sprintf(fenceCheck, n+2, n+1)
		}
		tag, err := tx.Exec(ctx, sql, append(args, lease.Group, lease.Fence)...)
		applied += tag.RowsAffected()
		return err
	}
	f := &b.files
	if len(f.key) > 0 {
		if err := exec(upsertFiles, f.key, f.release, f.grp, f.groups, f.poster, f.subject, f.name, f.file, f.files, f.parts, f.total,
			f.complete, f.bytes, f.posted, f.postedText); err != nil {
			return err
		}
	}
	s := &b.segments
	if len(s.file) > 0 {
		if err := exec(upsertSegments, s.file, s.number, s.article, s.messageID, s.bytes); err != nil {
			return err
		}
	}
	r := &b.releases
	if len(r.key) > 0 {
		if err := exec(upsertReleases, r.key, r.name, r.poster, r.grp, r.groups, r.files, r.totalFiles, r.completeFiles, r.complete,
			r.bytes, r.posted, r.postedText, r.nzb, r.category); err != nil {
			return err
		}
	}
	if refused := b.rows() - int(applied); refused > 0 {
		return &FencedError{Lease: lease, Refused: refused}
	}
	return tx.Commit(ctx)
}

// pgBatch is a write's rows as columns, one of each key (the last of a
// key in the write wins), ordered by key so that writers touching the
// same rows lock them in one order.
type pgBatch struct {
	files struct {
		key, release, grp, poster, subject, name, postedText []string
		groups                                               []string
		file, files, total                                   []*int
		parts                                                []int
		complete                                             []bool
		bytes                                                []int64
		posted                                               []time.Time
	}
	segments struct {
		file, messageID []string
		number          []int
		article, bytes  []int64
	}
	releases struct {
		key, name, poster, grp, groups, postedText []string
		nzb                                        []*string
		files, completeFiles, category             []int
		totalFiles                                 []*int
		complete                                   []bool
		bytes                                      []int64
		posted                                     []time.Time
	}
}

func newPgBatch(updates []Update) *pgBatch {
	files := map[string]File{}
	releases := map[string]Release{}
	category := map[string]int{} // the newznab category, from the name and every file of the release
	for _, u := range updates {
		for _, f := range u.ChangedFiles() {
			files[f.Key] = f
		}
		if u.FilesOnly {
			continue // another group's window writes this release's record
		}
		releases[u.Release.Key] = u.Release
		names := make([]string, len(u.Files))
		for i, f := range u.Files {
			names[i] = f.Name
		}
		category[u.Release.Key] = Category(u.Release.Name, names)
	}
	b := &pgBatch{}
	for _, k := range slices.Sorted(mapKeys(files)) {
		f := files[k]
		t, raw := pgTime(f.Posted)
		c := &b.files
		c.key, c.release, c.grp, c.poster = append(c.key, f.Key), append(c.release, f.Release), append(c.grp, f.Group), append(c.poster, f.Poster)
		c.subject, c.name, c.postedText = append(c.subject, f.Subject), append(c.name, f.Name), append(c.postedText, raw)
		c.groups = append(c.groups, jsonArray(f.Groups))
		c.file, c.files, c.total, c.parts = append(c.file, f.File), append(c.files, f.Files), append(c.total, f.Total), append(c.parts, f.Parts)
		c.complete, c.bytes, c.posted = append(c.complete, f.Complete), append(c.bytes, f.Bytes), append(c.posted, t)
		segs := slices.Clone(f.Segments)
		slices.SortStableFunc(segs, func(a, b Segment) int { return cmp.Compare(a.Number, b.Number) })
		s := &b.segments
		for i, g := range segs {
			if i+1 < len(segs) && segs[i+1].Number == g.Number {
				continue // one row a part: the last listed
			}
			s.file, s.number, s.article = append(s.file, f.Key), append(s.number, g.Number), append(s.article, g.Article)
			s.messageID, s.bytes = append(s.messageID, g.MessageID), append(s.bytes, g.Bytes)
		}
	}
	for _, k := range slices.Sorted(mapKeys(releases)) {
		r := releases[k]
		t, raw := pgTime(r.Posted)
		c := &b.releases
		c.key, c.name, c.poster, c.grp = append(c.key, r.Key), append(c.name, r.Name), append(c.poster, r.Poster), append(c.grp, r.Group)
		c.groups, c.postedText, c.nzb = append(c.groups, jsonArray(r.Groups)), append(c.postedText, raw), append(c.nzb, r.NZB)
		c.files, c.completeFiles, c.totalFiles = append(c.files, r.Files), append(c.completeFiles, r.CompleteFiles), append(c.totalFiles, r.TotalFiles)
		c.complete, c.bytes, c.posted = append(c.complete, r.Complete), append(c.bytes, r.Bytes), append(c.posted, t)
		c.category = append(c.category, category[k])
	}
	return b
}

func (b *pgBatch) rows() int { return len(b.files.key) + len(b.segments.file) + len(b.releases.key) }

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func jsonArray(s []string) string {
	if s == nil {
		s = []string{}
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// pgTime is a record's posted date as a time, and "" — or, for a date
// the server gave in a form that does not parse, the epoch and the text
// as given (kept in posted_text, so it reads back as written).
func pgTime(s string) (time.Time, string) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Unix(0, 0).UTC(), s
	}
	return t, ""
}

func fromPgTime(t time.Time, raw *string) string {
	if raw != nil && *raw != "" {
		return *raw
	}
	return t.UTC().Format(time.RFC3339)
}

// Records reads the whole index back (for tests and the fault run).
func (p *Postgres) Records(ctx context.Context) (Records, error) {
	return readIndex(ctx, p.pool, "")
}

// Query is what ReadReleaseFromIndex needs of a connection: a pool, a
// connection or a transaction.
type Query interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadReleaseFromIndex reads one release and its files with their
// segments from the index (by release key), whatever boxes wrote them:
// what NZB renders. An unknown key is an error wrapping pgx.ErrNoRows.
func ReadReleaseFromIndex(ctx context.Context, db Query, key string) (Release, []File, error) {
	recs, err := readIndex(ctx, db, key)
	if err != nil {
		return Release{}, nil, err
	}
	r, ok := recs.Releases[key]
	if !ok {
		return Release{}, nil, fmt.Errorf("binaries: no release %q in the index: %w", key, pgx.ErrNoRows)
	}
	files := make([]File, 0, len(recs.Files))
	for _, k := range slices.Sorted(mapKeys(recs.Files)) {
		files = append(files, recs.Files[k])
	}
	return r, files, nil
}

// ReleaseKeys are the keys of the releases named name in the index (a
// name may be shared by releases of several posters).
func ReleaseKeys(ctx context.Context, db Query, name string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT key FROM releases WHERE name = $1 ORDER BY posted, key`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Pool is the sink's connection pool (to read with ReadReleaseFromIndex).
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// readIndex reads the release key (every release when "") with its files.
func readIndex(ctx context.Context, db Query, release string) (Records, error) {
	out := Records{Files: map[string]File{}, Releases: map[string]Release{}}
	where, args := "", []any{}
	if release != "" {
		where, args = " WHERE release = $1", []any{release}
	}
	rows, err := db.Query(ctx, `SELECT key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted, posted_text FROM files`+where, args...)
	if err != nil {
		return out, err
	}
	for rows.Next() {
		f := File{Type: "file"}
		var t time.Time
		var raw *string
		if err := rows.Scan(&f.Key, &f.Release, &f.Group, &f.Groups, &f.Poster, &f.Subject, &f.Name, &f.File, &f.Files, &f.Parts, &f.Total, &f.Complete, &f.Bytes, &t, &raw); err != nil {
			rows.Close()
			return out, err
		}
		f.Posted = fromPgTime(t, raw)
		out.Files[f.Key] = f
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, err
	}
	segWhere := ""
	if release != "" {
		segWhere = " WHERE file IN (SELECT key FROM files WHERE release = $1)"
	}
	rows, err = db.Query(ctx, `SELECT file, number, article, message_id, bytes FROM segments`+segWhere+` ORDER BY file, number`, args...)
	if err != nil {
		return out, err
	}
	for rows.Next() {
		var g Segment
		var key string
		if err := rows.Scan(&key, &g.Number, &g.Article, &g.MessageID, &g.Bytes); err != nil {
			rows.Close()
			return out, err
		}
		if f, ok := out.Files[key]; ok {
			f.Segments = append(f.Segments, g)
			out.Files[key] = f
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, err
	}
	relWhere := ""
	if release != "" {
		relWhere = " WHERE key = $1"
	}
	rows, err = db.Query(ctx, `SELECT key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, posted_text, nzb FROM releases`+relWhere, args...)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		r := Release{Type: "release"}
		var t time.Time
		var raw *string
		if err := rows.Scan(&r.Key, &r.Name, &r.Poster, &r.Group, &r.Groups, &r.Files, &r.TotalFiles, &r.CompleteFiles, &r.Complete, &r.Bytes, &t, &raw, &r.NZB); err != nil {
			return out, err
		}
		r.Posted = fromPgTime(t, raw)
		out.Releases[r.Key] = r
	}
	return out, rows.Err()
}

// IsPostgres reports whether an --out names a PostgreSQL index.
func IsPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}
