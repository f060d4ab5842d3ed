package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io/fs"
	"net/url"
	"os"

	"github.com/leasehold/leasehold"
)

// Backup writes a consistent copy of the catalog to path, a file that must
// not exist yet, with VACUUM INTO: one read transaction, so the copy is the
// catalog as of one commit, compacted, with no WAL of its own. The file is
// fsynced before Backup returns. Errors: invalid (path exists), no space,
// unavailable, internal; on error no file is left at path.
//
// It runs on a connection of the reader pool, not the writer: in WAL mode
// a reader's transaction sees one commit and never blocks the writer, so
// the node keeps taking (and group-committing) writes for as long as the
// copy takes. On the writer, VACUUM INTO would hold every queued write
// behind it for the whole copy. The cost is that checkpoints cannot pass
// the copy's read mark while it runs, so the WAL grows by what is written
// meanwhile and is checkpointed after.
func (db *DB) Backup(ctx context.Context, path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return leasehold.Errorf(leasehold.KindInvalid, "backup of the catalog: %s exists already", path)
	}
	conn, err := db.r.Conn(ctx)
	if err != nil {
		return mapError(err, "backing up the catalog")
	}
	defer conn.Close()
	// The pool's connections are query_only, which refuses VACUUM INTO
	// (it writes, if only to another file). This connection is lifted for
	// the one statement and set back before it returns to the pool; the
	// catalog itself is only read.
	if _, err := conn.ExecContext(ctx, `PRAGMA query_only = 0`); err != nil {
		return mapError(err, "backing up the catalog")
	}
	_, err = conn.ExecContext(ctx, `VACUUM INTO ?`, path)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA query_only = 1`); rerr != nil {
		// Never hand a writable connection back to the readers.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		err = errors.Join(err, rerr)
	}
	if err != nil {
		os.Remove(path)
		return mapError(err, "backing up the catalog")
	}
	if err := syncFile(path); err != nil {
		os.Remove(path)
		return mapError(err, "backing up the catalog")
	}
	return nil
}

// CatalogFile is what InspectCatalog finds in a catalog file.
type CatalogFile struct {
	// SchemaVersion is the file's PRAGMA user_version.
	SchemaVersion int
	// CatalogID is the catalog's identity.
	CatalogID string
	// Snapshots are the window snapshots the catalog records for the
	// groups this node owns, each with the file it names.
	Snapshots []SnapshotFile
}

// SnapshotFile is a window snapshot a catalog records: its group, the
// sequence number its file is named from, and what the file must be.
type SnapshotFile struct {
	GroupID int64
	File    int64
	Size    int64
	SHA256  string
}

// InspectCatalog opens the catalog file at path read-only (a copy: a
// backup, or one being restored; never a catalog a node has open), checks
// it with PRAGMA quick_check, at this binary's schema version compares its
// schema with the embedded one, and reads its schema version, identity and
// recorded snapshots. Errors: not found, unavailable (newer schema than
// this binary's), unprocessable (not a whole catalog, or a schema that is
// not leasehold's), internal.
func InspectCatalog(ctx context.Context, path string) (CatalogFile, error) {
	var cf CatalogFile
	if _, err := os.Stat(path); err != nil {
		return cf, leasehold.Wrap(leasehold.KindNotFound, err, "%v", err)
	}
	// immutable=1: nothing else has the file open, so SQLite takes no locks
	// and writes no -shm or -wal beside it.
	// trusted_schema=OFF: whatever the file's schema holds runs no function
	// with side effects while it is looked at.
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&immutable=1&_pragma=trusted_schema(OFF)"
	d, err := sql.Open("sqlite", dsn)
	if err != nil {
		return cf, mapError(err, "opening "+path)
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	var check string
	if err := d.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return cf, leasehold.Wrap(leasehold.KindUnprocessable, err, "%s is not a whole leasehold catalog: %v", path, err)
	}
	if check != "ok" {
		return cf, leasehold.Errorf(leasehold.KindUnprocessable, "%s fails SQLite's quick_check: %s", path, check)
	}
	if err := d.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&cf.SchemaVersion); err != nil {
		return cf, mapError(err, "reading "+path)
	}
	switch {
	case cf.SchemaVersion > leasehold.SchemaVersion:
		return cf, leasehold.Errorf(leasehold.KindUnavailable,
			"%s has schema version %d, newer than this binary's %d: run a newer leasehold", path, cf.SchemaVersion, leasehold.SchemaVersion)
	case cf.SchemaVersion < 1:
		return cf, leasehold.Errorf(leasehold.KindUnprocessable, "%s is not a leasehold catalog (no schema version)", path)
	}
	// A catalog of this version must have the embedded schema as it is; an
	// older one is checked once migrated (CheckSchema), as it will be used.
	if cf.SchemaVersion == leasehold.SchemaVersion {
		if err := checkSchema(ctx, d, path); err != nil {
			return cf, err
		}
	}
	if err := d.QueryRowContext(ctx, `SELECT catalog_id FROM catalog WHERE id = 1`).Scan(&cf.CatalogID); err != nil {
		return cf, leasehold.Wrap(leasehold.KindUnprocessable, err, "%s is not a leasehold catalog: %v", path, err)
	}
	rows, err := d.QueryContext(ctx, `SELECT group_id, snapshot_file, snapshot_size, snapshot_sha256 FROM group_leases
		WHERE snapshot_file IS NOT NULL ORDER BY group_id`)
	if err != nil {
		return cf, mapError(err, "reading "+path)
	}
	defer rows.Close()
	for rows.Next() {
		var s SnapshotFile
		if err := rows.Scan(&s.GroupID, &s.File, &s.Size, &s.SHA256); err != nil {
			return cf, mapError(err, "reading "+path)
		}
		cf.Snapshots = append(cf.Snapshots, s)
	}
	return cf, mapError(rows.Err(), "reading "+path)
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Reidentify removes the identity of the catalog file at path (a copy
// being restored, never a catalog a node has open), so the node that opens
// it makes a new one. A restored catalog's outbox starts again below event
// ids its peers have seen: under its old identity its next events would
// share message ids with those, and the stream drops a repeated id as a
// duplicate. Errors: not found, internal.
func Reidentify(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err != nil {
		return leasehold.Wrap(leasehold.KindNotFound, err, "%v", err)
	}
	d, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=synchronous(FULL)")
	if err != nil {
		return mapError(err, "opening "+path)
	}
	defer d.Close()
	if _, err := d.ExecContext(ctx, `DELETE FROM catalog`); err != nil {
		return mapError(err, "giving "+path+" a new identity")
	}
	return mapError(d.Close(), "closing "+path)
}
