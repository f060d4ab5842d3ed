package binaries

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/source/nntp"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// mixedUpdates reads mixed() in batches of ten, as the Indexer does.
func mixedUpdates(group string) []Update {
	hs := mixed(group, "alt.binaries.lh.pg.other")
	w := NewWindow(group)
	var all []Update
	for lo := int64(1); lo <= int64(len(hs)); lo += 10 {
		hi := min(lo+9, int64(len(hs)))
		var in []nntp.Header
		for _, h := range hs {
			if h.Number >= lo && h.Number <= hi {
				in = append(in, h)
			}
		}
		all = append(all, w.Add(lo, hi, in)...)
	}
	return append(all, w.Flush()...)
}

func openPostgres(t *testing.T, dsn string) *Postgres {
	t.Helper()
	p, err := OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPostgresSink: the index holds the same last records as the records
// written (files with their segments, releases), one row a key, made with
// its tables and indexes on first use; a second worker opening it finds
// the schema and writes into it.
func TestPostgresSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Database(t)
	p := openPostgres(t, dsn)
	all := mixedUpdates("alt.binaries.lh.pg.a")
	want := newRecords()
	want.take(all)
	lease := Lease{Group: "alt.binaries.lh.pg.a", Fence: 1}
	// Half one update a write, half all in one write: a key twice in one
	// write is written once, the last winning.
	half := len(all) / 2
	for _, u := range all[:half] {
		if err := p.Write(ctx, lease, []Update{u}); err != nil {
			t.Fatal(err)
		}
	}
	second := openPostgres(t, dsn)
	if err := second.Write(ctx, lease, all[half:]); err != nil {
		t.Fatal(err)
	}
	got, err := p.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := (&records{Files: got.Files, Releases: got.Releases}).same(want); diff != "" {
		t.Errorf("PostgreSQL: %s", diff)
	}
	var segs, parts int
	p.pool.QueryRow(ctx, `SELECT count(*) FROM segments`).Scan(&segs)
	for _, f := range want.Files {
		parts += len(f.Segments)
	}
	if segs != parts {
		t.Errorf("%d segment rows for %d parts", segs, parts)
	}
	var indexes []string
	rows, _ := p.pool.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname`)
	indexes, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	joined := strings.Join(indexes, "\n")
	for _, idx := range []string{"files USING btree (grp)", "files USING btree (poster)", "files USING btree (posted)", "files USING btree (release)",
		"releases USING btree (grp)", "releases USING btree (poster)", "releases USING btree (posted DESC)", "releases USING gin (leasehold_posted_day(posted), name gin_trgm_ops)"} {
		if !strings.Contains(joined, idx) {
			t.Errorf("no index on %s among\n%s", idx, joined)
		}
	}
	// The NZB read back from the index is the NZB of the records.
	for key, r := range want.Releases {
		rel, files, err := ReadReleaseFromIndex(ctx, p.pool, key)
		if err != nil {
			t.Fatal(err)
		}
		var wantFiles []File
		for _, f := range want.Files {
			if f.Release == key {
				wantFiles = append(wantFiles, f)
			}
		}
		if a, b := string(NZB(rel, files)), string(NZB(r, wantFiles)); a != b {
			t.Errorf("release %s: the NZB from the index\n%s\nthe NZB of the records\n%s", key, a, b)
		}
	}
	if _, _, err := ReadReleaseFromIndex(ctx, p.pool, "no-such-release"); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("an unknown release: %v", err)
	}
}

// TestPostgresFence: a write under an older fence of the row's group is
// refused whole (a lost lease, counted), one at the row's fence or above
// is applied; a cross-posted row written last by another group's lease
// still refuses a stale holder of the first group.
func TestPostgresFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := openPostgres(t, pgtest.Database(t))
	all := mixedUpdates("alt.binaries.lh.pg.f")
	first, later := all[:len(all)-1], all[len(all)-1:]
	a2 := Lease{Group: "alt.binaries.lh.pg.f", Fence: 2}
	if err := p.Write(ctx, a2, all); err != nil {
		t.Fatal(err)
	}
	before, _ := p.Records(ctx)
	// The stale holder (fence 1) writes the older records of every key.
	err := p.Write(ctx, Lease{Group: a2.Group, Fence: 1}, first)
	var fe *FencedError
	if !errors.As(err, &fe) || !errors.Is(err, leasehold.ErrLeaseLost) || fe.Refused == 0 {
		t.Fatalf("a write under an older fence: %v; want a refusal that is a lost lease", err)
	}
	if p.Refused() != int64(fe.Refused) {
		t.Errorf("refused %d, counted %d", fe.Refused, p.Refused())
	}
	after, _ := p.Records(ctx)
	if diff := (&records{Files: after.Files, Releases: after.Releases}).same(&records{Files: before.Files, Releases: before.Releases}); diff != "" {
		t.Errorf("a refused write changed the index: %s", diff)
	}
	// The same fence again (a replay by the holder) and a newer one apply.
	if err := p.Write(ctx, a2, later); err != nil {
		t.Errorf("a write at the row's fence: %v", err)
	}
	if err := p.Write(ctx, Lease{Group: a2.Group, Fence: 3}, later); err != nil {
		t.Errorf("a write at a newer fence: %v", err)
	}
	// Another group's lease (a cross-post read there) writes the row at a
	// fence of its own, lower: applied; the stale holder of the first
	// group is refused all the same.
	other := Lease{Group: "alt.binaries.lh.pg.other", Fence: 1}
	if err := p.Write(ctx, other, later); err != nil {
		t.Errorf("a write of another group's lease: %v", err)
	}
	var lg string
	var fence int64
	p.pool.QueryRow(ctx, `SELECT lease_group, fence FROM releases WHERE key = $1`, later[0].Release.Key).Scan(&lg, &fence)
	if lg != other.Group || fence != 1 {
		t.Errorf("the row says lease %s fence %d; want the last writer's, %s 1", lg, fence, other.Group)
	}
	if err := p.Write(ctx, a2, later); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Errorf("a stale holder of the first group after another group wrote the row: %v; want refused", err)
	}
	// Planted: without the check the stale write goes in.
	p.NoFence = true
	if err := p.Write(ctx, Lease{Group: a2.Group, Fence: 1}, first); err != nil {
		t.Errorf("unfenced: %v", err)
	}
}

// TestPostgresSchemaVersion: a newer schema is refused with a clear
// error and nothing changed; an older one (an index made before its
// tables) is migrated.
func TestPostgresSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Database(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE leasehold_index_schema (version integer NOT NULL); INSERT INTO leasehold_index_schema VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	p := openPostgres(t, dsn) // version 0: migrated
	if err := p.Write(ctx, Lease{Group: "g", Fence: 1}, mixedUpdates("alt.binaries.lh.pg.v")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE leasehold_index_schema SET version = 99`); err != nil {
		t.Fatal(err)
	}
	_, err = OpenPostgres(ctx, dsn)
	var se *IndexSetupError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("version 99, newer than this leasehold's %d", IndexSchemaVersion)) {
		t.Fatalf("a newer schema: %v", err)
	}
	var v int
	conn.QueryRow(ctx, `SELECT version FROM leasehold_index_schema`).Scan(&v)
	if v != 99 {
		t.Errorf("the version became %d", v)
	}
}

