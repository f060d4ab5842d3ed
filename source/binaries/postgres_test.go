package binaries

import (
	"context"
	"errors"
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
		"releases USING btree (grp)", "releases USING btree (poster)", "releases USING btree (posted DESC)", "releases USING gin (name gin_trgm_ops)"} {
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
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "version 99, newer than this leasehold's 1") {
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
