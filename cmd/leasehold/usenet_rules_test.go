package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestUsenetWorkerRules: the node's rules, put with `admin rules put`,
// reach the Usenet worker with its lease: a group's expression names the
// releases of its posts, and the blacklist skips a poster. Rules whose
// expression does not compile, and a --release-window under a second,
// are usage errors (exit 2) before anything is sent or opened.
func TestUsenetWorkerRules(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"usenet":{"groups":{"alt.binaries.x":{"release":"(?P<release>["}}}}`), 0o644)
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"admin", "--url", "http://127.0.0.1:1", "--token", "x", "rules", "put", bad}, &stderr, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(err.Error(), `groups "alt.binaries.x" release`) {
		t.Errorf("rules put of an expression that does not compile: exit %d, %v", code, err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	stderr.Reset()
	err = runWorker(context.Background(), []string{"--token", "t", "--source", "nntp://127.0.0.1:1", "--out", out, "--release-window", "0s"}, &stderr, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "--release-window") {
		t.Errorf("--release-window 0s: exit %d, %q", code, stderr.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--release-window 0s: --out made before the error (%v)", err)
	}

	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	group := fmt.Sprintf("alt.binaries.lh.wire.rules%d", time.Now().UnixNano())
	if err := s.NewGroups(ctx, group); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	var arts []usenettest.Article
	for i, name := range []string{"8f3a2c91", "0b7d11e4", "c94e03aa"} {
		f := usenettest.File{Name: name, Data: bytes.Repeat([]byte(name), 30)}
		arts = append(arts, usenettest.YEncParts(group, usenettest.Alice, f, 200, func(p, parts int) string {
			return fmt.Sprintf("Show.Name.S01E0%d - %s yEnc (%d/%d)", 1+i/2, name, p, parts)
		})...)
	}
	arts = append(arts, usenettest.YEncArticles(group, "spam <s@spam.example>", "", []usenettest.File{{Name: "spam.rar", Data: []byte("spam")}}, 200)...)
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}

	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	rules := filepath.Join(t.TempDir(), "rules.json")
	os.WriteFile(rules, []byte(`{"usenet":{"groups":{"`+group+`":{"release":"^(?P<release>\\S+) - ","file":" - (?P<name>\\S+) yEnc"}},
		"blacklist":{"posters":["@spam\\.example>$"]}}}`), 0o644)
	if got := admin(t, n, "rules", "put", rules); !strings.Contains(got, "stored") {
		t.Fatalf("rules put: %q", got)
	}
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	admin(t, n, "groups", "create", group, "--kind", "nntp", "--range-size", "5")
	c := client.New(n.URL, n.AdminToken)
	workUntil(t, ctx, "rules", caughtUp(t, ctx, c, group, int64(len(arts))),
		"--url", n.URL, "--token", token, "--source", "nntp://"+s.Addr, "--out", out, "--capacity", "1", "--watermark-every", "200ms")
	recs := readRecords(t, out)
	got := map[string]int{}
	for _, r := range recs.Releases {
		got[r.Name] = r.Files
	}
	if fmt.Sprint(got) != "map[Show.Name.S01E01:2 Show.Name.S01E02:1]" {
		t.Errorf("releases (name: files) %v; want Show.Name.S01E01 of 2 files and S01E02 of 1, nothing of the blacklisted poster", got)
	}
	for _, f := range recs.Files {
		if len(f.Name) != 8 || !f.Complete {
			t.Errorf("file %q (complete %v): not named by the group's expression", f.Name, f.Complete)
		}
	}
}

// readRecords reads the JSON-lines records a worker wrote to path.
func readRecords(t *testing.T, path string) binaries.Records {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := binaries.ReadJSONL(f)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
