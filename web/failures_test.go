package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// rangeOf finds range id in the group's ranges as the API lists them.
func (w *fenceWorld) rangeOf(id int64) map[string]any {
	w.t.Helper()
	a := w.j("GET", "/groups/g/ranges?limit=100", w.admin, "")
	if a.status != 200 {
		w.t.Fatalf("ranges: %d %s", a.status, a.body)
	}
	for _, r := range a.json(w.t)["ranges"].([]any) {
		if m := r.(map[string]any); num(m, "id") == id {
			return m
		}
	}
	w.t.Fatalf("range %d not listed", id)
	return nil
}

func (w *fenceWorld) findings(kind string) []map[string]any {
	w.t.Helper()
	a := w.j("GET", "/findings", w.admin, "")
	if a.status != 200 {
		w.t.Fatalf("findings: %d %s", a.status, a.body)
	}
	var out []map[string]any
	for _, f := range a.json(w.t)["stuck"].([]any) {
		if m := f.(map[string]any); m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// TestFailRange is rule 10 over HTTP: a holder's fail with retry plans the
// range again at its resume point with its error shown wherever the range
// is; without retry it is failed at once and its finding carries the
// error; an error text that is missing, empty or over 4096 bytes is 422
// and changes nothing.
func TestFailRange(t *testing.T) {
	t.Parallel()
	t.Run("Retry", func(t *testing.T) {
		w := newFenceWorld(t)
		if m := w.rangeOf(w.rangeID); m["last_error"] != nil || m["last_error_at"] != nil {
			t.Fatalf("a range never failed shows %v at %v, want null", m["last_error"], m["last_error_at"])
		}
		progress := w.j("POST", fmt.Sprintf("/ranges/%d/progress", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"next":%d}`, w.first, w.rangeStart+5))
		if progress.status != 200 {
			t.Fatalf("progress: %d %s", progress.status, progress.body)
		}
		a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"error":"nntp: 503 timeout"}`, w.first))
		if a.status != 200 {
			t.Fatalf("fail: %d %s", a.status, a.body)
		}
		for where, m := range map[string]map[string]any{"answer": a.json(t), "listing": w.rangeOf(w.rangeID)} {
			if m["status"] != "planned" || num(m, "next") != w.rangeStart+5 || m["last_error"] != "nntp: 503 timeout" || m["last_error_at"] == nil {
				t.Errorf("%s: %v, want planned at %d with its error", where, m, w.rangeStart+5)
			}
		}
		if again := w.next(w.w1, w.first); again != w.rangeID {
			t.Errorf("next after the failure: range %d, want %d again", again, w.rangeID)
		}
	})
	t.Run("NoRetry", func(t *testing.T) {
		w := newFenceWorld(t)
		a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"error":"unknown article format","retry":false}`, w.first))
		if a.status != 200 || a.json(t)["status"] != "failed" || a.json(t)["last_error"] != "unknown article format" {
			t.Fatalf("fail: %d %s, want 200 failed with its error", a.status, a.body)
		}
		f := w.findings("range_failed")
		if len(f) != 1 || !strings.Contains(f[0]["detail"].(string), "unknown article format") {
			t.Errorf("range_failed findings: %v, want one with the error", f)
		}
	})
	t.Run("BadError", func(t *testing.T) {
		w := newFenceWorld(t)
		for name, body := range map[string]string{
			"Missing": fmt.Sprintf(`{"fence":%d}`, w.first),
			"Empty":   fmt.Sprintf(`{"fence":%d,"error":""}`, w.first),
			"TooLong": fmt.Sprintf(`{"fence":%d,"error":%q}`, w.first, strings.Repeat("e", 4097)),
		} {
			t.Run(name, func(t *testing.T) {
				before := w.catalog()
				a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, body)
				if a.status != 422 || a.code() != "unprocessable" {
					t.Errorf("got %d %q (%s), want 422 unprocessable", a.status, a.code(), a.body)
				}
				sameCatalog(t, before, w.catalog())
			})
		}
		a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"error":%q}`, w.first, strings.Repeat("e", 4096)))
		if a.status != 200 {
			t.Errorf("an error of 4096 bytes: %d %s, want 200", a.status, a.body)
		}
	})
}

