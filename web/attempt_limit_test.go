package web_test

import (
	"fmt"
	"html"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// atLimitLine is the message of a range failed at the attempt limit.
const atLimitLine = "range failed at the attempt limit"

// timelineRows are the overview's timeline rows of kind, newest first,
// as text (the row's cells, tags dropped).
func timelineRows(t *testing.T, url, admin string, kind leasehold.TimelineKind) []string {
	t.Helper()
	status, _, page := signedIn(t, url, admin).get("/")
	if status != 200 {
		t.Fatalf("the overview: %d", status)
	}
	var rows []string
	for _, row := range strings.Split(page, "<tr class=\"entry")[1:] {
		row, _, _ = strings.Cut(row, "</tr>")
		if !strings.Contains(row, fmt.Sprintf("data-kind=%q", kind)) {
			continue
		}
		var text strings.Builder
		for _, part := range strings.Split(row, "<") {
			if _, cell, ok := strings.Cut(part, ">"); ok {
				text.WriteString(cell)
			}
		}
		if !strings.Contains(row, "bad-entry") {
			text.WriteString(" (not marked bad)")
		}
		rows = append(rows, html.UnescapeString(text.String()))
	}
	return rows
}

// wantAtLimit checks what the operator hears of range rid of g failed at
// the attempt limit after attempts, by who through route: one log line,
// one bad timeline entry, and one failure counted as failed (none
// retried).
func wantAtLimit(t *testing.T, w *world, logs *jsonLog, rid, attempts int64, who, route string) {
	t.Helper()
	line := logs.one(t, atLimitLine)
	wantFields(t, line, map[string]any{"level": "WARN", "group": "g", "range": rid, "status": "failed",
		"attempts": attempts, "reason": "max attempts", "who": who, "route": route})
	for _, k := range []string{"start", "end", "next", "max_attempts"} {
		if _, ok := line[k]; !ok {
			t.Errorf("the line has no %s: %v", k, line)
		}
	}
	rows := timelineRows(t, w.node.URL, w.admin, "range_failed")
	if len(rows) != 1 {
		t.Fatalf("%d range_failed timeline entries, want 1: %q", len(rows), rows)
	}
	want := fmt.Sprintf("range %d (", rid)
	for _, part := range []string{want, fmt.Sprintf("failed after %d attempt(s), at the attempt limit", attempts), "an operator must retry it", who} {
		if !strings.Contains(rows[0], part) || strings.Contains(rows[0], "(not marked bad)") {
			t.Errorf("the timeline entry %q, want it bad and saying %q", rows[0], part)
		}
	}
	if got := w.metric(`leasehold_range_failures_total{outcome="failed"}`); got != 1 {
		t.Errorf(`leasehold_range_failures_total{outcome="failed"} = %v, want 1`, got)
	}
	if got := w.metric(`leasehold_range_failures_total{outcome="retried"}`); got != 0 {
		t.Errorf(`leasehold_range_failures_total{outcome="retried"} = %v, want 0`, got)
	}
	for _, secret := range []string{w.admin, w.w1, w.w2} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a token reached the log:\n%s", logs.String())
		}
	}
}

