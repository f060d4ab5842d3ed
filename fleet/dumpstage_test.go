package fleet

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/store"
)

// stagedSmall makes staged files and their folds small, so a test of a
// few hundred groups has several files and several writes a file.
func stagedSmall(t *testing.T) {
	groups, ranges, fold := stageGroups, stageRanges, stageFoldGroups
	stageGroups, stageRanges, stageFoldGroups = 150, 600, 40
	t.Cleanup(func() { stageGroups, stageRanges, stageFoldGroups = groups, ranges, fold })
}

// stagedFolded counts the groups folded from staged files until the test
// ends.
func stagedFolded(t *testing.T) *int64 {
	var n int64
	stageFoldHook = func(folded int64) { n++ }
	t.Cleanup(func() { stageFoldHook = nil })
	return &n
}

// partRows is every row n holds of origin's part, by name: groups with
// their leases and peer rows, ranges, the origin's worker nodes, its peer
// row and the tallies, without the columns a fold sets from its own
// clock (free_since, updated_at) or ids.
func partRows(t *testing.T, n *dumpNode, origin string) []string {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(n.dir, "catalog.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var out []string
	for _, q := range []string{
		`SELECT g.name, g.priority, g.active, g.range_size, g.start_id, g.tail_end, g.history_floor, g.urgent_tail, g.urgent_hist, g.held,
			g.created_at, g.owned, g.claim_rev, g.quarantine_error, g.quarantine_node, g.quarantine_at, g.marks_low, g.marks_high, g.marks_at,
			g.kind, g.source_error, g.source_error_node, g.source_error_at, g.source_errors, l.node_id, l.fence, p.holder, p.fence,
			p.leased_at, p.heartbeat_at, p.snapshot_next, p.snapshot_size, p.snapshot_sha256, p.snapshot_at, p.ranges_done, p.headers
		 FROM groups g JOIN group_leases l ON l.group_id = g.id JOIN peer_groups p ON p.group_id = g.id WHERE p.origin = ?1 ORDER BY g.name`,
		`SELECT g.name, r.start_id, r.end_id, r.next_id, r.status, r.priority, r.node_id, r.attempts, r.rule_version, r.headers,
			r.updated_at, r.last_error, r.last_error_at
		 FROM ranges r JOIN groups g ON g.id = r.group_id JOIN peer_groups p ON p.group_id = g.id WHERE p.origin = ?1 ORDER BY g.name, r.start_id`,
		`SELECT name, priority_min, priority_max, capacity, paused, held, last_seen_at FROM peer_nodes WHERE origin = ?1 ORDER BY name`,
		`SELECT name, catalog_id, rebuilds FROM peers WHERE name = ?1`,
		`SELECT kind, state, n FROM tallies ORDER BY 1, 2`,
	} {
		rows, err := raw.Query(q, origin)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%v", vals))
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// samePart fails the test where b's and c's copies of origin's part differ.
func samePart(t *testing.T, b, c *dumpNode, origin string) {
	t.Helper()
	got, want := partRows(t, b, origin), partRows(t, c, origin)
	if len(want) < 10 {
		t.Fatalf("%s holds %d rows of %s", c.name, len(want), origin)
	}
	if slices.Equal(got, want) {
		return
	}
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("%s's copy of %s differs from %s's at row %d of %d:\n%s: %s\n%s: %s", b.name, origin, c.name, i, len(want), b.name, g, c.name, w)
		}
	}
}

// stagedLeft lists the staged files left beside n's catalog.
func stagedLeft(t *testing.T, n *dumpNode) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(n.db.StageDir(), "*"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// stagedOriginNode is node-a with a worker, a group of 500 ranges (three
// done, its lease released) and 400 groups of two ranges from the bulk
// path, served on url.
func stagedOriginNode(t *testing.T, url string) *dumpNode {
	t.Helper()
	a := dumpOpen(t, "node-a", t.TempDir())
	dumpWork(t, a, "work", 10, 5000, 3)
	if err := a.db.BulkGroups(context.Background(), "g.", 400, 100, 2); err != nil {
		t.Fatal(err)
	}
	dumpServe(t, dumpConn(t, url), a)
	return a
}

// TestStagedRebuildAsJSON: a part rebuilt from a staged dump (several
// files, several writes a file) equals the origin's state and, row for
// row, the part rebuilt from the JSON dump a node of the build before
// asks for; rebuilt again over itself (every group known), it is still
// the same; no staged file is left on either side.
func TestStagedRebuildAsJSON(t *testing.T) {
	stagedSmall(t)
	folded := stagedFolded(t)
	ctx := context.Background()
	s := natstest.Server(t)
	a := stagedOriginNode(t, s.ClientURL())
	nc := dumpConn(t, s.ClientURL())
	b := dumpOpen(t, "node-b", t.TempDir())
	c := dumpOpen(t, "node-c", t.TempDir())
	if err := Rebuild(ctx, nc, b.db, "node-a", 5); err != nil {
		t.Fatal(err)
	}
	if *folded < 400/40 {
		t.Fatalf("%d writes of staged groups: the dump was not staged", *folded)
	}
	*folded = 0
	if err := rebuildAsking(ctx, nc, c.db, "node-a", 5, memoryKeyring(nil), 0); err != nil {
		t.Fatal(err)
	}
	if *folded != 0 {
		t.Fatal("a JSON dump asked for was staged")
	}
	if diffs := foldDiff(t, a, b, true); len(diffs) > 0 {
		t.Fatalf("the staged rebuild differs from the origin: %v", diffs[:min(5, len(diffs))])
	}
	samePart(t, b, c, "node-a")
	if err := Rebuild(ctx, nc, b.db, "node-a", 5); err != nil {
		t.Fatal(err)
	}
	if err := rebuildAsking(ctx, nc, c.db, "node-a", 5, memoryKeyring(nil), 0); err != nil {
		t.Fatal(err)
	}
	samePart(t, b, c, "node-a")
	if left := append(stagedLeft(t, a), stagedLeft(t, b)...); len(left) > 0 {
		t.Fatalf("staged files left: %v", left)
	}
}

// TestStagedDumpNewerRefused: a staged dump of a newer format than this
// build reads, named so by its chunk or only by its file, is refused
// with an error that says so; nothing of it is folded and no file is
// left.
func TestStagedDumpNewerRefused(t *testing.T) {
	ctx := context.Background()
	s := natstest.Server(t)
	a := dumpOpen(t, "node-a", t.TempDir())
	if err := a.db.BulkGroups(ctx, "g.", 5, 100, 2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stage := func(name string, format int) []byte {
		path := filepath.Join(dir, name)
		if _, err := a.db.StageOwnGroups(ctx, path, 0, 100, 1000); err != nil {
			t.Fatal(err)
		}
		if format != store.StageFormat {
			raw, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, format)); err != nil {
				t.Fatal(err)
			}
			raw.Close()
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := dumpOpen(t, "node-b", t.TempDir())
	nc := dumpConn(t, s.ClientURL())
	for _, tc := range []struct {
		name       string
		file       []byte
		fileFormat int // as the chunk names it
	}{
		{"ChunkNewer", stage("chunk.db", store.StageFormat), store.StageFormat + 1},
		{"FileNewer", stage("file.db", store.StageFormat+1), store.StageFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			origin := dumpConn(t, s.ClientURL())
			sub, err := origin.Subscribe(DumpSubjectPrefix+"node-s", func(m *nats.Msg) {
				var req DumpRequest
				if json.Unmarshal(m.Data, &req) != nil || req.Stage < 1 {
					respondAs(m, "node-s", []byte(`{"seq":0,"last":true,"err":"not asked for a staged dump"}`))
					return
				}
				piece := &nats.Msg{Subject: m.Reply, Data: tc.file, Header: nats.Header{}}
				piece.Header.Set(headerDumpPiece, "0")
				ephemeralIdentity("node-s").SignMsg(piece)
				origin.PublishMsg(piece)
				sum := sha256.Sum256(tc.file)
				body, _ := json.Marshal(DumpChunk{Format: FormatVersion, Seq: 1, Stage: &DumpStage{Format: tc.fileFormat,
					Bytes: int64(len(tc.file)), SHA256: hex.EncodeToString(sum[:]), Groups: 5, Ranges: 10}})
				respondAs(m, "node-s", body)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			origin.Flush()
			err = Rebuild(ctx, nc, b.db, "node-s", 5)
			if !errors.Is(err, leasehold.ErrUnprocessable) || !strings.Contains(err.Error(), "newer than this build reads") {
				t.Fatalf("a staged dump of a newer format: %v, want unprocessable, newer than this build reads", err)
			}
			if _, err := b.db.GroupByName(ctx, "g.0"); !errors.Is(err, leasehold.ErrNotFound) {
				t.Fatalf("a group of the refused dump: %v", err)
			}
			if ps, _ := b.db.Peers(ctx); len(ps) != 0 {
				t.Fatalf("a refused dump recorded peers %+v", ps)
			}
			if left := stagedLeft(t, b); len(left) > 0 {
				t.Fatalf("staged files left: %v", left)
			}
		})
	}
}

// TestStagedJoinerKilledMidCopy: a joining node (a process of its own)
// is killed with SIGKILL in the middle of copying a staged dump: some of
// the origin's groups are in its catalog, no rebuild is recorded, its
// staged files are left. Opened again, its rebuild runs from the start
// and ends with the part equal to the origin's state and to a part
// rebuilt whole from the JSON dump, and no staged file left.
func TestStagedJoinerKilledMidCopy(t *testing.T) {
	stagedSmall(t)
	ctx := context.Background()
	s := natstest.Server(t)
	a := stagedOriginNode(t, s.ClientURL())
	bdir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStagedJoinerChild$")
	cmd.Env = append(os.Environ(), "LEASEHOLD_STAGED_CHILD="+bdir+" "+s.ClientURL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	said := make(chan string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if lines = append(lines, sc.Text()); sc.Text() == "mid-copy" {
				said <- ""
				return
			}
		}
		said <- strings.Join(lines, "\n")
	}()
	select {
	case got := <-said:
		if got != "" {
			t.Fatalf("the joining node ended before its copy was in the middle:\n%s", got)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the joining node never reached the middle of its copy")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	b := dumpOpen(t, "node-b", bdir)
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(bdir, "catalog.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var copied, peers int
	if err := raw.QueryRow(`SELECT count(*) FROM peer_groups WHERE origin = 'node-a'`).Scan(&copied); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow(`SELECT count(*) FROM peers WHERE name = 'node-a'`).Scan(&peers); err != nil {
		t.Fatal(err)
	}
	if copied == 0 || copied >= 401 || peers != 0 {
		t.Fatalf("killed mid-copy: %d of 401 groups copied, %d peer rows, want some, not all, and none", copied, peers)
	}
	if len(stagedLeft(t, b)) == 0 {
		t.Fatal("no staged file left by the killed copy")
	}

	nc := dumpConn(t, s.ClientURL())
	if err := Rebuild(ctx, nc, b.db, "node-a", 5); err != nil {
		t.Fatalf("the rebuild started again: %v", err)
	}
	if diffs := foldDiff(t, a, b, true); len(diffs) > 0 {
		t.Fatalf("the rebuild started again differs from the origin: %v", diffs[:min(5, len(diffs))])
	}
	c := dumpOpen(t, "node-c", t.TempDir())
	if err := rebuildAsking(ctx, nc, c.db, "node-a", 5, memoryKeyring(nil), 0); err != nil {
		t.Fatal(err)
	}
	samePart(t, b, c, "node-a")
	if left := stagedLeft(t, b); len(left) > 0 {
		t.Fatalf("staged files left: %v", left)
	}
}

// TestStagedJoinerChild is the joining node TestStagedJoinerKilledMidCopy
// kills: it rebuilds node-a's part into the catalog in the directory
// LEASEHOLD_STAGED_CHILD names and, some way into the copy, says
// "mid-copy" and waits to be killed.
func TestStagedJoinerChild(t *testing.T) {
	dir, url, ok := strings.Cut(os.Getenv("LEASEHOLD_STAGED_CHILD"), " ")
	if !ok {
		t.Skip("the joining node of TestStagedJoinerKilledMidCopy")
	}
	stagedSmall(t)
	b := dumpOpen(t, "node-b", dir)
	stageFoldHook = func(folded int64) {
		if folded >= 200 {
			fmt.Println("mid-copy")
			select {}
		}
	}
	err := Rebuild(context.Background(), dumpConn(t, url), b.db, "node-a", 5)
	t.Fatalf("the rebuild ended (%v) before the copy was killed", err)
}

// TestStagedFilesLeftRemovedAtJoin: staged files a process ended mid-dump
// or mid-copy left beside the catalog, among them one of an origin no
// rebuild asks for again, are gone once the node has joined its fleet.
func TestStagedFilesLeftRemovedAtJoin(t *testing.T) {
	s := natstest.Server(t)
	dir := t.TempDir()
	acfg := appliance.Config{DataDir: dir, LeaseTTL: time.Minute, Logger: discard}
	db, err := appliance.OpenCatalog(acfg)
	if err != nil {
		t.Fatal(err)
	}
	stage := db.StageDir()
	db.Close()
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dump-0123456789abcdef.db", "node-gone-0123456789abcdef-1.db"} {
		if err := os.WriteFile(filepath.Join(stage, name), []byte("part of a staged file"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	app, _, f, err := joinNode(context.Background(), acfg, Config{Name: "node-a", NATS: s.ClientURL(), ClaimTTL: fleetTTL, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	defer f.Stop()
	if left, _ := filepath.Glob(filepath.Join(stage, "*")); len(left) > 0 {
		t.Fatalf("staged files left once joined: %v", left)
	}
}
