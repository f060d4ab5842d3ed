package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestWatermarks is rule 11 over HTTP: a worker lists the groups whose
// water marks are oldest (never reported first), reports a group's marks,
// and the node plans the tail up to high in the group's range size,
// idempotently and never shrinking; the group shows low and high; no such
// group is 404, inconsistent marks 422 and an admin token 403, each
// changing nothing.
func TestWatermarks(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	w := &world{api: api{t, n.URL + "/api/v1"}, node: n, admin: n.AdminToken}
	for _, g := range []string{"alt.a", "alt.b", "alt.c"} {
		if a := w.j("PUT", "/groups/"+g, w.admin, `{"range_size":100}`); a.status != 201 {
			t.Fatalf("create %s: %d %s", g, a.status, a.body)
		}
	}
	if a := w.j("PUT", "/groups/alt.off", w.admin, `{"range_size":100,"active":false}`); a.status != 201 {
		t.Fatalf("create alt.off: %d %s", a.status, a.body)
	}
	w.w1 = w.j("POST", "/nodes", w.admin, `{"name":"w1"}`).json(t)["token"].(string)

	listed := func(limit string) []string {
		t.Helper()
		a := w.j("GET", "/watermarks?limit="+limit, w.w1, "")
		if a.status != 200 {
			t.Fatalf("watermarks: %d %s", a.status, a.body)
		}
		var names []string
		for _, g := range a.json(t)["groups"].([]any) {
			names = append(names, g.(map[string]any)["name"].(string))
		}
		return names
	}
	group := func(name string) map[string]any {
		t.Helper()
		a := w.j("GET", "/groups/"+name, w.admin, "")
		if a.status != 200 {
			t.Fatalf("group %s: %d %s", name, a.status, a.body)
		}
		return a.json(t)
	}
	report := func(name, body string) answer {
		t.Helper()
		return w.j("POST", "/groups/"+name+"/watermark", w.w1, body)
	}

	if got := listed("10"); len(got) != 3 || got[0] != "alt.a" || got[2] != "alt.c" {
		t.Fatalf("before any report: %v, want alt.a, alt.b, alt.c (active only)", got)
	}
	if g := group("alt.a"); g["low"] != nil || g["high"] != nil {
		t.Fatalf("unreported group shows low %v, high %v; want null", g["low"], g["high"])
	}

	t.Run("PlansTheTail", func(t *testing.T) {
		a := report("alt.a", `{"low":1,"high":250}`)
		if a.status != 200 || num(a.json(t), "planned") != 3 {
			t.Fatalf("report: %d %s, want 200 planned 3", a.status, a.body)
		}
		g := group("alt.a")
		if num(g, "low") != 1 || num(g, "high") != 250 || num(g, "tail_end") != 250 || num(g, "ranges", "planned") != 3 {
			t.Errorf("group after report: %v", g)
		}
	})
	t.Run("Idempotent", func(t *testing.T) {
		if a := report("alt.a", `{"low":1,"high":250}`); a.status != 200 || num(a.json(t), "planned") != 0 {
			t.Fatalf("same report again: %d %s, want 200 planned 0", a.status, a.body)
		}
	})
	t.Run("NeverShrinks", func(t *testing.T) {
		a := report("alt.a", `{"low":40,"high":120}`)
		if a.status != 200 || num(a.json(t), "planned") != 0 {
			t.Fatalf("lower high: %d %s, want 200 planned 0", a.status, a.body)
		}
		if g := group("alt.a"); num(g, "tail_end") != 250 || num(g, "high") != 120 || num(g, "low") != 40 {
			t.Errorf("after a lower high: tail_end %d (want 250 kept), marks %d..%d (want 40..120 recorded)",
				num(g, "tail_end"), num(g, "low"), num(g, "high"))
		}
	})
	t.Run("OldestFirst", func(t *testing.T) {
		if got := listed("2"); len(got) != 2 || got[0] != "alt.b" || got[1] != "alt.c" {
			t.Errorf("after alt.a reported: %v, want alt.b, alt.c first", got)
		}
	})
	t.Run("EmptyGroup", func(t *testing.T) {
		// An empty group: low = high+1.
		if a := report("alt.b", `{"low":1,"high":0}`); a.status != 200 || num(a.json(t), "planned") != 0 {
			t.Errorf("empty group: %d %s, want 200 planned 0", a.status, a.body)
		}
	})
	for _, c := range []struct {
		name, group, body, token string
		status                   int
		code                     string
	}{
		{"NoSuchGroup", "alt.none", `{"low":1,"high":10}`, "", 404, "not_found"},
		{"LowAboveHigh", "alt.c", `{"low":12,"high":10}`, "", 422, "unprocessable"},
		{"NegativeLow", "alt.c", `{"low":-1,"high":10}`, "", 422, "unprocessable"},
		{"Missing", "alt.c", `{"low":1}`, "", 400, "bad_request"},
		{"AdminToken", "alt.c", `{"low":1,"high":10}`, w.admin, 403, "forbidden"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := c.token
			if tok == "" {
				tok = w.w1
			}
			a := w.j("POST", "/groups/"+c.group+"/watermark", tok, c.body)
			if a.status != c.status || a.code() != c.code {
				t.Errorf("got %d %q (%s), want %d %s", a.status, a.code(), a.body, c.status, c.code)
			}
			if c.group == "alt.c" {
				if g := group("alt.c"); g["high"] != nil || num(g, "tail_end") != 0 {
					t.Errorf("a refused report changed the group: %v", g)
				}
			}
		})
	}
	if a := w.j("GET", "/watermarks?limit=0", w.w1, ""); a.status != 400 {
		t.Errorf("limit 0: %d, want 400", a.status)
	}
}

