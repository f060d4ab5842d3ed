package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	_ "modernc.org/sqlite"

	"leasehold"
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

// TestNoGroupCommit: the measuring switch really gives a commit per write.
func TestNoGroupCommit(t *testing.T) {
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
	db := openTest(t, "", Options{})
	ctx := context.Background()
	err := db.Write(ctx, func(tx *Tx) error {
		tx.PutGroup("a", GroupSpec{})
		panic("boom")
	})
	if leasehold.ErrorKind(err) != leasehold.KindInternal {
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
