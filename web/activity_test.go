package web_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// jsonLog collects a node's JSON log lines, safe for the server's
// goroutines.
type jsonLog struct{ syncbuf.Buffer }

// lines are the log lines whose message starts with prefix.
func (l *jsonLog) lines(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q", sc.Text())
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// one is the only line whose message starts with prefix.
func (l *jsonLog) one(t *testing.T, prefix string) map[string]any {
	t.Helper()
	ls := l.lines(t, prefix)
	if len(ls) != 1 {
		t.Fatalf("%d log lines %q, want 1; the log:\n%s", len(ls), prefix, l.String())
	}
	return ls[0]
}

// wantFields checks a log line's fields.
func wantFields(t *testing.T, line map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got := line[k]; fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("log line %q: %s = %v, want %v (line %v)", line["msg"], k, got, v, line)
		}
	}
	if r, _ := line["remote"].(string); !strings.HasPrefix(r, "127.0.0.1:") {
		t.Errorf("log line %q: remote = %q, want the caller's address", line["msg"], r)
	}
}

// TestOperatorLog: a takeover, a range failed (retried and for good), a
// quarantine and admin writes are each one structured line naming who
// (admin or the worker node) and the remote address; refused holder
// calls are one line a minute a node, summing the calls between; no
// token ever reaches the log.
func TestOperatorLog(t *testing.T) {
	t.Parallel()
	var logs jsonLog
	clock := nodetest.NewClock()
	w := newWorld(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute, MaxAttempts: 5,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	fb := func(fence int64, extra string) string { return fmt.Sprintf(`{"fence":%d%s}`, fence, extra) }

	// Admin writes, from newWorld (group, plan, two nodes) and one more.
	if a := w.j("POST", "/nodes/2/pause", w.admin, `{"by":"alice"}`); a.status != 200 {
		t.Fatalf("pause: %d %s", a.status, a.body)
	}
	writes := logs.lines(t, "admin write")
	if len(writes) != 5 {
		t.Fatalf("%d admin write lines, want 5 (group, plan, 2 nodes, pause):\n%s", len(writes), logs.String())
	}
	wantFields(t, writes[0], map[string]any{"level": "INFO", "who": "admin", "method": "PUT", "route": "/api/v1/groups/:name", "name": "g", "status": 201})
	// A registration names the node it made, though its path does not.
	wantFields(t, writes[2], map[string]any{"who": "admin", "method": "POST", "route": "/api/v1/nodes", "node": "w1", "status": 201})
	wantFields(t, writes[4], map[string]any{"who": "admin", "route": "/api/v1/nodes/:id/pause", "id": "2", "status": 200})
	if a := w.j("POST", "/nodes/2/resume", w.admin, ""); a.status != 200 {
		t.Fatalf("resume: %d %s", a.status, a.body)
	}

	// A range failed and planned again, then failed for good.
	a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, fb(w.fence, `,"error":"nntp: 503 timeout"`))
	if a.status != 200 {
		t.Fatalf("fail: %d %s", a.status, a.body)
	}
	wantFields(t, logs.one(t, "range failed: planned again"), map[string]any{
		"level": "WARN", "who": "w1", "group": "g", "range": w.rangeID, "status": "planned", "retry": true, "error": "nntp: 503 timeout", "attempts": 1})
	r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(w.fence, ""))
	rid := num(r.json(t), "range", "id")
	if a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", rid), w.w1, fb(w.fence, `,"error":"article 7 malformed","retry":false`)); a.status != 200 {
		t.Fatalf("fail: %d %s", a.status, a.body)
	}
	wantFields(t, logs.one(t, "range failed: failed until"), map[string]any{
		"who": "w1", "group": "g", "range": rid, "status": "failed", "retry": false, "error": "article 7 malformed"})

	// A takeover: w1 goes quiet past the TTL, w2 takes g.
	clock.Advance(2 * time.Minute)
	l := w.j("POST", "/leases", w.w2, "")
	if l.status != 200 || l.json(t)["takeover"] != true {
		t.Fatalf("takeover lease: %d %s", l.status, l.body)
	}
	fence2 := num(l.json(t), "fence")
	wantFields(t, logs.one(t, "takeover"), map[string]any{
		"level": "INFO", "who": "w2", "group": "g", "group_id": w.gid, "fence": fence2, "from": "w1", "snapshot_next": "none"})

	// w1 keeps calling on the lease it lost: one line, then the rest
	// summed into the line a minute later.
	for range 5 {
		if a := w.j("POST", fmt.Sprintf("/leases/%d/heartbeat", w.gid), w.w1, fb(w.fence, "")); a.status != 409 {
			t.Fatalf("heartbeat on a lost lease: %d %s", a.status, a.body)
		}
	}
	refused := logs.one(t, "holder calls refused")
	wantFields(t, refused, map[string]any{"level": "WARN", "who": "w1", "refused": 1, "route": "POST /api/v1/leases/:group/heartbeat"})
	if msg, _ := refused["error"].(string); !strings.Contains(msg, "fence") {
		t.Errorf("the refusal line's error %q does not say why", msg)
	}
	clock.Advance(61 * time.Second)
	w.j("POST", fmt.Sprintf("/leases/%d/heartbeat", w.gid), w.w2, fb(fence2, "")) // w2 keeps its lease
	w.j("POST", fmt.Sprintf("/ranges/%d/finish", rid), w.w1, fb(w.fence, `,"headers":1`))
	ls := logs.lines(t, "holder calls refused")
	if len(ls) != 2 {
		t.Fatalf("%d refusal lines after a minute, want 2:\n%s", len(ls), logs.String())
	}
	wantFields(t, ls[1], map[string]any{"who": "w1", "refused": 5, "since_s": 61, "route": "POST /api/v1/ranges/:id/finish"})
	if got := w.metric(`leasehold_holder_calls_refused_total{code="lease_lost"}`); got != 6 {
		t.Errorf("refused lease_lost calls = %v, want 6", got)
	}

	// A quarantine: w2's window would not load.
	if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w2, fb(fence2, `,"window_error":"load window: invalid character 'h'"`)); a.status != 200 {
		t.Fatalf("release with window_error: %d %s", a.status, a.body)
	}
	wantFields(t, logs.one(t, "group quarantined"), map[string]any{
		"level": "WARN", "who": "w2", "group": "g", "fence": fence2, "error": "load window: invalid character 'h'"})

	// The operator lifts it from the dashboard's API: an admin write.
	if a := w.j("DELETE", "/groups/g/quarantine", w.admin, ""); a.status != 200 {
		t.Fatalf("lift: %d %s", a.status, a.body)
	}
	wantFields(t, logs.lines(t, "admin write")[6], map[string]any{"who": "admin", "method": "DELETE", "route": "/api/v1/groups/:name/quarantine", "name": "g", "status": 200})
	// Reads are not admin writes.
	w.j("GET", "/groups/g", w.admin, "")
	if n := len(logs.lines(t, "admin write")); n != 7 {
		t.Errorf("%d admin write lines, want 7 (a read is not one)", n)
	}

	for _, secret := range []string{w.admin, w.w1, w.w2} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a token reached the log:\n%s", logs.String())
		}
	}
}
