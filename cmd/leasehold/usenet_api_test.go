package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestUsenetAPIArgs: bad command lines of `usenet api` are usage errors
// (exit code 2) that touch no database.
func TestUsenetAPIArgs(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"usenet", "api"},
		{"usenet", "api", "--index", "postgres://x@127.0.0.1:1/i", "extra"},
		{"usenet", "api", "--index", "postgres://x@127.0.0.1:1/i", "--tls-cert", "c.pem"},
		{"usenet", "api", "--index", "postgres://x@127.0.0.1:1/i", "--max-connections", "0"},
		{"usenet", "api", "keys"},
		{"usenet", "api", "keys", "add"},
		{"usenet", "api", "keys", "add", "sonarr"},
		{"usenet", "api", "keys", "drop", "sonarr", "--index", "postgres://x@127.0.0.1:1/i"},
		{"usenet", "api", "keys", "list", "extra", "--index", "postgres://x@127.0.0.1:1/i"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		var u errUsage
		if !errors.As(err, &u) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestUsenetAPI runs the command as an operator does: keys add prints a
// key, the API serves t=caps to anyone and t=search to that key only,
// keys list shows it, and once revoked it is refused.
func TestUsenetAPI(t *testing.T) {
	t.Parallel()
	if _, err := pgtest.Binaries(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Not under t.TempDir: as root the server runs as postgres, which
	// must reach its directory.
	dir, err := os.MkdirTemp("", "leasehold-pg-")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgtest.Start(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	index, err := pg.CreateDatabase(ctx, "index")
	if err != nil {
		t.Fatal(err)
	}
	// The columns of the shared index's releases that the API reads.
	psql := exec.CommandContext(ctx, "psql", "-v", "ON_ERROR_STOP=1", "-q", index, "-c", `CREATE TABLE releases (
		key text PRIMARY KEY, name text NOT NULL, poster text NOT NULL, grp text NOT NULL, groups text[] NOT NULL,
		files integer NOT NULL, total_files integer, complete_files integer NOT NULL, complete boolean NOT NULL,
		bytes bigint NOT NULL, posted timestamptz NOT NULL, nzb text, category integer NOT NULL DEFAULT 0,
		lease_group text NOT NULL, fence bigint NOT NULL);
		INSERT INTO releases VALUES ('k1', 'Some.Show.S01E02.720p', 'p', 'alt.binaries.tv', '{alt.binaries.tv}', 1, 1, 1, true, 10, now(), NULL, 5040, 'g', 1)`)
	if out, err := psql.CombinedOutput(); err != nil {
		t.Fatalf("psql: %v: %s", err, out)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"usenet", "api", "keys", "add", "sonarr", "--index", index}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(out.String())
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(key) {
		t.Fatalf("keys add printed %q", key)
	}

	actx, stop := context.WithCancel(ctx)
	var log syncbuf.Buffer
	served := make(chan error, 1)
	go func() {
		served <- run(actx, []string{"usenet", "api", "--index", index, "--listen", "127.0.0.1:0"}, io.Discard, &log)
	}()
	var base string
	addr := regexp.MustCompile(`serving the newznab API on (http://\S+)/api`)
	poll.Eventually(t, 30*time.Second, "the API to say its address", func() bool {
		m := addr.FindStringSubmatch(log.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	get := func(q string) (int, string) {
		resp, err := http.Get(base + "/api?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get("t=caps"); status != 200 || !strings.Contains(body, "<caps>") {
		t.Errorf("t=caps: %d %s", status, body)
	}
	if status, body := get("t=search&apikey=" + key); status != 200 || !strings.Contains(body, "Some.Show.S01E02.720p") {
		t.Errorf("t=search: %d %s", status, body)
	}
	if status, body := get("t=search&apikey=" + strings.Repeat("0", 32)); status != 401 || !strings.Contains(body, `code="100"`) {
		t.Errorf("a wrong key: %d %s", status, body)
	}
	out.Reset()
	if err := run(ctx, []string{"usenet", "api", "keys", "list", "--index", index}, &out, io.Discard); err != nil || !regexp.MustCompile(`(?m)^sonarr\s+\S+\s+-$`).MatchString(out.String()) {
		t.Errorf("keys list: %v\n%s", err, out.String())
	}
	if err := run(ctx, []string{"usenet", "api", "keys", "revoke", "sonarr", "--index", index}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if status, _ := get("t=search&apikey=" + key); status != 401 {
		t.Errorf("the revoked key: %d", status)
	}
	stop()
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Errorf("the API stopped with %v", err)
	}
}
