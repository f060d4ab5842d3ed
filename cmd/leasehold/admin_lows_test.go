package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestFindingsList: `admin findings list` is `admin findings`.
func TestFindingsList(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	if out := admin(t, n, "findings", "list"); !strings.Contains(out, "backlog:") {
		t.Errorf("findings list: %q", out)
	}
	if _, err := operatorRun(t, n, nil, "findings", "list", "extra"); !isUsage(err) {
		t.Errorf("findings list extra: %v, want a usage error", err)
	}
}

// TestWaitStopped: a wait stopped by Ctrl-C (its context ended) says it
// stopped, not that it gave up after its timeout.
func TestWaitStopped(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.wait")
	admin(t, n, "groups", "tail", "alt.wait", "100")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	err := runAdmin(ctx, []string{"--url", n.URL, "--token", n.AdminToken, "wait"}, &stdout, &stderr)
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "gave up") {
		t.Errorf("wait after Ctrl-C: %v; want it stopped (context canceled), not given up", err)
	}
}

// TestWaitQuarantined: wait ends at once when the only open ranges left
// are a quarantined group's, naming the group, why, and what lifts it.
func TestWaitQuarantined(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	ctx := context.Background()
	admin(t, n, "groups", "create", "alt.q", "--range-size", "100")
	admin(t, n, "groups", "tail", "alt.q", "300")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	g, err := w.Lease(ctx)
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	if err := w.ReleaseUnreadable(ctx, g.Group.ID, g.Fence, "gzip: invalid header"); err != nil {
		t.Fatal(err)
	}
	_, err = operatorRun(t, n, nil, "wait", "--timeout", "10m", "--every", "10ms")
	if err == nil || strings.Contains(err.Error(), "gave up") || !strings.Contains(err.Error(), "group alt.q is quarantined") ||
		!strings.Contains(err.Error(), "gzip: invalid header") || !strings.Contains(err.Error(), "unquarantine alt.q") {
		t.Errorf("wait on a quarantined group: %v; want it to say the group is quarantined, why, and how to lift it", err)
	}
}

// TestGroupsBadInput: history to 0 (ids start at 1) and a name with an
// empty word are refused with nothing changed, and show says a group with
// nothing planned has none rather than an upside-down span.
func TestGroupsBadInput(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.bad", "--range-size", "10", "--start", "10")
	if out := admin(t, n, "groups", "show", "alt.bad"); !strings.Contains(out, "none yet (the tail starts at 10)") || strings.Contains(out, "10..9") {
		t.Errorf("show of a group with nothing planned:\n%s", out)
	}
	for _, args := range [][]string{{"groups", "history", "alt.bad", "0"}, {"groups", "tail", "alt.bad", "-5"}, {"groups", "create", "Bad..name"}, {"groups", "create", "alt.x."}} {
		if _, err := operatorRun(t, n, nil, args...); !isUsage(err) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if out := admin(t, n, "groups", "show", "alt.bad"); !strings.Contains(out, "planned 0,") {
		t.Errorf("a refused plan planned something:\n%s", out)
	}
	if out := admin(t, n, "groups", "list"); strings.Contains(out, "Bad..name") {
		t.Errorf("a refused name was created:\n%s", out)
	}
	admin(t, n, "groups", "tail", "alt.bad", "29")
	if out := admin(t, n, "groups", "show", "alt.bad"); !strings.Contains(out, "10..29") {
		t.Errorf("show after the tail:\n%s", out)
	}
}

// TestGroupsListColumns: groups list shows each group's progress (ranges
// done of all), its holder and its quarantine.
func TestGroupsListColumns(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	ctx := context.Background()
	admin(t, n, "groups", "create", "alt.held", "--range-size", "100")
	admin(t, n, "groups", "tail", "alt.held", "300")
	admin(t, n, "groups", "create", "alt.idle", "--priority", "5")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	g, err := w.Lease(ctx)
	if err != nil || g == nil || g.Group.Name != "alt.held" {
		t.Fatalf("lease: %v, %v", g, err)
	}
	r, err := w.Next(ctx, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		t.Fatalf("next: %v, %v", r, err)
	}
	if _, err := w.Finish(ctx, r.ID, g.Fence, 9); err != nil {
		t.Fatal(err)
	}
	row := func(out, name string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == name {
				return f
			}
		}
		t.Fatalf("no row for %s in\n%s", name, out)
		return nil
	}
	out := admin(t, n, "groups", "list")
	head := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	col := func(name string) int { return slices.Index(head, name) }
	if col("DONE") < 0 || col("HOLDER") < 0 || col("QUARANTINE") < 0 {
		t.Fatalf("groups list has no DONE, HOLDER and QUARANTINE columns:\n%s", out)
	}
	if f := row(out, "alt.held"); f[col("DONE")] != "1/3" || f[col("HOLDER")] != "w1" || f[col("QUARANTINE")] != "-" {
		t.Errorf("alt.held's row %q, want 1/3 done, held by w1, no quarantine", f)
	}
	if f := row(out, "alt.idle"); f[col("DONE")] != "0/0" || f[col("HOLDER")] != "-" {
		t.Errorf("alt.idle's row %q, want 0/0 done, no holder", f)
	}
	if err := w.ReleaseUnreadable(ctx, g.Group.ID, g.Fence, "gzip: invalid header"); err != nil {
		t.Fatal(err)
	}
	out = admin(t, n, "groups", "list")
	if f := row(out, "alt.held"); f[col("HOLDER")] != "-" || f[col("QUARANTINE")] != "w1:" || !strings.Contains(out, "w1: gzip: invalid header") {
		t.Errorf("alt.held's row after the quarantine %q, want no holder and w1's error", f)
	}
}