// TestQuarantine is rule 10's unreadable window over HTTP: a release with
// window_error quarantines the group (shown on the group, a finding
// naming the node and the error, leased to nobody); lifting the quarantine
// hands the same window out again; dropping the window is refused while
// the group is held, then removes it and lifts the quarantine, and the
// next holder starts without a window; an operator restoring a window
// lifts it as well.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	w := newFenceWorld(t)
	group := func() map[string]any {
		a := w.j("GET", "/groups/g", w.admin, "")
		if a.status != 200 {
			t.Fatalf("group: %d %s", a.status, a.body)
		}
		return a.json(t)
	}
	if q, ok := group()["quarantine"]; !ok || q != nil {
		t.Fatalf("a group never quarantined: quarantine %v (present %v), want null", q, ok)
	}
	release := func(tok string, fence int64, windowError string) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), tok, fmt.Sprintf(`{"fence":%d,"window_error":%q}`, fence, windowError))
	}
	before := w.catalog()
	if a := release(w.w1, w.first, ""); a.status != 422 || a.code() != "unprocessable" {
		t.Fatalf("an empty window_error: %d %s, want 422", a.status, a.body)
	}
	sameCatalog(t, before, w.catalog())
	if a := release(w.w1, w.first, "gzip: invalid header"); a.status != 200 {
		t.Fatalf("release with window_error: %d %s", a.status, a.body)
	}
	q, _ := group()["quarantine"].(map[string]any)
	if q == nil || q["error"] != "gzip: invalid header" || q["node"] != "w1" || q["at"] == nil {
		t.Fatalf("quarantine = %v, want w1's error", group()["quarantine"])
	}
	if f := w.findings("window_unreadable"); len(f) != 1 || f[0]["group"] != "g" || f[0]["node"] != "w1" ||
		!strings.Contains(f[0]["detail"].(string), "gzip: invalid header") {
		t.Errorf("window_unreadable findings: %v", f)
	}
	for _, tok := range []string{w.w1, w.w2} {
		if a := w.j("POST", "/leases", tok, ""); a.status != 204 {
			t.Fatalf("lease of a quarantined group: %d %s, want 204", a.status, a.body)
		}
	}

	a := w.j("DELETE", "/groups/g/quarantine", w.admin, "")
	if a.status != 200 || a.json(t)["quarantine"] != nil || a.json(t)["name"] != "g" {
		t.Fatalf("lift: %d %s, want 200 the group without quarantine", a.status, a.body)
	}
	if f := w.findings("window_unreadable"); len(f) != 0 {
		t.Errorf("findings after the lift: %v", f)
	}
	l := w.j("POST", "/leases", w.w2, "")
	if l.status != 200 {
		t.Fatalf("lease after the lift: %d %s", l.status, l.body)
	}
	fence := num(l.json(t), "fence")
	if s, _ := l.json(t)["snapshot"].(map[string]any); s == nil || num(s, "next") != 1 {
		t.Fatalf("lease after the lift: snapshot %v, want the same window (next 1)", l.json(t)["snapshot"])
	}

	if a := w.j("DELETE", "/groups/g/snapshot", w.admin, ""); a.status != 409 || a.code() != "conflict" {
		t.Fatalf("drop while held: %d %s, want 409 conflict", a.status, a.body)
	}
	if a := release(w.w2, fence, "window: unexpected EOF"); a.status != 200 {
		t.Fatalf("second release with window_error: %d %s", a.status, a.body)
	}
	a = w.j("DELETE", "/groups/g/snapshot", w.admin, "")
	if a.status != 200 || a.json(t)["quarantine"] != nil {
		t.Fatalf("drop: %d %s, want 200 the group without quarantine", a.status, a.body)
	}
	if s := group()["snapshot"]; s != nil {
		t.Errorf("snapshot after the drop: %v, want null", s)
	}
	if files := w.view.files(t); files != "[]" {
		t.Errorf("snapshot files after the drop: %q, want none", files)
	}
	l = w.j("POST", "/leases", w.w3, "")
	if l.status != 200 || l.json(t)["snapshot"] != nil {
		t.Fatalf("lease after the drop: %d %s, want 200 without a window", l.status, l.body)
	}

	// Restoring another window lifts a quarantine too.
	if a := release(w.w3, num(l.json(t), "fence"), "window: bad magic"); a.status != 200 {
		t.Fatalf("third release with window_error: %d %s", a.status, a.body)
	}
	if a := w.do("PUT", "/groups/g/snapshot?next=1", w.admin, bytes.NewReader(w.window), "Content-Encoding", "gzip"); a.status != 201 {
		t.Fatalf("restore: %d %s", a.status, a.body)
	}
	if q := group()["quarantine"]; q != nil {
		t.Errorf("quarantine after a window was restored: %v, want null", q)
	}
	if l := w.j("POST", "/leases", w.w1, ""); l.status != 200 {
		t.Fatalf("lease after the restore: %d %s", l.status, l.body)
	}
}

