package store

import (
	"context"
	"path/filepath"
	"testing"
)

func TestBackupProbe(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := filepath.Join(t.TempDir(), "b.db")
	if err := db.Backup(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	cf, err := InspectCatalog(context.Background(), out)
	t.Logf("%+v %v", cf, err)
}