// TestPostgresBadIndex: a wrong password and a missing database are
// setup errors, with the password not in the text.
func TestPostgresBadIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Database(t)
	pw := pgtest.Shared(t).Password()
	for name, bad := range map[string]string{
		"password": strings.Replace(dsn, pw, "wrong", 1),
		"database": strings.Replace(dsn, "/t", "/missing_t", 1),
	} {
		_, err := OpenPostgres(ctx, bad)
		var se *IndexSetupError
		if !errors.As(err, &se) {
			t.Errorf("%s: %v; want a setup error", name, err)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
}

// TestPostgresOutage: a write while the database is down waits, saying
// unreachable, and goes in when it is back; nothing is lost.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := pgtest.Binaries(); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	// Not under t.TempDir: the server's user must reach the directory.
	dir, err := os.MkdirTemp("", "leasehold-pg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := pgtest.Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	dsn, err := srv.CreateDatabase(ctx, "outage")
	if err != nil {
		t.Fatal(err)
	}
	p := openPostgres(t, dsn)
	p.Retry = 200 * time.Millisecond
	all := mixedUpdates("alt.binaries.lh.pg.o")
	lease := Lease{Group: "alt.binaries.lh.pg.o", Fence: 1}
	if err := p.Write(ctx, lease, all[:1]); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() { werr = p.Write(ctx, lease, all[1:]) })
	poll.Eventually(t, time.Minute, "the sink says the index is unreachable", func() bool { return !p.Reachable() })
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if werr != nil {
		t.Fatalf("the write across the outage: %v", werr)
	}
	if !p.Reachable() {
		t.Error("still unreachable after a write went in")
	}
	want := newRecords()
	want.take(all)
	got, err := p.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := (&records{Files: got.Files, Releases: got.Releases}).same(want); diff != "" {
		t.Errorf("after the outage: %s", diff)
	}
}