// TestDashboardFailures: the group page shows a failed range's last error
// and the group's quarantine, escaped, and /metrics counts the
// window_unreadable finding.
func TestDashboardFailures(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	if a := w.j("POST", fmt.Sprintf("/ranges/%d/fail", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"error":"<b>bad</b> article","retry":false}`, w.fence)); a.status != 200 {
		t.Fatalf("fail: %d %s", a.status, a.body)
	}
	if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fmt.Sprintf(`{"fence":%d,"window_error":"gzip: invalid header"}`, w.fence)); a.status != 200 {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	if got := w.metric(`leasehold_findings{kind="window_unreadable"}`); got != 1 {
		t.Errorf(`leasehold_findings{kind="window_unreadable"} = %v, want 1`, got)
	}
	b := signedIn(t, w.node.URL, w.admin)
	status, _, page := b.get("/groups/g")
	if status != 200 {
		t.Fatalf("group page: %d", status)
	}
	for _, want := range []string{`id="quarantine"`, "w1 could not load its window", "gzip: invalid header", `class="last-error">&lt;b&gt;bad&lt;/b&gt; article`} {
		if !strings.Contains(page, want) {
			t.Errorf("group page lacks %q:\n%s", want, page)
		}
	}
}

// TestGuardedWrites: an operator's window that would make done ranges be
// indexed again, and the delete of a node that holds groups, are 409
// conflicts naming how many, with nothing changed, until forced; a force
// that is not true or false is 400.
func TestGuardedWrites(t *testing.T) {
	t.Parallel()
	w := newFenceWorld(t)
	for range 2 {
		if a := w.j("POST", fmt.Sprintf("/ranges/%d/finish", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"headers":5}`, w.first)); a.status != 200 {
			t.Fatalf("finish: %d %s", a.status, a.body)
		}
		w.rangeID = w.next(w.w1, w.first)
	}
	w.release(w.w1, w.first)

	put := func(query string) answer {
		return w.do("PUT", "/groups/g/snapshot?next=1"+query, w.admin, bytes.NewReader(w.window), "Content-Encoding", "gzip")
	}
	before, files := w.catalog(), w.view.files(t)
	if a := put(""); a.status != 409 || a.code() != "conflict" || !strings.Contains(string(a.body), "2 done range(s)") {
		t.Fatalf("a window replanning done ranges: %d %s, want 409 naming 2 done ranges", a.status, a.body)
	}
	if a := put("&force=maybe"); a.status != 400 {
		t.Fatalf("force=maybe: %d %s, want 400", a.status, a.body)
	}
	sameCatalog(t, before, w.catalog())
	if got := w.view.files(t); got != files {
		t.Errorf("snapshot files after refused uploads: %s, want %s", got, files)
	}
	// A window past the done ranges undoes nothing: no force needed.
	if a := w.do("PUT", "/groups/g/snapshot?next=201", w.admin, bytes.NewReader(w.window), "Content-Encoding", "gzip"); a.status != 201 {
		t.Fatalf("a window past the done ranges: %d %s, want 201", a.status, a.body)
	}
	if a := put("&force=true"); a.status != 201 {
		t.Fatalf("forced: %d %s, want 201", a.status, a.body)
	}

	var nodes []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(w.j("GET", "/nodes", w.admin, "").body, &nodes); err != nil {
		t.Fatal(err)
	}
	var w2 int64
	for _, n := range nodes {
		if n.Name == "w2" {
			w2 = n.ID
		}
	}
	w.lease(w.w2)
	before = w.catalog()
	if a := w.j("DELETE", fmt.Sprintf("/nodes/%d", w2), w.admin, ""); a.status != 409 || !strings.Contains(string(a.body), "holds 1 group") {
		t.Fatalf("deleting a node holding a group: %d %s, want 409 naming 1 group", a.status, a.body)
	}
	sameCatalog(t, before, w.catalog())
	if a := w.j("DELETE", fmt.Sprintf("/nodes/%d?force=true", w2), w.admin, ""); a.status != 204 {
		t.Fatalf("forced delete: %d %s, want 204", a.status, a.body)
	}
}

