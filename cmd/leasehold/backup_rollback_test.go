package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestRestoreRefusesRollback is the review's signed-backup rollback: a
// node's backups are numbered (1, then 2) in their signed manifests;
// once backup 2 is restored under the verify key, backup 1 put in its
// place is refused, saying how to allow it, with the target left empty;
// --allow-older restores it. The restored node's next backup goes on
// from the restored sequence.
func TestRestoreRefusesRollback(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	seedCatalog(t, n, 1)
	key := writeKey(t, "backup-signing-key-0123456789")
	older, newer := filepath.Join(t.TempDir(), "bk2"), filepath.Join(t.TempDir(), "bk4")
	for _, dir := range []string{older, newer} {
		if _, err := operatorRun(t, n, runBackup, dir, "--quiet", "--sign-key-file", key); err != nil {
			t.Fatalf("signed backup: %v", err)
		}
	}
	if a, b := mustManifest(t, older).Sequence, mustManifest(t, newer).Sequence; a < 1 || b <= a {
		t.Fatalf("backup sequences %d then %d, want rising from 1", a, b)
	}
	restore := func(backup string, args ...string) (string, string, error) {
		target := filepath.Join(t.TempDir(), "restored")
		var so, se bytes.Buffer
		err := runRestore(context.Background(), append(append([]string{"--quiet", "--data", target}, args...), backup), &so, &se)
		return target, se.String(), err
	}
	target, _, err := restore(newer, "--verify-key-file", key)
	if err != nil {
		t.Fatalf("restore of the newer backup: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, appliance.BackupSequenceFile)); err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Fatalf("the restored data dir's backup sequence: %q (%v), want 2", b, err)
	}

	// The newer backup's directory now holds the older one.
	swapped := copyDir(t, older)
	target, _, err = restore(swapped, "--verify-key-file", key)
	if !errors.Is(err, appliance.ErrOlderBackup) || !strings.Contains(err.Error(), "--allow-older") {
		t.Fatalf("restore of an older signed backup after a newer one: %v, want refused saying --allow-older", err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Fatalf("a refused rollback left %d entries in the target", len(entries))
	}
	if _, _, err := restore(swapped, "--verify-key-file", key, "--allow-older"); err != nil {
		t.Fatalf("restore --allow-older of the older backup: %v", err)
	}
	// The record stays at the newest: the older one is refused again.
	if _, _, err := restore(swapped, "--verify-key-file", key); !errors.Is(err, appliance.ErrOlderBackup) {
		t.Fatalf("after a rollback allowed once, the older backup again: %v, want refused", err)
	}
	if _, _, err := restore(newer, "--verify-key-file", key); err != nil {
		t.Fatalf("the newest backup again: %v", err)
	}
}
