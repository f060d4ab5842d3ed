package web_test

import (
	"testing"

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