// TestNodeState: a node's state in the API is active while it holds a
// group, idle when seen and holding nothing, paused when paused (whatever
// else holds), and unseen once not seen for the unseen bound (ten lease
// TTLs here), even while it holds a group.
func TestNodeState(t *testing.T) {
	t.Parallel()
	w := newFenceWorld(t)
	states := func() map[string]string {
		var nodes []struct{ Name, State string }
		a := w.j("GET", "/nodes", w.admin, "")
		if err := json.Unmarshal(a.body, &nodes); err != nil {
			t.Fatalf("nodes: %d %s: %v", a.status, a.body, err)
		}
		out := map[string]string{}
		for _, n := range nodes {
			out[n.Name] = n.State
		}
		return out
	}
	if got := fmt.Sprint(states()); got != "map[w1:active w2:idle w3:idle]" {
		t.Fatalf("states: %s, want w1 active (holds g), w2 and w3 idle", got)
	}
	if a := w.j("POST", "/nodes/3/pause", w.admin, `{"by":"ops"}`); a.status != 200 || a.json(t)["state"] != "paused" {
		t.Fatalf("pause: %d %s, want the node paused", a.status, a.body)
	}
	// w1 keeps its lease and is seen at every heartbeat; the others are
	// not seen.
	for range 21 {
		w.clock.Advance(fenceTTL / 2)
		if a := w.j("POST", fmt.Sprintf("/leases/%d/heartbeat", w.gid), w.w1, fmt.Sprintf(`{"fence":%d}`, w.first)); a.status != 200 {
			t.Fatalf("heartbeat: %d %s", a.status, a.body)
		}
	}
	if got := fmt.Sprint(states()); got != "map[w1:active w2:unseen w3:paused]" {
		t.Fatalf("states after ten TTLs: %s, want w1 active, w2 unseen, w3 paused", got)
	}
	w.clock.Advance(10*fenceTTL + time.Second)
	if got := states()["w1"]; got != "unseen" {
		t.Fatalf("w1 holding a group, unseen for ten TTLs: %s, want unseen", got)
	}
}

