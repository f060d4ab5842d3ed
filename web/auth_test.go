package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/web"
)

// authWorld: a node whose log is captured, group g held by w1 with a range
// in work, w2 (paused, holding nothing), a victim node to pause and a
// second to delete, and the token of a node deleted already.
type authWorld struct {
	*fuzzNode
	echo     *echo.Echo
	log      *syncbuf.Buffer
	w2, gone string
	victim2  int64
	tokens   map[string]string // every token the node made, by whose
}

func newAuthWorld(t *testing.T) *authWorld {
	lb := &syncbuf.Buffer{}
	n := slowNode(t, web.Options{Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	fn := &fuzzNode{node: n, api: n.URL + "/api/v1", admin: n.AdminToken, client: &http.Client{Timeout: fuzzAnswerTimeout}}
	fn.view = openCatalogView(t, n.DataDir)
	w := &authWorld{fuzzNode: fn, echo: n.Handler.(*echo.Echo), log: lb, tokens: map[string]string{"admin": n.AdminToken}}
	fn.must(t, "PUT", "/groups/g", n.AdminToken, `{"range_size":100}`, 201)
	fn.must(t, "POST", "/groups/g/tail", n.AdminToken, `{"high":1000}`, 200)
	// A group nobody holds, for water-mark reports: g is w1's, and only
	// its holder reports it.
	fn.must(t, "PUT", "/groups/free", n.AdminToken, `{"range_size":100}`, 201)
	reg := func(name string) (int64, string) {
		m := jsonOf(t, fn.must(t, "POST", "/nodes", n.AdminToken, fmt.Sprintf(`{"name":%q}`, name), 201))
		tok := m["token"].(string)
		w.tokens[name] = tok
		return num(m, "id"), tok
	}
	_, fn.w1 = reg("w1")
	var w2id int64
	w2id, w.w2 = reg("w2")
	fn.must(t, "POST", fmt.Sprintf("/nodes/%d/pause", w2id), n.AdminToken, `{"by":"test"}`, 200)
	fn.victim, _ = reg("victim")
	w.victim2, _ = reg("victim2")
	var goneID int64
	goneID, w.gone = reg("gone")
	fn.must(t, "DELETE", fmt.Sprintf("/nodes/%d", goneID), n.AdminToken, "", 204)
	fn.ensure(t)
	return w
}

// credential is one way of presenting (or not) a token.
type credential struct {
	name   string
	header string // the Authorization header; "" sends none
	kind   string // none, admin, node
}

// route is one endpoint of the API with a request that passes every check
// but auth in a known way, and what each kind of token gets.
type route struct {
	method, pattern, path string
	body                  string
	// admin and node are the statuses for the admin token and for a node
	// token (w2: registered, paused, holding nothing). Every other
	// credential gets 401 on an API endpoint.
	admin, node int
	// open routes (health, dashboard) answer the same to every credential:
	// bearer tokens neither open nor close them.
	open bool
}

func (w *authWorld) routes() []route {
	g, f, r := w.gid, w.fence, w.rng
	lp := func(s string) string { return fmt.Sprintf("/api/v1/leases/%d%s", g, s) }
	rp := func(s string) string { return fmt.Sprintf("/api/v1/ranges/%d%s", r, s) }
	fb := fmt.Sprintf(`{"fence":%d}`, f)
	return []route{
		{"GET", "/healthz", "/healthz", "", 200, 200, true},
		{"GET", "/readyz", "/readyz", "", 200, 200, true},
		{"GET", "/metrics", "/metrics", "", 200, 200, true},
		{"GET", "/api/v1/openapi.json", "/api/v1/openapi.json", "", 200, 200, true},

		{"POST", "/api/v1/nodes", "/api/v1/nodes", `{"name":"w9"}`, 201, 403, false},
		{"GET", "/api/v1/nodes", "/api/v1/nodes", "", 200, 403, false},
		{"POST", "/api/v1/nodes/:id/pause", fmt.Sprintf("/api/v1/nodes/%d/pause", w.victim), `{"by":"alice"}`, 200, 403, false},
		{"POST", "/api/v1/nodes/:id/resume", fmt.Sprintf("/api/v1/nodes/%d/resume", w.victim), "", 200, 403, false},
		{"PATCH", "/api/v1/nodes/:id", fmt.Sprintf("/api/v1/nodes/%d", w.victim), `{"capacity":3}`, 200, 403, false},
		{"DELETE", "/api/v1/nodes/:id", fmt.Sprintf("/api/v1/nodes/%d", w.victim2), "", 204, 403, false},
		// Rotations that pass auth and then fail, so the tokens stay:
		// no such node (a node token other than its own is forbidden),
		// and a body where the call takes none.
		{"POST", "/api/v1/nodes/:id/token", "/api/v1/nodes/999999/token", "", 404, 403, false},
		{"POST", "/api/v1/admin/token", "/api/v1/admin/token", `{"x":1}`, 400, 403, false},
		{"PUT", "/api/v1/groups/:name", "/api/v1/groups/m", `{}`, 201, 403, false},
		{"GET", "/api/v1/groups", "/api/v1/groups", "", 200, 403, false},
		{"GET", "/api/v1/groups/:name", "/api/v1/groups/g", "", 200, 403, false},
		// A deletion that passes auth and finds no group, so g stays.
		{"DELETE", "/api/v1/groups/:name", "/api/v1/groups/nosuch", "", 404, 403, false},
		{"POST", "/api/v1/groups/:name/tail", "/api/v1/groups/g/tail", `{"high":1000}`, 200, 403, false},
		{"POST", "/api/v1/groups/:name/history", "/api/v1/groups/g/history", `{"low":1}`, 200, 403, false},
		{"GET", "/api/v1/groups/:name/ranges", "/api/v1/groups/g/ranges", "", 200, 403, false},
		{"GET", "/api/v1/groups/:name/snapshot", "/api/v1/groups/g/snapshot", "", 204, 403, false},
		{"PUT", "/api/v1/groups/:name/snapshot", "/api/v1/groups/g/snapshot?next=1", "x", 409, 403, false},
		{"POST", "/api/v1/ranges/:id/retry", rp("/retry"), "", 409, 403, false},
		{"DELETE", "/api/v1/groups/:name/quarantine", "/api/v1/groups/g/quarantine", "", 200, 403, false},
		{"DELETE", "/api/v1/groups/:name/snapshot", "/api/v1/groups/g/snapshot", "", 409, 403, false},
		{"PUT", "/api/v1/rules", "/api/v1/rules", `{"a":1}`, 201, 403, false},
		{"GET", "/api/v1/rules", "/api/v1/rules", "", 200, 403, false},
		{"GET", "/api/v1/findings", "/api/v1/findings", "", 200, 403, false},
		{"GET", "/api/v1/peers", "/api/v1/peers", "", 200, 403, false},
		// A node alone has no members to remove or approve.
		{"DELETE", "/api/v1/peers/:name", "/api/v1/peers/n2", "", 409, 403, false},
		{"POST", "/api/v1/peers/:name/approve", "/api/v1/peers/n2/approve", "", 409, 403, false},
		{"GET", "/api/v1/backup", "/api/v1/backup", "", 200, 403, false},

		// Go's runtime profiles: the admin token's alone.
		{"GET", "/debug/pprof/", "/debug/pprof/", "", 200, 403, false},
		{"GET", "/debug/pprof/cmdline", "/debug/pprof/cmdline", "", 200, 403, false},
		{"GET", "/debug/pprof/profile", "/debug/pprof/profile?seconds=1", "", 200, 403, false},
		{"GET", "/debug/pprof/symbol", "/debug/pprof/symbol", "", 200, 403, false},
		{"POST", "/debug/pprof/symbol", "/debug/pprof/symbol", "0x1", 200, 403, false},
		{"GET", "/debug/pprof/trace", "/debug/pprof/trace?seconds=0.1", "", 200, 403, false},
		{"GET", "/debug/pprof/:profile", "/debug/pprof/heap", "", 200, 403, false},

		{"POST", "/api/v1/leases", "/api/v1/leases", "", 403, 204, false},
		{"POST", "/api/v1/leases/:group/next", lp("/next"), fb, 403, 409, false},
		{"POST", "/api/v1/leases/:group/heartbeat", lp("/heartbeat"), fb, 403, 409, false},
		{"POST", "/api/v1/leases/:group/release", lp("/release"), fb, 403, 409, false},
		{"PUT", "/api/v1/leases/:group/snapshot", lp(fmt.Sprintf("/snapshot?fence=%d&next=1", f)), "x", 403, 409, false},
		{"GET", "/api/v1/leases/:group/snapshot", lp(fmt.Sprintf("/snapshot?fence=%d", f)), "", 403, 409, false},
		{"POST", "/api/v1/ranges/:id/progress", rp("/progress"), fmt.Sprintf(`{"fence":%d,"next":%d}`, f, w.next+1), 403, 409, false},
		{"POST", "/api/v1/ranges/:id/finish", rp("/finish"), fmt.Sprintf(`{"fence":%d,"headers":1}`, f), 403, 409, false},
		{"POST", "/api/v1/ranges/:id/fail", rp("/fail"), fmt.Sprintf(`{"fence":%d,"error":"e"}`, f), 403, 409, false},
		{"GET", "/api/v1/watermarks", "/api/v1/watermarks?limit=5", "", 403, 200, false},
		// An empty group's marks: nothing planned, so nothing to lease.
		{"POST", "/api/v1/groups/:name/watermark", "/api/v1/groups/free/watermark", `{"low":1,"high":0}`, 403, 200, false},

		// The dashboard takes a session cookie, never a bearer token: a page
		// sends every credential to sign in, an action is refused.
		{"GET", "/static/*", "/static/style.css", "", 200, 200, true},
		{"GET", "/signin", "/signin", "", 200, 200, true},
		{"POST", "/signin", "/signin", "", 403, 403, true},
		{"POST", "/signout", "/signout", "", 403, 403, true},
		{"GET", "/", "/", "", 303, 303, true},
		{"GET", "/groups", "/groups", "", 303, 303, true},
		{"GET", "/groups/:name", "/groups/g", "", 303, 303, true},
		{"GET", "/groups/:name/snapshot", "/groups/g/snapshot", "", 303, 303, true},
		{"GET", "/nodes", "/nodes", "", 303, 303, true},
		{"GET", "/fleet", "/fleet", "", 303, 303, true},
		{"POST", "/nodes/:id/pause", fmt.Sprintf("/nodes/%d/pause", w.victim), "", 403, 403, true},
		{"POST", "/nodes/:id/resume", fmt.Sprintf("/nodes/%d/resume", w.victim), "", 403, 403, true},
		{"POST", "/ranges/:id/retry", fmt.Sprintf("/ranges/%d/retry", r), "", 403, 403, true},
		{"POST", "/groups/:name/quarantine/lift", "/groups/g/quarantine/lift", "", 403, 403, true},
		{"POST", "/groups/:name/window/drop", "/groups/g/window/drop", "", 403, 403, true},
	}
}

func (w *authWorld) credentials() []credential {
	return []credential{
		{"NoToken", "", "none"},
		{"MalformedBasic", "Basic " + w.admin, "none"},
		{"MalformedNoScheme", w.admin, "none"},
		{"MalformedEmpty", "Bearer ", "none"},
		{"Wrong", "Bearer lhn_" + strings.Repeat("A", 43), "none"},
		{"DeletedNode", "Bearer " + w.gone, "none"},
		{"NodeToken", "Bearer " + w.w2, "node"},
		// Last: the admin token's calls are the ones that change things.
		{"AdminToken", "Bearer " + w.admin, "admin"},
	}
}

// raw sends one request of the matrix and keeps every answer body, to show
// later that no token ever comes back.
func (w *authWorld) raw(t *testing.T, method, path, auth, body string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, w.node.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	// Do not follow the dashboard's redirects: the 303 is the answer.
	c := &http.Client{Timeout: fuzzAnswerTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{resp.StatusCode, resp.Header, b}
	if method == "POST" && path == "/api/v1/nodes" && a.status == 201 {
		// The one answer that carries a token: a new one, never seen
		// before, and from now on looked for in every other answer.
		m := jsonOf(t, a)
		tok, _ := m["token"].(string)
		delete(m, "token")
		rest, _ := json.Marshal(m)
		w.noTokenIn(t, method+" "+path, resp.Header, rest)
		if !strings.HasPrefix(tok, "lhn_") {
			t.Fatalf("registration answered no node token: %s", b)
		}
		w.tokens[m["name"].(string)] = tok
		return a
	}
	w.noTokenIn(t, method+" "+path, resp.Header, b)
	return a
}

// noTokenIn fails if an answer carries any token the node made.
func (w *authWorld) noTokenIn(t *testing.T, what string, h http.Header, b []byte) {
	t.Helper()
	for who, tok := range w.tokens {
		if bytes.Contains(b, []byte(tok)) {
			t.Fatalf("%s: the answer carries %s's token: %.200s", what, who, b)
		}
	}
	// The API's description names the field (and holds no token).
	isDescription := strings.HasSuffix(what, "/api/v1/openapi.json")
	if strings.Contains(h.Get("Content-Type"), "json") && bytes.Contains(b, []byte(`"token"`)) && !isDescription {
		t.Fatalf("%s: the answer has a token field: %.200s", what, b)
	}
}

// TestAuthMatrix: every endpoint of API.md (and every other route the
// router has) × every kind of credential, with the status API.md gives:
// 401 for a missing, malformed, wrong or deleted node's token, 403 for the
// right token on the wrong kind of endpoint; a refusal changes nothing.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	w := newAuthWorld(t)
	routes := w.routes()

	// The table and the router agree: a new route without a row fails here.
	registered := map[string]bool{}
	for _, r := range w.echo.Routes() {
		registered[r.Method+" "+r.Path] = true
	}
	inTable := map[string]bool{}
	for _, r := range routes {
		inTable[r.method+" "+r.pattern] = true
	}
	var missing, extra []string
	for k := range registered {
		if !inTable[k] {
			missing = append(missing, k)
		}
	}
	for k := range inTable {
		if !registered[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("routes the router has but the matrix lacks: %v; rows for routes the router lacks: %v", missing, extra)
	}

	cells := 0
	for _, r := range routes {
		for _, cr := range w.credentials() {
			want := 401
			switch {
			case r.open:
				want = r.admin // the same for everyone
			case cr.kind == "admin":
				want = r.admin
			case cr.kind == "node":
				want = r.node
			}
			t.Run(r.method+r.pattern+"/"+cr.name, func(t *testing.T) {
				before := w.view.state(t)
				a := w.raw(t, r.method, r.path, cr.header, r.body)
				if a.status != want {
					t.Fatalf("%s %s as %s: got %d %.200s, want %d", r.method, r.path, cr.name, a.status, a.body, want)
				}
				wantCode := map[int]string{401: "unauthorized", 403: "forbidden", 409: ""}[a.status]
				if !r.open && (a.status == 401 || a.status == 403) && a.code() != wantCode {
					t.Fatalf("%s %s as %s: error code %q, want %q", r.method, r.path, cr.name, a.code(), wantCode)
				}
				if a.status == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("a 401 without WWW-Authenticate: Bearer")
				}
				if a.status >= 400 {
					if after := w.view.state(t); after != before {
						t.Fatalf("a refused call changed the state:\nbefore %v\nafter  %v", before, after)
					}
				}
			})
			cells++
		}
	}
	t.Logf("auth matrix: %d routes × %d credentials = %d cells", len(routes), len(w.credentials()), cells)
}

// TestTokensKeptSecret: a node's token is returned once, by its
// registration, and never again (lists, pauses, group details, findings, a
// second registration); no token reaches the log or the catalog's files,
// where only hashes are kept; the admin token file is 0600.
func TestTokensKeptSecret(t *testing.T) {
	t.Parallel()
	w := newAuthWorld(t)
	// The registrations in newAuthWorld each returned a token once; more
	// calls that touch nodes and leases:
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/nodes", ""},
		{"POST", fmt.Sprintf("/api/v1/nodes/%d/pause", w.victim), `{"by":"alice"}`},
		{"POST", fmt.Sprintf("/api/v1/nodes/%d/resume", w.victim), ""},
		{"POST", "/api/v1/nodes", `{"name":"w1"}`}, // taken: 409, no token
		{"GET", "/api/v1/groups/g", ""},
		{"GET", "/api/v1/groups", ""},
		{"GET", "/api/v1/findings", ""},
		{"GET", "/api/v1/groups/g/ranges", ""},
	} {
		w.raw(t, c.method, c.path, "Bearer "+w.admin, c.body)
	}
	for _, tok := range []string{w.w1, w.w2, w.gone, "lhn_nonsense"} {
		w.raw(t, "POST", "/api/v1/leases", "Bearer "+tok, "")
		w.raw(t, "GET", "/api/v1/nodes", "Bearer "+tok, "")
	}
	w.raw(t, "POST", fmt.Sprintf("/api/v1/leases/%d/heartbeat", w.gid), "Bearer "+w.w1, fmt.Sprintf(`{"fence":%d}`, w.fence))
	// The node's listing names the nodes and nothing of their tokens.
	a := w.raw(t, "GET", "/api/v1/nodes", "Bearer "+w.admin, "")
	if a.status != 200 || !strings.Contains(string(a.body), `"w1"`) {
		t.Fatalf("node list: %d %s", a.status, a.body)
	}

	log := w.log.String()
	for who, tok := range w.tokens {
		if strings.Contains(log, tok) {
			t.Errorf("%s's token is in the node's log", who)
		}
	}
	// Only hashes are stored: no token in any file of the data dir but
	// admin.token itself (catalog, its WAL, snapshots).
	err := filepath.Walk(w.node.DataDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || filepath.Base(path) == "admin.token" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for who, tok := range w.tokens {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("%s's token is stored in %s", who, filepath.Base(path))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		want os.FileMode
	}{
		{"admin.token", 0o600},
		{".", 0o700},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, ".", "Dot"), func(t *testing.T) {
			info, err := os.Stat(filepath.Join(w.node.DataDir, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Mode().Perm(); got != tc.want {
				t.Fatalf("%s: got mode %v, want %v", tc.name, got, tc.want)
			}
		})
	}
	b, err := os.ReadFile(filepath.Join(w.node.DataDir, "admin.token"))
	if err != nil || strings.TrimSpace(string(b)) != w.admin {
		t.Fatalf("admin.token does not hold the admin token: %v", err)
	}
}

// TestNodeCannotTouchAnothersLease: w1, naming w2's group, range and fence
// exactly, is refused with 409 lease_lost on every holder call, and w2's
// lease, range and window are as they were; after w2 releases, its old
// fence opens nothing for w1 either.
func TestNodeCannotTouchAnothersLease(t *testing.T) {
	t.Parallel()
	w := newBadWorld(t)
	h, hf, hr := w.hid, w.hfence, w.hr
	calls := []struct {
		name, method, path, body string
		hdr                      []string
	}{
		{"Next", "POST", fmt.Sprintf("/leases/%d/next", h), fmt.Sprintf(`{"fence":%d}`, hf), nil},
		{"Heartbeat", "POST", fmt.Sprintf("/leases/%d/heartbeat", h), fmt.Sprintf(`{"fence":%d}`, hf), nil},
		{"Release", "POST", fmt.Sprintf("/leases/%d/release", h), fmt.Sprintf(`{"fence":%d}`, hf), nil},
		{"Progress", "POST", fmt.Sprintf("/ranges/%d/progress", hr), fmt.Sprintf(`{"fence":%d,"next":2}`, hf), nil},
		{"Finish", "POST", fmt.Sprintf("/ranges/%d/finish", hr), fmt.Sprintf(`{"fence":%d,"headers":1}`, hf), nil},
		{"SnapshotGet", "GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", h, hf), "", nil},
		{"SnapshotPut", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=7", h, hf), "window", nil},
		{"SnapshotPutGzip", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=7", h, hf), string(w.window), []string{"Content-Type", "application/gzip"}},
	}
	run := func(t *testing.T, phase string) {
		for _, c := range calls {
			t.Run(phase+"/"+c.name, func(t *testing.T) {
				before := w.view.state(t)
				a := w.do(t, c.method, c.path, w.w1, []byte(c.body), c.hdr...)
				if a.status != 409 || a.code() != "lease_lost" {
					t.Fatalf("got %d %s, want 409 lease_lost", a.status, a.body)
				}
				if after := w.view.state(t); after != before {
					t.Fatalf("the state changed:\nbefore %v\nafter  %v", before, after)
				}
			})
		}
	}
	run(t, "WhileHeld")
	d := w.do(t, "GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", h, hf), w.w2, nil)
	if d.status != 200 || !bytes.Equal(d.body, w.w2window) {
		t.Fatalf("w2's window after w1's attempts: %d, %d bytes", d.status, len(d.body))
	}
	w.must(t, "POST", fmt.Sprintf("/leases/%d/release", h), w.w2, fmt.Sprintf(`{"fence":%d}`, hf), 200)
	run(t, "AfterRelease")
}