// TestAttemptLimitSpeaks: a range failed because it used up its attempts
// is heard of as a worker's failure is (rule 10) — a log line naming the
// call that failed it, a timeline entry, a count — whichever write failed
// it: a release, a takeover, next passing it over.
func TestAttemptLimitSpeaks(t *testing.T) {
	t.Parallel()
	fb := func(fence int64) string { return fmt.Sprintf(`{"fence":%d}`, fence) }

	t.Run("Release", func(t *testing.T) {
		var logs jsonLog
		w := newWorld(t, nodetest.Options{MaxAttempts: 3, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		fence := w.fence
		for attempt := 1; ; attempt++ {
			if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fb(fence)); a.status != 200 {
				t.Fatalf("release %d: %d %s", attempt, a.status, a.body)
			}
			if attempt == 3 {
				break
			}
			if n := len(logs.lines(t, atLimitLine)); n != 0 {
				t.Fatalf("after release %d of 3: %d lines of a range failed at the limit", attempt, n)
			}
			l := w.j("POST", "/leases", w.w1, "")
			fence = num(l.json(t), "fence")
			if r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(fence)); num(r.json(t), "range", "id") != w.rangeID {
				t.Fatalf("next after release %d: %s, want range %d again", attempt, r.body, w.rangeID)
			}
		}
		wantAtLimit(t, w, &logs, w.rangeID, 3, "w1", "POST /api/v1/leases/:group/release")
	})

	t.Run("Takeover", func(t *testing.T) {
		var logs jsonLog
		clock := nodetest.NewClock()
		w := newWorld(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute, MaxAttempts: 2,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		// w1 goes quiet on its first attempt; w2 takes g over and
		// leases the range again, its second attempt, and goes quiet.
		clock.Advance(2 * time.Minute)
		l := w.j("POST", "/leases", w.w2, "")
		if l.status != 200 || l.json(t)["takeover"] != true {
			t.Fatalf("w2's takeover: %d %s", l.status, l.body)
		}
		if r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w2, fb(num(l.json(t), "fence"))); num(r.json(t), "range", "attempts") != 2 {
			t.Fatalf("w2's next: %s, want range %d at attempt 2", r.body, w.rangeID)
		}
		if n := len(logs.lines(t, atLimitLine)); n != 0 {
			t.Fatalf("before the limit: %d lines of a range failed at the limit", n)
		}
		// w1 takes it back: the range has used up its attempts.
		clock.Advance(2 * time.Minute)
		if l := w.j("POST", "/leases", w.w1, ""); l.status != 200 || l.json(t)["takeover"] != true {
			t.Fatalf("w1's takeover: %d %s", l.status, l.body)
		}
		wantAtLimit(t, w, &logs, w.rangeID, 2, "w1", "POST /api/v1/leases")
	})

	t.Run("NextPassesOver", func(t *testing.T) {
		// The first range leased twice and released, planned again with
		// attempts left under a limit of 5; the node restarts with a
		// limit of 2, and next passes the range over, failing it.
		var logs jsonLog
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		clock := nodetest.NewClock()
		w := newWorld(t, nodetest.Options{Clock: clock.Now, MaxAttempts: 5, Logger: log})
		if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fb(w.fence)); a.status != 200 {
			t.Fatalf("release: %d %s", a.status, a.body)
		}
		l := w.j("POST", "/leases", w.w1, "")
		fence := num(l.json(t), "fence")
		if r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(fence)); num(r.json(t), "range", "attempts") != 2 {
			t.Fatalf("next: %s, want range %d at attempt 2", r.body, w.rangeID)
		}
		if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fb(fence)); a.status != 200 {
			t.Fatalf("release: %d %s", a.status, a.body)
		}
		w.node.Stop()
		w.node = nodetest.Start(t, nodetest.Options{Clock: clock.Now, MaxAttempts: 2, Logger: log, DataDir: w.node.DataDir})
		w.api = api{t, w.node.URL + "/api/v1"}
		l = w.j("POST", "/leases", w.w1, "")
		if l.status != 200 || l.json(t)["takeover"] == true {
			t.Fatalf("lease after the restart: %d %s", l.status, l.body)
		}
		if n := len(logs.lines(t, atLimitLine)); n != 0 {
			t.Fatalf("before next: %d lines of a range failed at the limit", n)
		}
		r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(num(l.json(t), "fence")))
		if r.status != 200 || num(r.json(t), "range", "id") == w.rangeID {
			t.Fatalf("next: %d %s, want a range after %d", r.status, r.body, w.rangeID)
		}
		wantAtLimit(t, w, &logs, w.rangeID, 2, "w1", "POST /api/v1/leases/:group/next")
	})

	t.Run("WorkerFailNotTwice", func(t *testing.T) {
		// A worker failing its range on its last attempt is told once,
		// by its own call's line, and counted once.
		var logs jsonLog
		w := newWorld(t, nodetest.Options{MaxAttempts: 1, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		if a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"error":"timeout"}`, w.fence)); a.status != 200 || a.json(t)["status"] != "failed" {
			t.Fatalf("fail: %d %s", a.status, a.body)
		}
		if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fb(w.fence)); a.status != 200 {
			t.Fatalf("release: %d %s", a.status, a.body)
		}
		logs.one(t, "range failed: failed until")
		if n := len(logs.lines(t, atLimitLine)); n != 0 {
			t.Errorf("%d lines of a range failed at the limit, want none: the worker's own line tells", n)
		}
		if rows := timelineRows(t, w.node.URL, w.admin, "range_failed"); len(rows) != 1 {
			t.Errorf("%d range_failed timeline entries, want 1: %q", len(rows), rows)
		}
		if got := w.metric(`leasehold_range_failures_total{outcome="failed"}`); got != 1 {
			t.Errorf(`leasehold_range_failures_total{outcome="failed"} = %v, want 1`, got)
		}
	})
}