// TestGroupsDeleteAsksOnTerminal: `admin groups delete` on a real
// terminal asks first, naming the group's ranges; "n" keeps it, "y"
// deletes it. Without a terminal (the other tests, scripts) it asks
// nothing.
func TestGroupsDeleteAsksOnTerminal(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.del", "--range-size", "100")
	admin(t, n, "groups", "tail", "alt.del", "300")
	const question = "Delete it? [y/N] "
	args := []string{"admin", "--url", n.URL, "--token", n.AdminToken, "groups", "delete", "alt.del"}
	screen, stdout, code := onTerminal(t, question, "n\n", args...)
	if !strings.Contains(screen, "group alt.del has 3 range(s), 0 done, and no window; deleting it forgets them all.\r\n"+question) {
		t.Errorf("the terminal showed %q, want the question naming the ranges", screen)
	}
	if code != 1 || stdout != "" || !strings.Contains(admin(t, n, "groups", "list"), "alt.del") {
		t.Errorf("after n: exit %d, stdout %q; want exit 1 and the group kept", code, stdout)
	}
	_, stdout, code = onTerminal(t, question, "y\n", args...)
	if code != 0 || !strings.Contains(stdout, "group alt.del deleted") || strings.Contains(admin(t, n, "groups", "list"), "alt.del") {
		t.Errorf("after y: exit %d, stdout %q; want the group deleted", code, stdout)
	}
}

// TestMissingCAHint: a command refused by a node's HTTPS certificate for
// want of its CA says to give --ca-file.
func TestMissingCAHint(t *testing.T) {
	t.Parallel()
	pki := newPKI(t)
	pki.ca("ca")
	cert, key := pki.leaf("ca", "node")
	m, _ := startNode(t, nil, "--tls-cert", cert, "--tls-key", key)
	u := "https://" + m.Addr().String()
	var out bytes.Buffer
	for _, args := range [][]string{
		{"admin", "--url", u, "--token", readAdminToken(t, m), "groups", "list"},
		{"healthcheck", "--url", u, "-q"},
	} {
		err := run(context.Background(), args, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "--ca-file") {
			t.Errorf("%q without the CA: %v; want a hint of --ca-file", args, err)
		}
	}
}

// TestJSONLogDurations: --log-format json writes durations as the text
// log does ("1.5s"), not as nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	m := newTestMain(t, io.Discard, &stderr)
	m.LogFormat = "json"
	log := slog.New(m.logHandler(slog.LevelInfo))
	log.Info("took", "took", 1500*time.Millisecond, slog.Group("claim", slog.Duration("ttl", 30*time.Second)))
	var got struct {
		Took  any `json:"took"`
		Claim struct {
			TTL any `json:"ttl"`
		} `json:"claim"`
	}
	if err := json.Unmarshal(stderr.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if got.Took != "1.5s" || got.Claim.TTL != "30s" {
		t.Errorf("the JSON log wrote took=%v, claim.ttl=%v; want 1.5s and 30s:\n%s", got.Took, got.Claim.TTL, stderr.String())
	}
}
