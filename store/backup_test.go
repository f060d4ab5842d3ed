package store

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestBackup copies a catalog with VACUUM INTO on a reader: the copy is
// whole and the same catalog, an existing file is refused, and the
// reader pool stays read-only after.
func TestBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{Readers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := filepath.Join(t.TempDir(), "b.db")
	if err := db.Backup(ctx, out); err != nil {
		t.Fatal(err)
	}
	cf, err := InspectCatalog(ctx, out)
	if err != nil || cf.CatalogID != db.CatalogID() || cf.SchemaVersion != leasehold.SchemaVersion {
		t.Fatalf("the copy: %+v, %v; want catalog %s at schema %d", cf, err, db.CatalogID(), leasehold.SchemaVersion)
	}
	if err := db.Backup(ctx, out); leasehold.KindOf(err) != leasehold.KindInvalid {
		t.Errorf("a backup onto an existing file: %v", err)
	}
	if _, err := db.r.ExecContext(ctx, `CREATE TABLE x (a INTEGER)`); err == nil {
		t.Errorf("the reader pool takes writes after a backup")
	}
}
