package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold"
)

func openTest(t testing.TB, path string, o Options) *DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "catalog.db")
	}
	db, err := Open(path, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpen(t *testing.T) {
	t.Parallel()
	t.Run("Pragmas", func(t *testing.T) {
		db := openTest(t, "", Options{})
		for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1"} {
			var got string
			// The writer's own connection: pragmas are per connection.
			err := db.Write(context.Background(), func(tx *Tx) error {
				var v any
				if err := tx.queryRowSQL("PRAGMA " + pragma).Scan(&v); err != nil {
					return err
				}
				got = fmt.Sprint(v)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
			}
		}
	})
	t.Run("NewerSchemaRefused", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "catalog.db")
		raw, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", leasehold.SchemaVersion+1)); err != nil {
			t.Fatal(err)
		}
		raw.Close()
		_, err = Open(path, Options{})
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("Open of a newer schema: got %v, want an unavailable error", err)
		}
	})
	t.Run("Reopen", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "catalog.db")
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		db2 := openTest(t, path, Options{})
		var v int
		db2.r.QueryRow("PRAGMA user_version").Scan(&v)
		if v != leasehold.SchemaVersion {
			t.Fatalf("user_version = %d, want %d", v, leasehold.SchemaVersion)
		}
	})
}

// TestGroupCommit: many concurrent writers share far fewer commits than
// writes, and each caller sees only its own error.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	const writers, each = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("g%d-%d", w, i)
				fail := i%5 == 0
				err := db.Write(ctx, func(tx *Tx) error {
					if _, _, err := tx.PutGroup(name, GroupSpec{}); err != nil {
						return err
					}
					if fail {
						return leasehold.Errorf(leasehold.KindInvalid, "refused %s", name)
					}
					return nil
				})
				switch {
				case fail && (err == nil || err.Error() != "refused "+name):
					errs <- fmt.Errorf("%s: got %v, want its own error", name, err)
				case !fail && err != nil:
					errs <- fmt.Errorf("%s: %v", name, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n int
	if err := db.r.QueryRow("SELECT count(*) FROM groups").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := writers * each * 4 / 5; n != want {
		t.Errorf("groups stored = %d, want %d (the failed writes' groups rolled back)", n, want)
	}
	st := db.Stats()
	t.Logf("%d writes in %d commits (%.1f per commit)", st.Writes, st.Commits, float64(st.Writes)/float64(st.Commits))
	if st.Commits*4 > st.Writes {
		t.Errorf("%d commits for %d writes: group commit is not batching", st.Commits, st.Writes)
	}
}

// TestGroupCommitBareBetween: a bare write queued among busy writers ends
// the batch being gathered and runs after it; no write is lost or left
// waiting.
func TestGroupCommitBareBetween(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	const writers, each, bares = 6, 100, 200
	var bare atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers*each+bares)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := db.Write(ctx, func(tx *Tx) error {
					_, _, err := tx.PutGroup(fmt.Sprintf("g%d-%d", w, i), GroupSpec{})
					return err
				}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Go(func() {
		for range bares {
			if err := db.writeBare(ctx, func(*Tx) error { bare.Add(1); return nil }); err != nil {
				errs <- err
			}
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("writes still waiting after a minute: %d of %d bare writes ran", bare.Load(), bares)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n int
	if err := db.r.QueryRow("SELECT count(*) FROM groups").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != writers*each || bare.Load() != bares {
		t.Errorf("groups stored = %d, bare writes run = %d; want %d and %d", n, bare.Load(), writers*each, bares)
	}
}

// TestNoGroupCommit: the measuring switch really gives a commit per write.
func TestNoGroupCommit(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{NoGroupCommit: true})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db.Write(ctx, func(tx *Tx) error { _, _, err := tx.PutGroup(fmt.Sprintf("g%d", i), GroupSpec{}); return err })
		}()
	}
	wg.Wait()
	if st := db.Stats(); st.Commits != 32 {
		t.Fatalf("commits = %d, want 32", st.Commits)
	}
}

// TestDurableAcrossReopen: what Write acknowledged is there after a reopen.
func TestDurableAcrossReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "catalog.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := db.Write(ctx, func(tx *Tx) error {
				g, _, err := tx.PutGroup(fmt.Sprintf("g%d", i), GroupSpec{})
				if err != nil {
					return err
				}
				_, err = tx.PlanTail(g.ID, 1000000)
				return err
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	db.Close()
	db2 := openTest(t, path, Options{})
	for i := range 50 {
		g, err := db2.GroupByName(ctx, fmt.Sprintf("g%d", i))
		if err != nil {
			t.Fatalf("after reopen: %v", err)
		}
		if g.TailEnd != 1000000 {
			t.Fatalf("%s tail_end = %d, want 1000000", g.Name, g.TailEnd)
		}
	}
}

