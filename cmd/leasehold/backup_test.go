package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
)

// catalogRows reads every row of every table of the catalog at path,
// read-only, as text: table name → rows in primary-key order.
func catalogRows(t *testing.T, path string) map[string][]string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables []string
	rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	out := map[string][]string{}
	for _, tb := range tables {
		rs, err := db.Query(`SELECT * FROM "` + tb + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rs.Columns()
		for rs.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[tb] = append(out[tb], fmt.Sprintf("%v", vals))
		}
		rs.Close()
		slices.Sort(out[tb])
	}
	if len(tables) < 5 {
		t.Fatalf("%s has only tables %v", path, tables)
	}
	return out
}

// seedCatalog gives node n groups planned and leased, a worker node, a
// finished range and window snapshots, so most tables have rows.
func seedCatalog(t *testing.T, n *nodetest.Node, groups int) {
	t.Helper()
	ctx := context.Background()
	c := client.New(n.URL, n.AdminToken)
	for i := range groups {
		name := fmt.Sprintf("alt.backup.%d", i)
		admin(t, n, "groups", "create", name, "--range-size", "100")
		admin(t, n, "groups", "tail", name, "1000")
		if i%2 == 0 {
			body := gzipped(t, bytes.Repeat([]byte(name), 1000))
			if _, err := c.PutGroupSnapshot(ctx, name, 1, bytes.NewReader(body), client.SnapshotUpload{Gzip: true, Force: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tok := strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q"))
	w := client.New(n.URL, tok)
	l, err := w.Lease(ctx)
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	r, err := w.Next(ctx, l.Group.ID, l.Fence)
	if err != nil || r == nil {
		t.Fatalf("next: %v %v", r, err)
	}
	if _, err := w.Finish(ctx, r.ID, l.Fence, 100); err != nil {
		t.Fatal(err)
	}
}

var noWindow = regexp.MustCompile(`snapshot\s+none`)

func TestBackupRestore(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	seedCatalog(t, n, 6)
	dir := filepath.Join(t.TempDir(), "backup")
	out, err := operatorRun(t, n, runBackup, dir, "--quiet")
	if err != nil || !strings.Contains(out, "3 window snapshots") {
		t.Fatalf("backup: %q, %v", out, err)
	}
	n.Stop()
	if _, err := os.Stat(filepath.Join(dir, "admin.token")); err == nil {
		t.Errorf("the backup holds the admin token")
	}
	entries, _ := os.ReadDir(n.DataDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "backup-") {
			t.Errorf("the node left %s in its data dir", e.Name())
		}
	}

	data := filepath.Join(t.TempDir(), "restored")
	var so, se bytes.Buffer
	if err := runRestore(context.Background(), []string{"--data", data, dir}, &so, &se); err != nil {
		t.Fatalf("restore: %v\n%s", err, se.String())
	}
	got, want := catalogRows(t, filepath.Join(data, "catalog.db")), catalogRows(t, filepath.Join(n.DataDir, "catalog.db"))
	// The restored catalog has no identity: the node makes a new one, so
	// a fleet never mistakes its new events for the old ones.
	if len(got["catalog"]) != 0 || len(want["catalog"]) != 1 {
		t.Errorf("identity: restored %q, the node's %q; want none restored", got["catalog"], want["catalog"])
	}
	delete(got, "catalog")
	delete(want, "catalog")
	for tb, rows := range want {
		if !slices.Equal(got[tb], rows) {
			t.Errorf("table %s: restored %d rows, want %d:\n got %q\nwant %q", tb, len(got[tb]), len(rows), got[tb], rows)
		}
	}
	if len(got) != len(want) {
		t.Errorf("restored %d tables, want %d", len(got), len(want))
	}
	for _, f := range mustManifest(t, dir).Files[1:] {
		a, _ := os.ReadFile(filepath.Join(n.DataDir, f.Path))
		b, _ := os.ReadFile(filepath.Join(data, f.Path))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: restored %d bytes, the node's %d, different", f.Path, len(b), len(a))
		}
	}

	// The restored node starts, with a new admin token, and serves the
	// same groups with their windows.
	r := nodetest.Start(t, nodetest.Options{DataDir: data})
	if r.AdminToken == n.AdminToken {
		t.Errorf("the restored node has the old admin token")
	}
	for i := range 6 {
		if out := admin(t, r, "groups", "show", fmt.Sprintf("alt.backup.%d", i)); noWindow.MatchString(out) != (i%2 == 1) {
			t.Errorf("group %d after restore: %s", i, out)
		}
	}

	t.Run("NotEmpty", func(t *testing.T) {
		err := runRestore(context.Background(), []string{"--data", data, dir}, &so, &se)
		if leasehold.KindOf(err) != leasehold.KindConflict || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("restore onto a node's data dir: %v", err)
		}
	})
	t.Run("Damaged", func(t *testing.T) {
		bad := copyDir(t, dir)
		f := filepath.Join(bad, mustManifest(t, bad).Files[1].Path)
		b, _ := os.ReadFile(f)
		b[len(b)/2] ^= 1
		os.WriteFile(f, b, 0o600)
		target := filepath.Join(t.TempDir(), "d")
		err := runRestore(context.Background(), []string{"--data", target, bad}, &so, &se)
		if leasehold.KindOf(err) != leasehold.KindUnprocessable || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("restore of a damaged backup: %v", err)
		}
		if _, err := os.Stat(target); err == nil {
			t.Errorf("a refused restore made %s", target)
		}
	})
	t.Run("Unfinished", func(t *testing.T) {
		bad := copyDir(t, dir)
		os.Remove(filepath.Join(bad, leasehold.BackupManifestName))
		err := runRestore(context.Background(), []string{"--data", filepath.Join(t.TempDir(), "d"), bad}, &so, &se)
		if err == nil || !strings.Contains(err.Error(), "did not finish") {
			t.Fatalf("restore without a manifest: %v", err)
		}
	})
	t.Run("BackupIntoNonEmpty", func(t *testing.T) {
		_, err := operatorRun(t, r, runBackup, dir, "--quiet")
		if leasehold.KindOf(err) != leasehold.KindConflict {
			t.Fatalf("backup into a backup: %v", err)
		}
		if m := mustManifest(t, dir); m.CatalogID == "" {
			t.Fatal("the old backup was touched")
		}
	})
}

