package appliance

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log sink that the node's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDataFilesOwnerOnly: the catalog, its WAL and shared memory are
// 0600 and a data dir the node makes is 0700, whatever the umask lets
// through; a data dir open to others is named with its mode in a
// warning, and a catalog an older binary left 0644 is narrowed.
func TestDataFilesOwnerOnly(t *testing.T) {
	t.Parallel()
	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	open := func(dir string) (*Appliance, string) {
		t.Helper()
		var logs lockedBuffer
		app, err := Open(Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.Coordinator.RegisterNode(context.Background(), NodeSpec{Name: "w1"}); err != nil {
			t.Fatal(err)
		}
		return app, logs.String()
	}
	t.Run("Made", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		app, logs := open(dir)
		defer app.Close()
		if m := mode(dir); m != 0o700 {
			t.Errorf("data dir made %v, want 0700", m)
		}
		for _, f := range []string{"catalog.db", "catalog.db-wal", "catalog.db-shm"} {
			if m := mode(filepath.Join(dir, f)); m != 0o600 {
				t.Errorf("%s is %v, want 0600", f, m)
			}
		}
		if strings.Contains(logs, "open to other users") {
			t.Errorf("a 0700 data dir warned: %s", logs)
		}
	})
	t.Run("OpenToOthers", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// As an older binary left it: world-readable.
		if err := os.WriteFile(filepath.Join(dir, "catalog.db"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, "catalog.db"), 0o644); err != nil {
			t.Fatal(err)
		}
		app, logs := open(dir)
		defer app.Close()
		if !strings.Contains(logs, "open to other users") || !strings.Contains(logs, "mode=0755") {
			t.Errorf("no warning naming the mode of a 0755 data dir: %q", logs)
		}
		for _, f := range []string{"catalog.db", "catalog.db-wal", "catalog.db-shm"} {
			if m := mode(filepath.Join(dir, f)); m != 0o600 {
				t.Errorf("%s is %v, want 0600", f, m)
			}
		}
	})
}
