package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestUsenetWorkerNeedsNNTP: the Usenet worker on a token whose node does
// not read nntp exits 2 at start, saying how to fix it; once the node reads
// nntp (admin nodes kinds) the same worker starts. The groups listing
// shows each group's kind.
func TestUsenetWorkerNeedsNNTP(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.binaries.k", "--kind", "nntp")
	admin(t, n, "groups", "create", "alt.counted.k")
	if out := admin(t, n, "groups", "list"); !strings.Contains(out, "KIND") || !lineHas(out, "alt.binaries.k", "nntp") || !lineHas(out, "alt.counted.k", "default") {
		t.Fatalf("groups list does not show kinds:\n%s", out)
	}
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "-q"))
	// A source nobody listens on: the check comes before any connection.
	args := []string{"--url", n.URL, "--token", token, "--source", "nntp://127.0.0.1:1", "--out", filepath.Join(t.TempDir(), "out.jsonl")}
	var out bytes.Buffer
	// A worker that did start is stopped after a while: its exit is then
	// not 2.
	refuseCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	err := runWorker(refuseCtx, args, &out, &out)
	if code := exitCode(err, &out); code != 2 || err == nil || !strings.Contains(err.Error(), "--kinds nntp") || !strings.Contains(err.Error(), "admin nodes kinds") {
		t.Fatalf("the Usenet worker on a default node: exit %d, %v; want 2 saying how to fix it", code, err)
	}
	if got := admin(t, n, "nodes", "kinds", "news1", "nntp"); !strings.Contains(got, "reads kinds nntp") {
		t.Fatalf("nodes kinds: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out.Reset()
	if err := runWorker(ctx, args, &out, &out); isUsage(err) {
		t.Fatalf("the Usenet worker on an nntp node: %v, want it to run", err)
	}
	if !strings.Contains(out.String(), "worker started") {
		t.Fatalf("the Usenet worker on an nntp node did not start:\n%s", out.String())
	}
}

// lineHas reports whether some line of out holds each of words.
func lineHas(out string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// TestWorkerURLRefused: a worker given a --url it cannot use (no scheme,
// no host) exits 2 at start, naming the flag.
func TestWorkerURLRefused(t *testing.T) {
	for _, u := range []string{"127.0.0.1:8080", "localhost", "http://", "ftp://127.0.0.1:8080", "http:///api",
		// A list of a fleet's nodes is refused whole for one bad entry.
		"http://127.0.0.1:8080,", "http://127.0.0.1:8080,,http://127.0.0.1:8081", "http://127.0.0.1:8080,127.0.0.1:8081",
		"http://127.0.0.1:8080,http://127.0.0.1:8080"} {
		var out bytes.Buffer
		ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		err := runWorker(ctx, []string{"--url", u, "--token", "x"}, &out, &out)
		stop()
		if code := exitCode(err, &out); code != 2 || err == nil || !strings.Contains(err.Error(), "--url") {
			t.Errorf("--url %q: exit %d, %v; want 2 naming --url", u, code, err)
		}
	}
	// Tokens: one for all, or one per URL.
	for _, tokens := range []string{"t1,t2,t3", "t1,,"} {
		var out bytes.Buffer
		err := runWorker(context.Background(), []string{"--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--token", tokens}, &out, &out)
		if code := exitCode(err, &out); code != 2 || err == nil || !strings.Contains(err.Error(), "--token") {
			t.Errorf("--token %q for two URLs: exit %d, %v; want 2 naming --token", tokens, code, err)
		}
	}
	// $LEASEHOLD_URL takes the same list.
	t.Setenv("LEASEHOLD_URL", "http://127.0.0.1:8080,nope")
	var out bytes.Buffer
	err := runWorker(context.Background(), []string{"--token", "x"}, &out, &out)
	if code := exitCode(err, &out); code != 2 || err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("LEASEHOLD_URL with a bad entry: exit %d, %v; want 2 naming it", code, err)
	}
}