// TestBackupUnderLoad takes backups while an operator keeps replacing
// window snapshots (whose old files the node removes): every backup
// restores to a node that serves each group's window whole, and that
// window is the catalog of one moment during the backup: no older than the
// last upload acknowledged before it began.
func TestBackupUnderLoad(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	const groups = 24
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := client.New(n.URL, n.AdminToken)
	for i := range groups {
		if _, _, err := c.PutGroup(ctx, fmt.Sprintf("alt.load.%d", i), client.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each upload's body names it (the window "i"), and each group's
	// acknowledged uploads are kept in order: a backup must hold, for
	// every group, a window acknowledged no earlier than the last one
	// acknowledged before the backup began (acknowledged means durable, and
	// the backup is the catalog at one moment), and sent before it ended.
	var mu sync.Mutex
	acked := map[string][]int{}
	sent := map[string][]int{}
	body := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("window %d;", i)), 2000) }
	var wg sync.WaitGroup
	var uploads atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i += 2 {
				name := fmt.Sprintf("alt.load.%d", i%groups)
				mu.Lock()
				sent[name] = append(sent[name], i)
				mu.Unlock()
				if _, err := c.PutGroupSnapshot(ctx, name, 1, bytes.NewReader(gzipped(t, body(i))), client.SnapshotUpload{Gzip: true, Force: true}); err == nil {
					mu.Lock()
					acked[name] = append(acked[name], i)
					mu.Unlock()
					uploads.Add(1)
				}
			}
		}()
	}
	// Every group has a window before the first backup.
	poll.Until(t, 30*time.Second, "a window of every group", func() error {
		if n := uploads.Load(); n < 2*groups {
			return fmt.Errorf("only %d uploads", n)
		}
		return nil
	})
	for b := range 5 {
		mu.Lock()
		floor := map[string]int{}
		for g, is := range acked {
			floor[g] = is[len(is)-1]
		}
		mu.Unlock()
		dir := filepath.Join(t.TempDir(), fmt.Sprint(b))
		if _, err := operatorRun(t, n, runBackup, dir, "--quiet"); err != nil {
			t.Fatalf("backup %d under load (%d uploads so far): %v", b, uploads.Load(), err)
		}
		mu.Lock()
		ceiling := map[string][]int{}
		for g, is := range sent {
			ceiling[g] = slices.Clone(is)
		}
		mu.Unlock()
		data := filepath.Join(t.TempDir(), "data")
		var so, se bytes.Buffer
		if err := runRestore(ctx, []string{"--data", data, dir}, &so, &se); err != nil {
			t.Fatalf("restore of backup %d: %v", b, err)
		}
		// The restored node serves, for every group, a window between the
		// floor and what had been sent when the backup ended, whole (its
		// digest checked as it is read).
		r := nodetest.Start(t, nodetest.Options{DataDir: data})
		rc := client.New(r.URL, r.AdminToken)
		for g := range groups {
			name := fmt.Sprintf("alt.load.%d", g)
			sr, err := rc.GetGroupSnapshot(ctx, name, 0)
			if err != nil || sr == nil {
				t.Fatalf("backup %d: group %s's window after the restore: %v, %v", b, name, sr, err)
			}
			zr, err := gzip.NewReader(sr)
			if err != nil {
				t.Fatalf("backup %d: group %s's window: %v", b, name, err)
			}
			got, err := io.ReadAll(zr)
			sr.Close()
			if err != nil {
				t.Fatalf("backup %d: group %s's window: %v", b, name, err)
			}
			var i int
			if _, err := fmt.Sscanf(string(got), "window %d;", &i); err != nil || !bytes.Equal(got, body(i)) {
				t.Fatalf("backup %d: group %s's window is no upload's (%d bytes)", b, name, len(got))
			}
			at := slices.Index(ceiling[name], i)
			if at < 0 || at < slices.Index(ceiling[name], floor[name]) {
				t.Errorf("backup %d: group %s holds window %d; the last acknowledged before the backup began was %d", b, name, i, floor[name])
			}
		}
		r.Stop()
	}
	cancel()
	wg.Wait()
	t.Logf("%d uploads during the backups", uploads.Load())
}

func mustManifest(t *testing.T, dir string) leasehold.BackupManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, leasehold.BackupManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m leasehold.BackupManifest
	if err := jsonUnmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
