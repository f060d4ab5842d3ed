package newznab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/source/binaries"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// indexSchema is the shared index's tables as the worker's sink makes
// them (the sink's own migration replaces this once it is here).
const indexSchema = `
CREATE TABLE IF NOT EXISTS leasehold_index_schema (version integer NOT NULL);
INSERT INTO leasehold_index_schema VALUES (2);

CREATE TABLE files (
  key text PRIMARY KEY, release text NOT NULL, grp text NOT NULL, groups text[] NOT NULL,
  poster text NOT NULL, subject text NOT NULL, name text NOT NULL,
  file integer, files integer, parts integer NOT NULL, total integer,
  complete boolean NOT NULL, bytes bigint NOT NULL, posted timestamptz NOT NULL,
  lease_group text NOT NULL, fence bigint NOT NULL
);
CREATE INDEX ON files (release); CREATE INDEX ON files (grp); CREATE INDEX ON files (poster); CREATE INDEX ON files (posted);

CREATE TABLE releases (
  key text PRIMARY KEY, name text NOT NULL, poster text NOT NULL, grp text NOT NULL, groups text[] NOT NULL,
  files integer NOT NULL, total_files integer, complete_files integer NOT NULL, complete boolean NOT NULL,
  bytes bigint NOT NULL, posted timestamptz NOT NULL, nzb text,
  category integer NOT NULL DEFAULT 0,
  lease_group text NOT NULL, fence bigint NOT NULL
);
CREATE INDEX ON releases (grp); CREATE INDEX ON releases (poster); CREATE INDEX ON releases (posted DESC);
CREATE INDEX ON releases (category, posted DESC);
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE OR REPLACE FUNCTION leasehold_posted_day(timestamptz) RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS 'SELECT floor(extract(epoch FROM ($1 - timestamptz ''1970-01-01 00:00:00+00'')) / 86400)::integer';
` + releasesDayName + `;

CREATE TABLE segments (
  file text NOT NULL, number integer NOT NULL, article bigint NOT NULL,
  message_id text NOT NULL, bytes bigint NOT NULL,
  lease_group text NOT NULL, fence bigint NOT NULL,
  PRIMARY KEY (file, number)
);`

// testIndex makes a database with the index's tables and returns its
// URL and a connection to it (closed when the test ends).
func testIndex(t testing.TB) (string, *pgx.Conn) {
	t.Helper()
	url := pgtest.Database(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	if _, err := db.Exec(ctx, indexSchema); err != nil {
		t.Fatal(err)
	}
	return url, db
}

// writeRelease writes a release and its files with their segments, as
// the worker's sink does, its category by binaries.Category.
func writeRelease(t testing.TB, db *pgx.Conn, r binaries.Release, files []binaries.File) {
	t.Helper()
	ctx := context.Background()
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	posted, err := time.Parse(time.RFC3339, r.Posted)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(ctx, `INSERT INTO releases (key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, nzb, category, lease_group, fence)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$4,1)`,
		r.Key, r.Name, r.Poster, r.Group, r.Groups, r.Files, r.TotalFiles, r.CompleteFiles, r.Complete, r.Bytes, posted, r.NZB, binaries.Category(r.Name, names))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		posted, err := time.Parse(time.RFC3339, f.Posted)
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(ctx, `INSERT INTO files (key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted, lease_group, fence)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$3,1)`,
			f.Key, f.Release, f.Group, f.Groups, f.Poster, f.Subject, f.Name, f.File, f.Files, f.Parts, f.Total, f.Complete, f.Bytes, posted)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range f.Segments {
			_, err := db.Exec(ctx, `INSERT INTO segments (file, number, article, message_id, bytes, lease_group, fence) VALUES ($1,$2,$3,$4,$5,$6,1)`,
				f.Key, s.Number, s.Article, s.MessageID, s.Bytes, f.Group)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sampleRelease is a complete release of name in group with n files of
// two segments each, posted at posted.
func sampleRelease(key, name, group string, n int, posted time.Time) (binaries.Release, []binaries.File) {
	p := posted.UTC().Format(time.RFC3339)
	r := binaries.Release{Type: "release", Key: key, Name: name, Poster: "poster <p@example.org>", Group: group, Groups: []string{group},
		Files: n, TotalFiles: &n, CompleteFiles: n, Complete: true, Posted: p}
	var files []binaries.File
	for i := 1; i <= n; i++ {
		k, total := i, 2
		f := binaries.File{Type: "file", Key: fmt.Sprintf("%s-f%d", key, i), Release: key, Group: group, Groups: []string{group},
			Poster: r.Poster, Subject: fmt.Sprintf(`%s [%d/%d] - "%s.part%d.rar" yEnc (1/2)`, name, i, n, name, i), Name: fmt.Sprintf("%s.part%d.rar", name, i),
			File: &k, Files: &n, Parts: 2, Total: &total, Complete: true, Posted: p}
		for s := 1; s <= 2; s++ {
			f.Segments = append(f.Segments, binaries.Segment{Number: s, Article: int64(10*i + s), MessageID: fmt.Sprintf("<%s.%d.%d@example.org>", key, i, s), Bytes: 1000})
			f.Bytes += 1000
		}
		r.Bytes += f.Bytes
		files = append(files, f)
	}
	return r, files
}