// TestPanicInWrite: a panicking write is that write's internal error; the
// batch goes on.
func TestPanicInWrite(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	ctx := context.Background()
	err := db.Write(ctx, func(tx *Tx) error {
		tx.PutGroup("a", GroupSpec{})
		panic("boom")
	})
	if leasehold.KindOf(err) != leasehold.KindInternal {
		t.Fatalf("got %v, want an internal error", err)
	}
	if _, err := db.GroupByName(ctx, "a"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("the panicking write's group: %v, want not found", err)
	}
	if err := db.Write(ctx, func(tx *Tx) error { _, _, err := tx.PutGroup("b", GroupSpec{}); return err }); err != nil {
		t.Fatalf("the next write: %v", err)
	}
}

func TestWriteAfterClose(t *testing.T) {
	t.Parallel()
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := db.Write(context.Background(), func(*Tx) error { return nil }); !errors.Is(err, leasehold.ErrUnavailable) {
		t.Fatalf("Write after Close: %v, want unavailable", err)
	}
}

// rawExec runs one ad hoc statement through the writer, for tests that set
// up states the API cannot reach.
func (db *DB) rawExec(q string, args ...any) error {
	return db.Write(context.Background(), func(tx *Tx) error {
		_, err := tx.execSQL(q, args...)
		return err
	})
}

// TestMigration: a catalog made at version 1 (testdata/schema-v1.sql, the
// first released schema), at version 5 (testdata/schema-v5.sql, the last
// before rule 10) or at version 6 (testdata/schema-v6.sql, the last
// without tallies or flaps) is brought up to version 14 and the same schema a new
// catalog gets, keeps its rows (of kind default: rule 12; its nodes
// registered here, no visitors: version 13), and gets an identity that
// lasts across reopening.
func TestMigration(t *testing.T) {
	t.Parallel()
	if leasehold.SchemaVersion != 14 {
		t.Fatalf("SchemaVersion = %d, want 14 (members that leave, deletes that travel)", leasehold.SchemaVersion)
	}
	for _, c := range []struct {
		name    string
		file    string
		version int
	}{
		{"FromV1", "testdata/schema-v1.sql", 1},
		{"FromV5", "testdata/schema-v5.sql", 5},
		{"FromV6", "testdata/schema-v6.sql", 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := migrateFrom(t, c.file, c.version,
				`INSERT INTO groups (name, range_size, start_id, tail_end, history_floor, free_since, created_at, updated_at) VALUES ('alt.kept', 10, 1, 0, 1, 0, 0, 0)`,
				`INSERT INTO nodes (name, token_hash, priority_min, priority_max, capacity, created_at) VALUES ('w1', x'01', -10, 10, 4, 0)`)
			migrated := openTest(t, old, Options{})
			fresh := openTest(t, filepath.Join(t.TempDir(), "new.db"), Options{})
			if got, want := schemaOf(t, migrated), schemaOf(t, fresh); got != want {
				t.Errorf("migrated schema differs from a new catalog's:\n got %s\nwant %s", got, want)
			}
			var v int
			if err := migrated.r.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 14 {
				t.Errorf("user_version after migration = %d, %v; want 14", v, err)
			}
			var n int
			if err := migrated.r.QueryRow(`SELECT count(*) FROM groups WHERE name = 'alt.kept' AND kind = 'default'`).Scan(&n); err != nil || n != 1 {
				t.Errorf("group kept across migration: %d, %v", n, err)
			}
			if ns, err := migrated.Nodes(context.Background()); err != nil || len(ns) != 1 || ns[0].Name != "w1" {
				t.Errorf("nodes after migration: %+v, %v; want w1, registered here", ns, err)
			}
			id := migrated.CatalogID()
			if len(id) != 32 || id == fresh.CatalogID() {
				t.Errorf("catalog ids %q and %q: want 32 hex digits, different", id, fresh.CatalogID())
			}
			migrated.Close()
			again := openTest(t, old, Options{})
			if again.CatalogID() != id {
				t.Errorf("catalog id after reopening = %q, want %q", again.CatalogID(), id)
			}
		})
	}
}

// migrateFrom makes a catalog file with the schema in file at version and
// the rows inserts make, and returns its path, for Open to migrate.
func migrateFrom(t *testing.T, file string, version int, inserts ...string) string {
	t.Helper()
	ddl, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range append([]string{string(ddl), fmt.Sprintf("PRAGMA user_version = %d", version)}, inserts...) {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// schemaOf is a catalog's schema, one object a line, without comments and
// spacing (they differ between a step and schema.sql: ALTER TABLE writes
// its own).
func schemaOf(t *testing.T, db *DB) string {
	t.Helper()
	rows, err := db.r.Query(`SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ, name, tbl, ddl string
		if err := rows.Scan(&typ, &name, &tbl, &ddl); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", typ, name, tbl, strings.Join(strings.Fields(stripComments(ddl)), ""))
	}
	return b.String()
}

func stripComments(ddl string) string {
	var b strings.Builder
	for _, line := range strings.Split(ddl, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