// TestFlapping: a group released or taken over five times in a row with
// no range progressing under any of the leases is a flapping finding; a
// lease under which a range progresses ends the run.
func TestFlapping(t *testing.T) {
	t.Parallel()
	w := newFenceWorld(t)
	w.release(w.w1, w.first) // 1: w1 took a range and did nothing with it
	for i, tok := range []string{w.w2, w.w3, w.w1} {
		_, fence := w.lease(tok)
		w.release(tok, fence) // 2, 3, 4
		if i < 2 && len(w.findings("flapping")) > 0 {
			t.Fatalf("a flapping finding after %d lease ends", i+2)
		}
	}
	if f := w.findings("flapping"); len(f) != 0 {
		t.Fatalf("a flapping finding after 4 lease ends: %v", f)
	}
	w.lease(w.w2)
	w.clock.Advance(fenceTTL + time.Second)
	_, fence := w.lease(w.w3) // 5: a takeover of the quiet w2
	f := w.findings("flapping")
	if len(f) != 1 || f[0]["group"] != "g" || f[0]["node"] != "w3" || !strings.Contains(f[0]["detail"].(string), "5 times in a row") {
		t.Fatalf("flapping findings after 5 lease ends: %v, want g's, held by w3, saying 5 times", f)
	}
	r := w.next(w.w3, fence)
	if a := w.j("POST", fmt.Sprintf("/ranges/%d/progress", r), w.w3, fmt.Sprintf(`{"fence":%d,"next":%d}`, fence, w.rangeStart+10)); a.status != 200 {
		t.Fatalf("progress: %d %s", a.status, a.body)
	}
	w.release(w.w3, fence)
	if f := w.findings("flapping"); len(f) != 0 {
		t.Fatalf("flapping findings after a lease that progressed: %v", f)
	}
}

// TestNextFinished: next with finished finishes the range and leases the
// next one in one call; a finished that is refused (a range of another
// group, a range not in the holder's work, negative headers, no range)
// changes nothing.
func TestNextFinished(t *testing.T) {
	t.Parallel()
	w := newFenceWorld(t)
	if a := w.j("PUT", "/groups/other", w.admin, `{"range_size":100,"start":1}`); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	if a := w.j("POST", "/groups/other/tail", w.admin, `{"high":300}`); a.status != 200 {
		t.Fatalf("plan: %d %s", a.status, a.body)
	}
	og, ofence := w.lease(w.w2)
	orange := w.j("POST", fmt.Sprintf("/leases/%d/next", og), w.w2, fmt.Sprintf(`{"fence":%d}`, ofence))
	if orange.status != 200 {
		t.Fatalf("next of other: %d %s", orange.status, orange.body)
	}
	otherRange := num(orange.json(t), "range", "id")

	next := func(body string) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, body)
	}
	var planned int64 // a range of g not in w1's work
	for _, r := range w.j("GET", "/groups/g/ranges?status=planned&limit=1", w.admin, "").json(t)["ranges"].([]any) {
		planned = num(r.(map[string]any), "id")
	}
	before := w.catalog()
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"OtherGroup", fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":1}}`, w.first, otherRange), 422},
		{"NegativeHeaders", fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":-1}}`, w.first, w.rangeID), 400},
		{"NoRange", fmt.Sprintf(`{"fence":%d,"finished":{"headers":1}}`, w.first), 400},
		{"UnknownRange", fmt.Sprintf(`{"fence":%d,"finished":{"range":999999,"headers":1}}`, w.first), 404},
		{"NotInWork", fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":1}}`, w.first, planned), 409},
		{"StaleFence", fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":1}}`, w.first-1, w.rangeID), 409},
	} {
		if a := next(c.body); a.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, a.status, a.body, c.status)
		}
	}
	sameCatalog(t, before, w.catalog())

	a := next(fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":42}}`, w.first, w.rangeID))
	if a.status != 200 {
		t.Fatalf("next with finished: %d %s", a.status, a.body)
	}
	if got := num(a.json(t), "range", "start"); got != w.rangeEnd+1 {
		t.Errorf("the next range starts at %d, want %d", got, w.rangeEnd+1)
	}
	done := w.rangeOf(w.rangeID)
	if done["status"] != "done" || num(done, "headers") != 42 {
		t.Errorf("the finished range: %v, want done with 42 headers", done)
	}
}