// TestWatermarkFlood: a worker reporting a far high mark again and again
// (any worker may report any group it can read) plans no more than tops
// the group's planned ranges up to the bound, and the answer says the
// tail was capped; the data dir does not grow with the reports.
func TestWatermarkFlood(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	w := &world{api: api{t, n.URL + "/api/v1"}, node: n, admin: n.AdminToken}
	if a := w.j("PUT", "/groups/ga", w.admin, `{"range_size":1,"start":1}`); a.status != 201 {
		t.Fatalf("create ga: %d %s", a.status, a.body)
	}
	w.w1 = w.j("POST", "/nodes", w.admin, `{"name":"w1"}`).json(t)["token"].(string)
	for i, want := range []int64{1000, 0, 0} {
		a := w.j("POST", "/groups/ga/watermark", w.w1, `{"low":1,"high":4611686018427387904}`)
		if a.status != 200 || num(a.json(t), "planned") != want || a.json(t)["capped"] != true {
			t.Fatalf("report %d: %d %s, want planned %d, capped", i+1, a.status, a.body, want)
		}
	}
	g := w.j("GET", "/groups/ga", w.admin, "").json(t)
	if p := num(g, "ranges", "planned"); p != 1000 {
		t.Errorf("ga has %d planned ranges after three reports, want 1000", p)
	}
	// Marks the tail reaches are not capped.
	if a := w.j("POST", "/groups/ga/watermark", w.w1, `{"low":1,"high":500}`); a.status != 200 || a.json(t)["capped"] != false {
		t.Errorf("a report within the tail: %d %s, want capped false", a.status, a.body)
	}
}

