package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// plantBackdoor is the review's sixth finding done to the backup in dir:
// a node "evil" whose token the attacker knows, and a trigger that puts
// it back when an operator deletes it; the manifest's sum and size of
// the catalog are rewritten to match, as anyone holding the backup can.
func plantBackdoor(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, leasehold.BackupCatalogName)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte("lhn_attacker_known_token"))
	for _, q := range []string{
		`INSERT INTO nodes (name, token_hash, priority_min, priority_max, capacity, created_at) VALUES ('evil', X'` + hex.EncodeToString(hash[:]) + `', -1000, 1000, 1, 0)`,
		`CREATE TRIGGER keep_evil AFTER DELETE ON nodes WHEN OLD.name = 'evil' BEGIN
			INSERT INTO nodes (name, token_hash, priority_min, priority_max, capacity, created_at) VALUES ('evil', OLD.token_hash, -1000, 1000, 1, 0); END`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := mustManifest(t, dir)
	sum := sha256.Sum256(b)
	m.Files[0].Size, m.Files[0].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
	out, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, leasehold.BackupManifestName), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeKey writes a signing key file.
func writeKey(t *testing.T, key string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup.key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoreTrustsNothing: restore refuses a backup whose catalog carries
// a trigger leasehold does not make, even with its manifest's sums made to
// match, and a signed backup changed since, signed otherwise or not
// signed at all when a verify key is given; each refusal leaves the
// target empty. A signed backup restores under its key.
func TestRestoreTrustsNothing(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	seedCatalog(t, n, 2)
	key := writeKey(t, "backup-signing-key-0123456789")
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := operatorRun(t, n, runBackup, dir, "--quiet", "--sign-key-file", key); err != nil {
		t.Fatalf("signed backup: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, leasehold.BackupSignatureName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signature: %v, %v; want a 0600 %s", fi, err, leasehold.BackupSignatureName)
	}
	restore := func(t *testing.T, backup string, args ...string) (string, error) {
		t.Helper()
		target := filepath.Join(t.TempDir(), "restored")
		var so, se bytes.Buffer
		err := runRestore(context.Background(), append(append([]string{"--quiet", "--data", target}, args...), backup), &so, &se)
		return target, err
	}
	refused := func(t *testing.T, target string, err error, says string) {
		t.Helper()
		if leasehold.KindOf(err) != leasehold.KindUnprocessable || !strings.Contains(err.Error(), says) {
			t.Fatalf("restore: %v, want unprocessable naming %q", err, says)
		}
		entries, _ := os.ReadDir(target)
		if len(entries) != 0 {
			t.Fatalf("a refused restore left %d entries in the target", len(entries))
		}
	}

	t.Run("TriggerOnNodes", func(t *testing.T) {
		bad := copyDir(t, dir)
		os.Remove(filepath.Join(bad, leasehold.BackupSignatureName))
		plantBackdoor(t, bad)
		target, err := restore(t, bad)
		refused(t, target, err, "trigger keep_evil on nodes")
	})
	t.Run("TamperedSigned", func(t *testing.T) {
		bad := copyDir(t, dir)
		plantBackdoor(t, bad)
		target, err := restore(t, bad, "--verify-key-file", key)
		refused(t, target, err, "signature does not match")
	})
	t.Run("Unsigned", func(t *testing.T) {
		bad := copyDir(t, dir)
		os.Remove(filepath.Join(bad, leasehold.BackupSignatureName))
		target, err := restore(t, bad, "--verify-key-file", key)
		refused(t, target, err, "not signed")
	})
	t.Run("OtherKey", func(t *testing.T) {
		target, err := restore(t, dir, "--verify-key-file", writeKey(t, "another-key-0123456789abcdef"))
		refused(t, target, err, "signature does not match")
	})
	t.Run("ShortKey", func(t *testing.T) {
		var se bytes.Buffer
		err := run(context.Background(), []string{"restore", "--verify-key-file", writeKey(t, "short"), dir}, io.Discard, &se)
		if code := exitCode(err, &se); code != 2 || !strings.Contains(se.String(), "at least 16") {
			t.Fatalf("a short verify key: exit %d, %q", code, se.String())
		}
	})
	t.Run("Signed", func(t *testing.T) {
		target, err := restore(t, dir, "--verify-key-file", key)
		if err != nil {
			t.Fatalf("restore of a signed backup under its key: %v", err)
		}
		if _, err := os.Stat(filepath.Join(target, leasehold.BackupCatalogName)); err != nil {
			t.Fatal(err)
		}
	})
}
