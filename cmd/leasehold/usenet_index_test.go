package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// privatePostgres starts a PostgreSQL of the test's own (the test stops
// and starts it) and returns it with a database's URL.
func privatePostgres(t *testing.T, ctx context.Context) (*pgtest.Server, string) {
	t.Helper()
	if _, err := pgtest.Binaries(); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	// Not under t.TempDir: the server's user must reach the directory.
	dir, err := os.MkdirTemp("", "leasehold-pg-")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pgtest.Start(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(); os.RemoveAll(dir) })
	dsn, err := srv.CreateDatabase(ctx, "index")
	if err != nil {
		t.Fatal(err)
	}
	return srv, dsn
}

// TestUsenetWorkerPostgres: two worker boxes index a real INN's groups
// one after the other into one PostgreSQL index (--out from
// $LEASEHOLD_OUT for the second); the database is killed under the
// second and started again; the index equals one uninterrupted pass,
// no range failed, and `leasehold usenet nzb --index` writes each
// release's NZB whole from it. A wrong password or a missing database
// is a usage error (exit 2) in one line, before anything is leased.
func TestUsenetWorkerPostgres(t *testing.T) {
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg, dsn := privatePostgres(t, ctx)
	prefix := fmt.Sprintf("lh.pgindex.t%d", time.Now().UnixNano())
	a, b := prefix+".a", prefix+".b"
	if err := s.NewGroups(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 2})
	defer src.Close()
	if err := usenettest.Post(ctx, src, append(usenettest.Fixed(prefix), usenettest.Generated(a, 60, 10)...)); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	for _, g := range []string{a, b} {
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "20")
	}
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	c := client.New(n.URL, n.AdminToken)
	args := []string{"--url", n.URL, "--token", token, "--source", "nntp://" + s.Addr,
		"--capacity", "2", "--batch", "5", "--snapshot-every", "1ns", "--watermark-every", "200ms"}

	for name, bad := range map[string]string{
		"a wrong password":   strings.Replace(dsn, pg.Password(), "wrong", 1),
		"a missing database": strings.Replace(dsn, "/index", "/nosuch", 1),
	} {
		var logs bytes.Buffer
		err := runWorker(ctx, append(args, "--out", bad), &logs, &logs)
		var u errUsage
		if !errors.As(err, &u) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), pg.Password()) {
			t.Errorf("%s: %v; want a usage error (exit 2) of one line without the password", name, err)
		}
	}
	if d, _ := c.Group(ctx, a); d.Ranges[leasehold.StatusLeased] != 0 || d.Lease != nil {
		t.Errorf("refused workers leased: %+v", d)
	}

	// Box A reads a part of group a…
	workUntil(t, ctx, "box A", func() bool {
		d, err := c.Group(ctx, a)
		return err == nil && d.Ranges[leasehold.StatusDone] >= 3
	}, append(args, "--out", dsn)...)
	if caughtUp(t, ctx, c, a, 0)() {
		t.Fatal("box A read the whole group: nothing left for box B")
	}
	// …box B the rest, the database killed under it and started again.
	t.Setenv("LEASEHOLD_OUT", dsn)
	var logs syncbuf.Buffer
	wctx, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { ended <- runWorker(wctx, args, &logs, &logs) }()
	defer func() { stop(); <-ended }()
	deadline, _ := ctx.Deadline()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if poll.Wait(time.Until(deadline), poll.Every, func() error {
			select {
			case err := <-ended:
				t.Fatalf("the worker ended: %v\n%s", err, logs.String())
			default:
			}
			if !cond() {
				return errors.New("not yet")
			}
			return nil
		}) != nil {
			t.Fatalf("%s: not in time\n%s", what, logs.String())
		}
	}
	waitFor("box B at work", func() bool { return strings.Contains(logs.String(), "leased group") })
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor("the worker saying the index is down", func() bool {
		return strings.Contains(logs.String(), "the index cannot be reached")
	})
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("both groups done", func() bool { return caughtUp(t, ctx, c, a, 0)() && caughtUp(t, ctx, c, b, 0)() })

	got, want, failed, _ := indexAndOnePass(t, ctx, c, s.Addr, dsn, []string{a, b})
	if failed != 0 {
		t.Errorf("%d ranges failed", failed)
	}
	sameRecords(t, got, want)

	// Every release's NZB from the index, by key and by name.
	for k, r := range want.Releases {
		var files []binaries.File
		for _, f := range want.Files {
			if f.Release == k {
				files = append(files, f)
			}
		}
		var out, errb bytes.Buffer
		if err := runUsenet(ctx, []string{"nzb", "--index", dsn, k}, &out, &errb); err != nil || out.String() != string(binaries.NZB(r, files)) {
			t.Errorf("usenet nzb %s (%s): %v %s\n%s\nwant\n%s", k, r.Name, err, errb.String(), out.String(), binaries.NZB(r, files))
		}
	}
	var out bytes.Buffer
	if err := runUsenet(ctx, []string{"nzb", "--index", dsn, "no such release"}, &out, &out); err == nil || !strings.Contains(err.Error(), "no release") {
		t.Errorf("an unknown release: %v", err)
	}
}

// indexAndOnePass reads the index at dsn back, and one uninterrupted pass
// over groups up to the high marks their workers reported; failed is how
// many of their ranges failed. The index stays open for the test.
func indexAndOnePass(t *testing.T, ctx context.Context, c *client.Client, addr, dsn string, groups []string) (got, want binaries.Records, failed int64, index *binaries.Postgres) {
	t.Helper()
	index, err := binaries.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { index.Close() })
	if got, err = index.Records(ctx); err != nil {
		t.Fatal(err)
	}
	high := map[string]int64{}
	for _, g := range groups {
		d, err := c.Group(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		high[g] = *d.High
		failed += d.Ranges[leasehold.StatusFailed]
	}
	// Read over a new connection: one open while the groups were made
	// can go on answering a new group as empty.
	fresh := nntp.New(nntp.Config{Addr: addr, Connections: 1})
	defer fresh.Close()
	want, _ = onePass(t, ctx, fresh, high)
	return got, want, failed, index
}