// TestWatermarkHolderOnly is the second review's R-N6: a worker reporting
// water marks on a group another worker holds (a far high mark, to plan
// its tail past the source; errors, to raise a finding) is refused 403 and
// changes nothing; the holder's own report is taken; the listing leaves
// the other's group out; a group nobody holds (never planned, so nobody
// could hold it) is still reported by any worker of its kind (rule 11),
// and so is the first group once its holder's lease has lapsed.
func TestWatermarkHolderOnly(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	n := nodetest.Start(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute})
	w := &world{api: api{t, n.URL + "/api/v1"}, node: n, admin: n.AdminToken}
	for _, g := range []string{"ga", "gb"} {
		if a := w.j("PUT", "/groups/"+g, w.admin, `{"range_size":100,"start":1}`); a.status != 201 {
			t.Fatalf("create %s: %d %s", g, a.status, a.body)
		}
		if a := w.j("POST", "/groups/"+g+"/tail", w.admin, `{"high":1000}`); a.status != 200 {
			t.Fatalf("plan %s: %d %s", g, a.status, a.body)
		}
	}
	if a := w.j("PUT", "/groups/gnostart", w.admin, `{"range_size":100}`); a.status != 201 {
		t.Fatalf("create gnostart: %d %s", a.status, a.body)
	}
	tokA := w.j("POST", "/nodes", w.admin, `{"name":"nodeA"}`).json(t)["token"].(string)
	tokB := w.j("POST", "/nodes", w.admin, `{"name":"nodeB"}`).json(t)["token"].(string)
	held := map[string]string{}
	for _, tok := range []string{tokA, tokB} {
		l := w.j("POST", "/leases", tok, "")
		if l.status != 200 {
			t.Fatalf("lease: %d %s", l.status, l.body)
		}
		held[tok] = l.json(t)["group"].(map[string]any)["name"].(string)
	}
	ga := held[tokA]
	group := func(name string) map[string]any {
		t.Helper()
		return w.j("GET", "/groups/"+name, w.admin, "").json(t)
	}
	before := group(ga)

	for i, body := range []string{`{"low":1,"high":4611686018427387904}`, `{"error":"no such group"}`, `{"error":"no such group"}`} {
		a := w.j("POST", "/groups/"+ga+"/watermark", tokB, body)
		if a.status != 403 || a.code() != "forbidden" || !strings.Contains(string(a.body), "held by another worker") {
			t.Fatalf("report %d by nodeB on nodeA's %s: %d %s, want 403 held by another worker", i+1, ga, a.status, a.body)
		}
	}
	g := group(ga)
	if g["high"] != nil || g["source_error"] != nil || num(g, "tail_end") != num(before, "tail_end") || num(g, "ranges", "planned") != num(before, "ranges", "planned") {
		t.Fatalf("%s after nodeB's refused reports: %v, want it as before: %v", ga, g, before)
	}
	if f := w.j("GET", "/findings", w.admin, ""); strings.Contains(string(f.body), "source_unreadable") {
		t.Fatalf("findings after nodeB's refused errors: %s, want no source_unreadable", f.body)
	}
	listed := string(w.j("GET", "/watermarks?limit=10", tokB, "").body)
	if strings.Contains(listed, `"`+ga+`"`) || !strings.Contains(listed, `"`+held[tokB]+`"`) || !strings.Contains(listed, `"gnostart"`) {
		t.Fatalf("nodeB's water-mark list: %s, want its own group and gnostart, not nodeA's %s", listed, ga)
	}

	// The holder reports its own group.
	if a := w.j("POST", "/groups/"+ga+"/watermark", tokA, `{"low":1,"high":1100}`); a.status != 200 || num(a.json(t), "planned") != 1 {
		t.Fatalf("nodeA reporting its own %s: %d %s, want 200 planned 1", ga, a.status, a.body)
	}
	// A group nobody holds: any worker of its kind reports it.
	if a := w.j("POST", "/groups/gnostart/watermark", tokB, `{"low":500,"high":700}`); a.status != 200 || num(a.json(t), "planned") != 3 {
		t.Fatalf("nodeB reporting gnostart, held by nobody: %d %s, want 200 planned 3", a.status, a.body)
	}
	// A lease that lapsed holds nothing: nodeA went quiet.
	clock.Advance(2 * time.Minute)
	if a := w.j("POST", "/groups/"+ga+"/watermark", tokB, `{"low":1,"high":1200}`); a.status != 200 {
		t.Fatalf("nodeB reporting %s after nodeA's lease lapsed: %d %s, want 200", ga, a.status, a.body)
	}
}
