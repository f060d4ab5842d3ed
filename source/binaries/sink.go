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
// database (tables files, releases and segments, upserted),
// "postgres://…" (or "postgresql://…") for the shared PostgreSQL index
// (fenced, see Postgres), anything else a JSON-lines file appended to
// (one record a line).
func OpenSink(spec string) (interface {
	Sink
	io.Closer
}, error) {
	if IsPostgres(spec) {
		return OpenPostgres(context.Background(), spec)
	}
	if path, ok := strings.CutPrefix(spec, "sqlite:"); ok {
		return OpenSQLite(path)
	}
	return OpenJSONL(spec)
}

// JSONL appends records to a file, one JSON object a line. A record may
// be written again: readers take the last line of a key.
type JSONL struct {
	mu sync.Mutex
	f  *os.File
}

// OpenJSONL opens path for appending, creating it. A last line cut off by
// a crash is removed first, so every line stays whole.
func OpenJSONL(path string) (*JSONL, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
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

// Write appends the changed files and the release of each update, in one
// write, and syncs it.
func (j *JSONL) Write(_ context.Context, _ Lease, updates []Update) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, u := range updates {
		for _, f := range u.ChangedFiles() {
			if err := enc.Encode(&f); err != nil {
				return err
			}
		}
		if u.FilesOnly {
			continue // another group's window writes the release
		}
		if err := enc.Encode(&u.Release); err != nil {
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

// SQLite upserts records into the tables files, releases and segments of
// a SQLite database: one row a key (a segment's is its message id), the
// last written.
type SQLite struct {
	db *sql.DB
}

const sqliteSchema = `CREATE TABLE IF NOT EXISTS files (
    key      TEXT    PRIMARY KEY,
    release  TEXT    NOT NULL,
    grp      TEXT    NOT NULL,
    groups   TEXT    NOT NULL, -- JSON array
    poster   TEXT    NOT NULL,
    subject  TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    file     INTEGER,
    files    INTEGER,
    parts    INTEGER NOT NULL,
    total    INTEGER,
    complete INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    posted   TEXT    NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS files_grp ON files (grp);
CREATE INDEX IF NOT EXISTS files_poster ON files (poster);
CREATE INDEX IF NOT EXISTS files_posted ON files (posted);
CREATE INDEX IF NOT EXISTS files_release ON files (release);
CREATE TABLE IF NOT EXISTS releases (
    key            TEXT    PRIMARY KEY,
    name           TEXT    NOT NULL,
    poster         TEXT    NOT NULL,
    grp            TEXT    NOT NULL,
    groups         TEXT    NOT NULL, -- JSON array
    files          INTEGER NOT NULL,
    total_files    INTEGER,
    complete_files INTEGER NOT NULL,
    complete       INTEGER NOT NULL,
    bytes          INTEGER NOT NULL,
    posted         TEXT    NOT NULL,
    nzb            TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS releases_grp ON releases (grp);
CREATE INDEX IF NOT EXISTS releases_poster ON releases (poster);
CREATE INDEX IF NOT EXISTS releases_posted ON releases (posted);
CREATE TABLE IF NOT EXISTS segments (
    message_id TEXT    PRIMARY KEY,
    file       TEXT    NOT NULL,
    number     INTEGER NOT NULL,
    article    INTEGER NOT NULL,
    bytes      INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS segments_file ON segments (file, number);`

// OpenSQLite opens (creating) the database at path.
func OpenSQLite(path string) (*SQLite, error) {
	if path == "" {
		return nil, errors.New("binaries: sqlite: no file named (sqlite:FILE)")
	}
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("binaries: sqlite %s: %w", path, err)
	} else {
		f.Close()
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

// Write upserts the changed files with their segments (a file's old
// segments go: a lower copy may have won) and the releases, in one
// transaction.
func (s *SQLite) Write(ctx context.Context, _ Lease, updates []Update) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, u := range updates {
		for _, f := range u.ChangedFiles() {
			groups, _ := json.Marshal(f.Groups)
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO files (key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted)
				VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)`,
				f.Key, f.Release, f.Group, string(groups), f.Poster, f.Subject, f.Name, f.File, f.Files, f.Parts, f.Total, f.Complete, f.Bytes, f.Posted); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM segments WHERE file = ?1`, f.Key); err != nil {
				return err
			}
			for _, g := range f.Segments {
				if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO segments (message_id, file, number, article, bytes) VALUES (?1, ?2, ?3, ?4, ?5)`,
					g.MessageID, f.Key, g.Number, g.Article, g.Bytes); err != nil {
					return err
				}
			}
		}
		if u.FilesOnly {
			continue // another group's window writes the release
		}
		r := u.Release
		groups, _ := json.Marshal(r.Groups)
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO releases (key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, nzb)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`,
			r.Key, r.Name, r.Poster, r.Group, string(groups), r.Files, r.TotalFiles, r.CompleteFiles, r.Complete, r.Bytes, r.Posted, r.NZB); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Records reads every row back.
func (s *SQLite) Records(ctx context.Context) (Records, error) {
	out := Records{Files: map[string]File{}, Releases: map[string]Release{}}
	rows, err := s.db.QueryContext(ctx, `SELECT key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted FROM files`)
	if err != nil {
		return out, err
	}
	for rows.Next() {
		f := File{Type: "file"}
		var groups string
		if err := rows.Scan(&f.Key, &f.Release, &f.Group, &groups, &f.Poster, &f.Subject, &f.Name, &f.File, &f.Files, &f.Parts, &f.Total, &f.Complete, &f.Bytes, &f.Posted); err != nil {
			rows.Close()
			return out, err
		}
		json.Unmarshal([]byte(groups), &f.Groups)
		out.Files[f.Key] = f
	}
	rows.Close()
	rows, err = s.db.QueryContext(ctx, `SELECT message_id, file, number, article, bytes FROM segments ORDER BY file, number`)
	if err != nil {
		return out, err
	}
	for rows.Next() {
		var g Segment
		var key string
		if err := rows.Scan(&g.MessageID, &key, &g.Number, &g.Article, &g.Bytes); err != nil {
			rows.Close()
			return out, err
		}
		f := out.Files[key]
		f.Segments = append(f.Segments, g)
		out.Files[key] = f
	}
	rows.Close()
	rows, err = s.db.QueryContext(ctx, `SELECT key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, nzb FROM releases`)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		r := Release{Type: "release"}
		var groups string
		if err := rows.Scan(&r.Key, &r.Name, &r.Poster, &r.Group, &groups, &r.Files, &r.TotalFiles, &r.CompleteFiles, &r.Complete, &r.Bytes, &r.Posted, &r.NZB); err != nil {
			return out, err
		}
		json.Unmarshal([]byte(groups), &r.Groups)
		out.Releases[r.Key] = r
	}
	return out, rows.Err()
}

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

// Records are an output read back: the last record of each key.
type Records struct {
	Files    map[string]File
	Releases map[string]Release
}

// ReadJSONL reads a JSON-lines output back, the last line of each key
// winning.
func ReadJSONL(r io.Reader) (Records, error) {
	out := Records{Files: map[string]File{}, Releases: map[string]Release{}}
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return out, err
		}
		switch head.Type {
		case "file":
			var f File
			if err := json.Unmarshal(raw, &f); err != nil {
				return out, err
			}
			out.Files[f.Key] = f
		case "release":
			var rel Release
			if err := json.Unmarshal(raw, &rel); err != nil {
				return out, err
			}
			out.Releases[rel.Key] = rel
		default:
			return out, fmt.Errorf("binaries: a record of type %q", head.Type)
		}
	}
}
