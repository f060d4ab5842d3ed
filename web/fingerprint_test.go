package web_test

import (
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	_ "modernc.org/sqlite" // the catalog's driver, for a read-only look at it
)

// catalogView is a read-only connection to a node's catalog, opened beside
// the node's own, so tests can see exactly what is stored: every row of
// every table, and the files in the snapshot directory.
type catalogView struct {
	dir    string
	db     *sql.DB
	tables []string
}

func openCatalogView(t testing.TB, dataDir string) *catalogView {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "catalog.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatalf("catalog view: %v", err)
	}
	defer rows.Close()
	v := &catalogView{dir: dataDir, db: db}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		v.tables = append(v.tables, name)
	}
	if len(v.tables) == 0 {
		t.Fatal("catalog view: no tables")
	}
	return v
}

// state is what a request may change: the catalog's rows and the snapshot
// files on disk.
type state struct {
	catalog string // sha-256 over every row of every table
	files   string // sorted names, sizes and sha-256 of data-dir files
}

func (s state) String() string { return "catalog " + s.catalog[:12] + ", files " + s.files }

// state reads the whole catalog in one read transaction and every file in
// the snapshot directory.
func (v *catalogView) state(t testing.TB) state {
	t.Helper()
	h := sha256.New()
	tx, err := v.db.Begin()
	if err != nil {
		t.Fatalf("catalog view: %v", err)
	}
	defer tx.Rollback()
	for _, table := range v.tables {
		fmt.Fprintf(h, "table %s\n", table)
		rows, err := tx.Query(`SELECT * FROM "` + table + `" ORDER BY rowid`)
		if err != nil {
			t.Fatalf("catalog view: %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("catalog view: %s: %v", table, err)
			}
			for _, b := range vals {
				if b == nil {
					h.Write([]byte{0})
					continue
				}
				var n [9]byte
				n[0] = 1
				binary.LittleEndian.PutUint64(n[1:], uint64(len(b)))
				h.Write(n[:])
				h.Write(b)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("catalog view: %s: %v", table, err)
		}
		rows.Close()
	}
	return state{catalog: hex.EncodeToString(h.Sum(nil)), files: v.files(t)}
}

// files lists the snapshot directory: name, size and content hash of each
// file, so a torn, replaced or leftover file shows.
func (v *catalogView) files(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(v.dir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("snapshot dir: %v", err)
	}
	var out []string
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("snapshot dir: %v", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatalf("snapshot dir: %v", err)
		}
		out = append(out, fmt.Sprintf("%s:%d:%x", e.Name(), n, h.Sum(nil)[:6]))
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}
