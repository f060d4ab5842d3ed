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
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestUsenetWorkerStart: `--start last:8` starts a new group at its last
// 8 articles, and `--start days:2` at its first article posted in the
// last two days (the articles posted with dates nine days ago to now):
// the node plans each from there. A bad --start is a usage error (exit
// 2) that says what is wanted, before anything is opened.
func TestUsenetWorkerStart(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"days:0", "last:-1", "30d", "last:x", "days:99999"} {
		out := filepath.Join(t.TempDir(), "out.jsonl")
		var stderr bytes.Buffer
		err := runWorker(context.Background(), []string{"--token", "t", "--source", "nntp://127.0.0.1:1", "--out", out, "--start", bad}, &stderr, &stderr)
		if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "--start") || !strings.Contains(stderr.String(), "want low, last:N") {
			t.Errorf("--start %s: exit %d, %q; want 2 and what is wanted", bad, code, stderr.String())
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("--start %s: --out made before the error (%v)", bad, err)
		}
	}

	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("alt.binaries.lh.wire.start%d", time.Now().UnixNano())
	last, days := prefix+".last", prefix+".days"
	if err := s.NewGroups(ctx, last, days); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	if err := usenettest.Post(ctx, src, usenettest.Generated(last, 10, 3)); err != nil {
		t.Fatal(err)
	}
	// Twelve articles a day apart from nine days ago, the last three
	// within the last two days (at 42 h, 18 h and 6 h ago).
	now := time.Now()
	ago := []time.Duration{216, 204, 192, 168, 144, 120, 96, 72, 60, 42, 18, 6}
	for i, h := range ago {
		a := usenettest.Article{Group: days, From: usenettest.Bob, Subject: fmt.Sprintf("day %d (1/1)", i+1), Body: "text"}
		if err := src.Post(ctx, a.Dated(now.Add(-h*time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, time.Minute, "group "+days+" holding its posts", func() error {
		fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
		defer fresh.Close()
		gi, err := fresh.Group(ctx, days)
		if err == nil && gi.High != int64(len(ago)) {
			err = fmt.Errorf("high %d, want %d", gi.High, len(ago))
		}
		return err
	})

	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	c := client.New(n.URL, n.AdminToken)
	run := func(group, start string, high, want int64) {
		t.Helper()
		admin(t, n, "groups", "create", group, "--kind", "nntp", "--range-size", "5")
		workUntil(t, ctx, "--start "+start, caughtUp(t, ctx, c, group, high),
			"--url", n.URL, "--token", token, "--source", "nntp://"+s.Addr, "--out", filepath.Join(t.TempDir(), "out.jsonl"),
			"--capacity", "1", "--watermark-every", "200ms", "--start", start)
		d, err := c.Group(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := c.AllRanges(ctx, group, "")
		if err != nil {
			t.Fatal(err)
		}
		if d.Start != want || len(rs) == 0 || rs[0].Start != want {
			t.Errorf("--start %s: the group starts at %d, its first range at %v; want %d", start, d.Start, rs, want)
		}
	}
	run(last, "last:8", 30, 23)
	run(days, "days:2", int64(len(ago)), 10)
}
