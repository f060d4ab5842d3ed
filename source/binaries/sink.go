package binaries

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	_ "modernc.org/sqlite" // the SQLite output
)

// OpenSink opens the output named by spec: "sqlite:FILE" for a SQLite
// database (table binaries, keyed by key, upserted), anything else a
// JSON-lines file appended to (one complete file a line).
func OpenSink(spec string) (interface {
	Sink
	io.Closer
}, error) {
	if path, ok := strings.CutPrefix(spec, "sqlite:"); ok {
		return OpenSQLite(path)
	}
	return OpenJSONL(spec)
}

// JSONL appends complete files to a file, one JSON object a line. A
// takeover may write a file twice: readers take the last line of a key.
type JSONL struct {
	mu sync.Mutex
	f  *os.File
}

// OpenJSONL opens path for appending, creating it. A last line cut off by
// a crash is removed first, so every line stays whole.
func OpenJSONL(path string) (*JSONL, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := trimPartialLine(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("binaries: %s: %w", path, err)
	}
	return &JSONL{f: f}, nil
}

// trimPartialLine cuts f after its last newline and seeks to its end.
func trimPartialLine(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	end := size
	buf := make([]byte, 4096)
	for end > 0 {
		n := int64(len(buf))
		if end < n {
			n = end
		}
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end != size {
		if err := f.Truncate(end); err != nil {
			return err
		}
	}
	_, err = f.Seek(end, io.SeekStart)
	return err
}

// Write appends files in one write and syncs it.
func (j *JSONL) Write(_ context.Context, files []File) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range files {
		if err := enc.Encode(&files[i]); err != nil {
			return err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(b.Bytes()); err != nil {
		return err
	}
	return j.f.Sync()
}

// Close closes the file.
func (j *JSONL) Close() error { return j.f.Close() }

// SQLite upserts complete files into the table binaries of a SQLite
// database, keyed by key: writing a file again (a takeover, a repost)
// leaves one row, the last written.
type SQLite struct {
	db *sql.DB
}

const sqliteSchema = `CREATE TABLE IF NOT EXISTS binaries (
    key      TEXT    PRIMARY KEY,
    grp      TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    subject  TEXT    NOT NULL,
    poster   TEXT    NOT NULL,
    posted   TEXT    NOT NULL,
    parts    INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    segments TEXT    NOT NULL
) STRICT`

// OpenSQLite opens (creating) the database at path.
func OpenSQLite(path string) (*SQLite, error) {
	if path == "" {
		return nil, errors.New("binaries: sqlite: no file named (sqlite:FILE)")
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(sqliteSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("binaries: sqlite %s: %w", path, err)
	}
	return &SQLite{db: db}, nil
}

// Write upserts files in one transaction.
func (s *SQLite) Write(ctx context.Context, files []File) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, f := range files {
		segs, err := json.Marshal(f.Segments)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO binaries (key, grp, name, subject, poster, posted, parts, bytes, segments)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
			ON CONFLICT (key) DO UPDATE SET grp = ?2, name = ?3, subject = ?4, poster = ?5, posted = ?6, parts = ?7, bytes = ?8, segments = ?9`,
			f.Key, f.Group, f.Name, f.Subject, f.Poster, f.Posted, f.Parts, f.Bytes, string(segs)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Files reads every row back, by key.
func (s *SQLite) Files(ctx context.Context) ([]File, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT key, grp, name, subject, poster, posted, parts, bytes, segments FROM binaries ORDER BY key`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []File
	for rows.Next() {
		var f File
		var segs string
		if err := rows.Scan(&f.Key, &f.Group, &f.Name, &f.Subject, &f.Poster, &f.Posted, &f.Parts, &f.Bytes, &segs); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(segs), &f.Segments); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

// ReadJSONL reads a JSON-lines output back, the last line of each key
// winning, as a map by key.
func ReadJSONL(r io.Reader) (map[string]File, error) {
	out := map[string]File{}
	dec := json.NewDecoder(r)
	for {
		var f File
		err := dec.Decode(&f)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out[f.Key] = f
	}
}
