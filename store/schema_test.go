package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
)

// backupWith is a backup of a new catalog (with peer sync's indexes, as a
// fleet node's has) with the statements in tamper run on the copy, as an
// attacker holding the backup would.
func backupWith(t *testing.T, tamper ...string) string {
	t.Helper()
	ctx := context.Background()
	db := openTest(t, "", Options{Readers: 1})
	if _, err := db.PeerIndexes(ctx, true); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "catalog.db")
	if err := db.Backup(ctx, out); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", out)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range tamper {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return out
}

// TestInspectCatalogSchema: a backup's catalog is taken only with the
// schema this binary embeds (peer sync's indexes may be there or not);
// the review's backdoor, a trigger on nodes that re-inserts a deleted
// node, is refused, as are a view, a changed index and a dropped one, each
// named in the error.
func TestInspectCatalogSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := InspectCatalog(ctx, backupWith(t)); err != nil {
		t.Fatalf("an untouched backup: %v", err)
	}
	if _, err := InspectCatalog(ctx, backupWith(t, `DROP INDEX ranges_group_updated`)); err != nil {
		t.Fatalf("a backup of a node alone (no peer sync indexes): %v", err)
	}
	for _, c := range []struct{ name, ddl, says string }{
		{"TriggerOnNodes", `CREATE TRIGGER keep_evil AFTER DELETE ON nodes WHEN OLD.name = 'evil' BEGIN
			INSERT INTO nodes (name, token_hash, created_at) VALUES ('evil', OLD.token_hash, 0); END`, "trigger keep_evil on nodes is not leasehold's"},
		{"View", `CREATE VIEW v AS SELECT * FROM nodes`, "view v"},
		{"ChangedIndex", `DROP INDEX ranges_failed; CREATE INDEX ranges_failed ON ranges (updated_at)`, "index ranges_failed differs"},
		{"DroppedIndex", `DROP INDEX ranges_planned`, "index ranges_planned is missing"},
		{"ChangedPeerIndex", `DROP INDEX ranges_group_updated; CREATE INDEX ranges_group_updated ON ranges (group_id)`, "index ranges_group_updated differs"},
		{"ExtraTable", `CREATE TABLE stash (x TEXT)`, "table stash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := InspectCatalog(ctx, backupWith(t, c.ddl))
			if leasehold.KindOf(err) != leasehold.KindUnprocessable || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want unprocessable naming %q", err, c.says)
			}
		})
	}
}

// TestCheckSchemaMigrated: an older catalog (version 1, the first
// released schema) migrated by CheckSchema passes, so a backup taken
// before an upgrade still restores; the same with an added trigger does
// not.
func TestCheckSchemaMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if err := CheckSchema(ctx, migrateFrom(t, "testdata/schema-v1.sql", 1)); err != nil {
		t.Fatalf("a version 1 catalog: %v", err)
	}
	evil := migrateFrom(t, "testdata/schema-v1.sql", 1,
		`CREATE TRIGGER keep_evil AFTER DELETE ON nodes BEGIN SELECT 1; END`)
	if err := CheckSchema(ctx, evil); leasehold.KindOf(err) != leasehold.KindUnprocessable || !strings.Contains(err.Error(), "keep_evil") {
		t.Fatalf("a version 1 catalog with a trigger: %v, want unprocessable naming it", err)
	}
	// The live catalog a node migrated is the one its next backup copies:
	// InspectCatalog takes it as it is.
	migrated := openTest(t, migrateFrom(t, "testdata/schema-v1.sql", 1), Options{Readers: 1})
	out := filepath.Join(t.TempDir(), "b.db")
	if err := migrated.Backup(ctx, out); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectCatalog(ctx, out); err != nil {
		t.Fatalf("a backup of a migrated catalog: %v", err)
	}
}

// TestNormalizeDDL: layout and comments do not count; what is quoted does.
func TestNormalizeDDL(t *testing.T) {
	t.Parallel()
	a := normalizeDDL("CREATE INDEX x ON t (a, b) -- why\n WHERE a = 'x  y'")
	b := normalizeDDL("create index x on t(a,b)   where a='x  y' /* note */")
	if a != b {
		t.Errorf("%q != %q", a, b)
	}
	if c := normalizeDDL("CREATE INDEX x ON t (a, b) WHERE a = 'x y'"); c == a {
		t.Errorf("a string's spaces were not counted: %q", c)
	}
}
