package web_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestKinds is rule 12 over HTTP: a node registered for nntp leases only
// nntp groups and a default node only default ones; water marks are
// listed for the caller's kinds only (the answer names them), and a
// report on a group of another kind is 403 with nothing changed; PATCH
// /nodes/{id} changes a node's kinds; a held group's kind is 409.
func TestKinds(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	w := &world{api: api{t, n.URL + "/api/v1"}, node: n, admin: n.AdminToken}
	for name, body := range map[string]string{
		"alt.counted":    `{"range_size":100}`,
		"alt.binaries.a": `{"range_size":100,"kind":"nntp"}`,
	} {
		if a := w.j("PUT", "/groups/"+name, w.admin, body); a.status != 201 {
			t.Fatalf("create %s: %d %s", name, a.status, a.body)
		}
		if a := w.j("POST", "/groups/"+name+"/tail", w.admin, `{"high":300}`); a.status != 200 {
			t.Fatalf("plan %s: %d %s", name, a.status, a.body)
		}
	}
	if a := w.j("PUT", "/groups/alt.bad", w.admin, `{"kind":"NNTP"}`); a.status != 400 {
		t.Fatalf("kind NNTP: %d %s, want 400", a.status, a.body)
	}
	reg := w.j("POST", "/nodes", w.admin, `{"name":"usenet","kinds":["nntp"]}`)
	if reg.status != 201 || !strings.Contains(string(reg.body), `"kinds":["nntp"]`) {
		t.Fatalf("register usenet: %d %s", reg.status, reg.body)
	}
	usenet := reg.json(t)["token"].(string)
	counter := w.j("POST", "/nodes", w.admin, `{"name":"counter"}`)
	if !strings.Contains(string(counter.body), `"kinds":["default"]`) {
		t.Fatalf("a node registered without kinds: %s, want kinds [default]", counter.body)
	}
	counterTok := counter.json(t)["token"].(string)

	leased := func(tok string) []string {
		t.Helper()
		var names []string
		for {
			a := w.j("POST", "/leases", tok, "")
			if a.status == 204 {
				return names
			}
			if a.status != 200 {
				t.Fatalf("lease: %d %s", a.status, a.body)
			}
			names = append(names, a.json(t)["group"].(map[string]any)["name"].(string))
		}
	}
	if got := leased(counterTok); len(got) != 1 || got[0] != "alt.counted" {
		t.Fatalf("the default node leased %v, want only alt.counted", got)
	}
	if got := leased(usenet); len(got) != 1 || got[0] != "alt.binaries.a" {
		t.Fatalf("the nntp node leased %v, want only alt.binaries.a", got)
	}

	a := w.j("GET", "/watermarks?limit=10", usenet, "")
	if a.status != 200 || !strings.Contains(string(a.body), `"kinds":["nntp"]`) || strings.Contains(string(a.body), "alt.counted") || !strings.Contains(string(a.body), "alt.binaries.a") {
		t.Fatalf("the nntp node's water marks: %d %s, want alt.binaries.a only, kinds [nntp]", a.status, a.body)
	}
	if a := w.j("POST", "/groups/alt.binaries.a/watermark", counterTok, `{"low":1,"high":900}`); a.status != 403 {
		t.Fatalf("a default node reporting an nntp group: %d %s, want 403", a.status, a.body)
	}
	if a := w.j("POST", "/groups/alt.binaries.a/watermark", counterTok, `{"error":"411 no such group"}`); a.status != 403 {
		t.Fatalf("a default node reporting an nntp group's error: %d %s, want 403", a.status, a.body)
	}
	if g := w.j("GET", "/groups/alt.binaries.a", w.admin, "").json(t); g["high"] != nil || g["source_error"] != nil || num(g, "tail_end") != 300 {
		t.Fatalf("the nntp group after refused reports: %v, want it unchanged", g)
	}

	if a := w.j("PUT", "/groups/alt.binaries.a", w.admin, `{"kind":"default"}`); a.status != 409 {
		t.Fatalf("kind change of a held group: %d %s, want 409", a.status, a.body)
	}
	id := num(counter.json(t), "id")
	a = w.j("PATCH", "/nodes/"+strconv.FormatInt(id, 10), w.admin, `{"kinds":["default","nntp"],"capacity":9}`)
	if a.status != 200 || !strings.Contains(string(a.body), `"kinds":["default","nntp"]`) || num(a.json(t), "capacity") != 9 {
		t.Fatalf("PATCH the node: %d %s", a.status, a.body)
	}
	// Of the group's kind now, but the group is usenet's: only its
	// holder reports it (the kind check passed, the holder's refused).
	if a := w.j("POST", "/groups/alt.binaries.a/watermark", counterTok, `{"low":1,"high":300}`); a.status != 403 || !strings.Contains(string(a.body), "held by another worker") {
		t.Fatalf("the node of both kinds reporting usenet's group: %d %s, want 403, held by another worker", a.status, a.body)
	}
	if a := w.j("PATCH", "/nodes/"+strconv.FormatInt(id, 10), w.admin, `{"kinds":[]}`); a.status != 400 {
		t.Fatalf("PATCH kinds []: %d %s, want 400", a.status, a.body)
	}
}

