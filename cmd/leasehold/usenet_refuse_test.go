package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestUsenetWorkerRefusedLeavesNothing: a Usenet worker that refuses to
// start (its node does not read nntp; the node refuses its token) leaves
// no --out file and no --nzb directory behind, while an output and an NZB
// directory that were there before are kept as they were.
func TestUsenetWorkerRefusedLeavesNothing(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "-q"))
	for _, c := range []struct{ name, token, out, want string }{
		{"wrong kind", token, "out.jsonl", "--kinds nntp"},
		{"wrong kind, sqlite", token, "sqlite:out.db", "--kinds nntp"},
		{"token refused", "not-a-token", "out.jsonl", ""},
	} {
		dir := t.TempDir()
		out := filepath.Join(dir, strings.TrimPrefix(c.out, "sqlite:"))
		if strings.HasPrefix(c.out, "sqlite:") {
			out = "sqlite:" + out
		}
		args := []string{"--url", n.URL, "--token", c.token, "--source", "nntp://127.0.0.1:1",
			"--out", out, "--nzb", filepath.Join(dir, "nzb", "deep")}
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		var log bytes.Buffer
		err := runWorker(ctx, args, &log, &log)
		stop()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want a refusal\n%s", c.name, err, log.String())
		}
		if left := entries(t, dir); len(left) != 0 {
			t.Errorf("%s: the refused worker left %v in its directory", c.name, left)
		}
	}

	// What was there before the start stays.
	dir := t.TempDir()
	out, nzb := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "nzb")
	if err := os.WriteFile(out, []byte("{\"kept\":true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(nzb, 0o700); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := runWorker(ctx, []string{"--url", n.URL, "--token", token, "--source", "nntp://127.0.0.1:1", "--out", out, "--nzb", nzb}, &log, &log); err == nil {
		t.Fatalf("the worker on a default node started\n%s", log.String())
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"nzb", "out.jsonl"}) {
		t.Errorf("after a refused start the directory holds %v, want nzb and out.jsonl kept", got)
	}
	if b, _ := os.ReadFile(out); string(b) != "{\"kept\":true}\n" {
		t.Errorf("the existing output changed: %q", b)
	}
}

// entries lists dir's names, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