// TestPostgresCategory: a release's row carries the newznab category of
// its name and files (what the API filters by), and a files-only update
// (a cross-post read in a group that is not the release's home) writes
// no release row.
func TestPostgresCategory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := openPostgres(t, pgtest.Database(t))
	lease := Lease{Group: "alt.binaries.lh.pg.cat", Fence: 1}
	file := File{Type: "file", Key: "f1", Release: "r1", Group: lease.Group, Groups: []string{lease.Group}, Poster: "p@x", Subject: "s",
		Name: "Show.S01E02.720p.HDTV.x264.mkv", Parts: 1, Total: ptr(1), Complete: true, Bytes: 10, Posted: "2026-12-01T00:00:00Z",
		Segments: []Segment{{Number: 1, Article: 1, MessageID: "<a@x>", Bytes: 10}}}
	rel := Release{Type: "release", Key: "r1", Name: "Show.S01E02.720p.HDTV.x264", Poster: "p@x", Group: lease.Group, Groups: []string{lease.Group},
		Files: 1, CompleteFiles: 1, Complete: true, Bytes: 10, Posted: file.Posted}
	other := rel
	other.Key, other.Name = "r2", "Film.2024.1080p.BluRay.x264"
	ups := []Update{{Release: rel, Files: []File{file}, Changed: []bool{true}}, {Release: other, FilesOnly: true}}
	if err := p.Write(ctx, lease, ups); err != nil {
		t.Fatal(err)
	}
	var cat int
	if err := p.pool.QueryRow(ctx, `SELECT category FROM releases WHERE key = 'r1'`).Scan(&cat); err != nil || cat != Category(rel.Name, []string{file.Name}) || cat == 0 {
		t.Errorf("category of %s: %d, %v; want %d", rel.Name, cat, err, Category(rel.Name, []string{file.Name}))
	}
	var n int
	p.pool.QueryRow(ctx, `SELECT count(*) FROM releases WHERE key = 'r2'`).Scan(&n)
	if n != 0 {
		t.Errorf("a files-only update wrote its release's row")
	}
}

// TestPostgresPausedWriter: a writer that stops inside a transaction
// (a SIGSTOPped worker) holds no row past IdleInTransaction: the server
// ends its session, and another writer of the same rows goes on.
func TestPostgresPausedWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.Database(t)
	p := openPostgres(t, dsn)
	var setting string
	if err := p.pool.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&setting); err != nil || setting != IdleInTransaction {
		t.Fatalf("idle_in_transaction_session_timeout = %q, %v; want %s", setting, err, IdleInTransaction)
	}
	all := mixedUpdates("alt.binaries.lh.pg.pause")
	lease := Lease{Group: "alt.binaries.lh.pg.pause", Fence: 1}
	if err := p.Write(ctx, lease, all); err != nil {
		t.Fatal(err)
	}
	// The paused writer: a transaction that locked a row and says no more.
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE files SET parts = parts WHERE key = (SELECT min(key) FROM files)`); err != nil {
		t.Fatal(err)
	}
	second := openPostgres(t, dsn)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := second.Write(wctx, Lease{Group: lease.Group, Fence: 2}, all); err != nil {
		t.Fatalf("a writer behind a paused one: %v", err)
	}
}