// TestSourceErrors is rule 13 over HTTP: a report of an error instead of
// marks sets the group's source_error; two in a row are a
// source_unreadable finding naming the error and the node; a report with
// marks clears both. A bad body is 400 and changes nothing.
func TestSourceErrors(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	w := &world{api: api{t, n.URL + "/api/v1"}, node: n, admin: n.AdminToken}
	if a := w.j("PUT", "/groups/alt.gone", w.admin, `{"kind":"nntp"}`); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	tok := w.j("POST", "/nodes", w.admin, `{"name":"usenet","kinds":["nntp"]}`).json(t)["token"].(string)
	report := func(body string) answer {
		t.Helper()
		return w.j("POST", "/groups/alt.gone/watermark", tok, body)
	}
	unreadable := func() string {
		t.Helper()
		a := w.j("GET", "/findings", w.admin, "")
		for _, f := range a.json(t)["stuck"].([]any) {
			if m := f.(map[string]any); m["kind"] == "source_unreadable" && m["group"] == "alt.gone" {
				return m["detail"].(string) + " / " + m["node"].(string)
			}
		}
		return ""
	}
	for _, body := range []string{`{"error":""}`, `{"error":"` + strings.Repeat("x", 4097) + `"}`, `{"error":"x","low":1,"high":2}`} {
		if a := report(body); a.status != 400 {
			t.Fatalf("report %.40s: %d %s, want 400", body, a.status, a.body)
		}
	}
	if a := report(`{"error":"411 No such group"}`); a.status != 200 {
		t.Fatalf("first error: %d %s", a.status, a.body)
	}
	g := w.j("GET", "/groups/alt.gone", w.admin, "").json(t)
	if se, _ := g["source_error"].(map[string]any); se == nil || se["error"] != "411 No such group" || se["node"] != "usenet" {
		t.Fatalf("group after one error: source_error %v", g["source_error"])
	}
	if f := unreadable(); f != "" {
		t.Fatalf("a finding after one error: %s, want none until two in a row", f)
	}
	report(`{"error":"411 No such group"}`)
	if f := unreadable(); !strings.Contains(f, "411 No such group") || !strings.HasSuffix(f, "usenet") {
		t.Fatalf("finding after two errors: %q, want the error and the node", f)
	}
	if a := report(`{"low":5,"high":4}`); a.status != 200 {
		t.Fatalf("good report: %d %s", a.status, a.body)
	}
	if g := w.j("GET", "/groups/alt.gone", w.admin, "").json(t); g["source_error"] != nil || unreadable() != "" {
		t.Fatalf("after a good report: source_error %v, finding %q; want both gone", g["source_error"], unreadable())
	}
}
