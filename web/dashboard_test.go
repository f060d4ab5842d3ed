package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/web"
)

// browser is a raw HTTP client that does not follow redirects, so each
// answer is seen as sent.
type browser struct {
	t      *testing.T
	url    string
	cookie string
}

func (b *browser) do(method, path, origin string, form url.Values) *http.Response {
	b.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, b.url+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "leasehold_session", Value: b.cookie})
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// get fetches a page and returns its status, where it sends the browser
// and its body.
func (b *browser) get(path string) (int, string, string) {
	b.t.Helper()
	req, err := http.NewRequest("GET", b.url+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "leasehold_session", Value: b.cookie})
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(body)
}

// signedIn is a browser signed in at url.
func signedIn(t *testing.T, url, token string) *browser {
	t.Helper()
	b := &browser{t: t, url: url}
	c, r := b.signIn(token, url)
	if c == nil {
		t.Fatalf("sign-in at %s: %d, no session", url, r.StatusCode)
	}
	b.cookie = c.Value
	return b
}

// signIn signs in with token and returns the session cookie ("" when
// refused) and the answer.
func (b *browser) signIn(token, origin string) (*http.Cookie, *http.Response) {
	resp := b.do("POST", "/signin", origin, url.Values{"token": {token}})
	for _, c := range resp.Cookies() {
		if c.Name == "leasehold_session" && c.Value != "" {
			return c, resp
		}
	}
	return nil, resp
}

func jsonList(t *testing.T, a answer) []map[string]any {
	t.Helper()
	var l []map[string]any
	if err := json.Unmarshal(a.body, &l); err != nil {
		t.Fatalf("answer %d is not a JSON list: %q", a.status, a.body)
	}
	return l
}

func (w *world) paused(t *testing.T, name string) bool {
	t.Helper()
	for _, n := range jsonList(t, w.j("GET", "/nodes", w.admin, "")) {
		if n["name"] == name {
			return n["paused"] == true
		}
	}
	t.Fatalf("node %s not listed", name)
	return false
}

// TestDashboardSecurity: without a session every page sends the browser
// to sign-in and every action is refused; a wrong token gets no session;
// an action from another origin is refused even with a session; the JSON
// API still takes only bearer tokens.
func TestDashboardSecurity(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	self := w.node.URL
	b := &browser{t: t, url: w.node.URL}
	pages := []string{"/", "/groups", "/groups?q=g", "/groups?state=failing", "/groups?state=idle&sort=state", "/groups/g", "/groups/g/snapshot", "/nodes", "/fleet"}
	actions := []string{"/nodes/1/pause", "/nodes/1/resume", "/ranges/1/retry", "/groups/g/quarantine/lift", "/groups/g/window/drop", "/signout"}

	t.Run("NoSession", func(t *testing.T) {
		for _, p := range pages {
			if r := b.do("GET", p, "", nil); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/signin" {
				t.Errorf("GET %s: %d to %q, want 303 to /signin", p, r.StatusCode, r.Header.Get("Location"))
			}
		}
		for _, p := range actions {
			if r := b.do("POST", p, self, url.Values{}); r.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s: %d, want 403", p, r.StatusCode)
			}
		}
		if w.paused(t, "w1") {
			t.Fatal("w1 paused without a session")
		}
	})
	t.Run("ForgedSession", func(t *testing.T) {
		b := &browser{t: t, url: w.node.URL, cookie: strings.Repeat("ab", 32)}
		if r := b.do("GET", "/", "", nil); r.StatusCode != http.StatusSeeOther {
			t.Errorf("GET / with a made-up session: %d, want 303", r.StatusCode)
		}
		if r := b.do("POST", "/nodes/1/pause", self, url.Values{}); r.StatusCode != http.StatusForbidden {
			t.Errorf("pause with a made-up session: %d, want 403", r.StatusCode)
		}
	})
	t.Run("WrongToken", func(t *testing.T) {
		for _, tok := range []string{"", "lha_wrong", w.admin + "x", w.w1} {
			if c, r := b.signIn(tok, self); c != nil || r.StatusCode != http.StatusUnauthorized {
				t.Errorf("sign-in with %q: %d, cookie %v; want 401 and no session", tok, r.StatusCode, c)
			}
		}
	})
	t.Run("SignInFromElsewhere", func(t *testing.T) {
		if c, r := b.signIn(w.admin, "http://evil.example"); c != nil || r.StatusCode != http.StatusForbidden {
			t.Errorf("sign-in from another origin: %d, cookie %v; want 403", r.StatusCode, c)
		}
	})

	c, r := b.signIn(w.admin, self)
	if c == nil || r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, no session", r.StatusCode)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || len(c.Value) != 64 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, a 32-byte random id", c)
	}
	s := &browser{t: t, url: w.node.URL, cookie: c.Value}

	t.Run("SignedIn", func(t *testing.T) {
		for _, p := range pages {
			want := http.StatusOK
			if p == "/groups/g/snapshot" {
				want = http.StatusNoContent // g has no snapshot yet
			}
			if r := s.do("GET", p, "", nil); r.StatusCode != want {
				t.Errorf("GET %s signed in: %d, want %d", p, r.StatusCode, want)
			}
		}
	})
	t.Run("ForgedOrigin", func(t *testing.T) {
		for _, origin := range []string{"http://evil.example", "null", "http://127.0.0.1:1", ""} {
			for _, a := range []string{"/nodes/1/pause", "/groups/g/quarantine/lift", "/groups/g/window/drop"} {
				if r := s.do("POST", a, origin, url.Values{}); r.StatusCode != http.StatusForbidden {
					t.Errorf("POST %s with Origin %q: %d, want 403", a, origin, r.StatusCode)
				}
			}
		}
		if w.paused(t, "w1") {
			t.Fatal("w1 paused from a forged origin")
		}
	})
	t.Run("SameOrigin", func(t *testing.T) {
		if r := s.do("POST", "/nodes/1/pause", self, url.Values{}); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("pause: %d, want 303", r.StatusCode)
		}
		if !w.paused(t, "w1") {
			t.Fatal("w1 not paused by the dashboard")
		}
		if r := s.do("POST", "/nodes/1/resume", self, url.Values{}); r.StatusCode != http.StatusSeeOther || w.paused(t, "w1") {
			t.Fatalf("resume: %d", r.StatusCode)
		}
	})
	t.Run("APIKeepsBearerTokens", func(t *testing.T) {
		if r := s.do("GET", "/api/v1/nodes", "", nil); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("API with only a session cookie: %d, want 401", r.StatusCode)
		}
	})
	t.Run("SignOut", func(t *testing.T) {
		if r := s.do("POST", "/signout", self, url.Values{}); r.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", r.StatusCode)
		}
		if r := s.do("GET", "/", "", nil); r.StatusCode != http.StatusSeeOther {
			t.Errorf("GET / after sign-out: %d, want 303", r.StatusCode)
		}
	})
}

// TestDashboardRetry: the retry button on a failed range plans it again.
func TestDashboardRetry(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{MaxAttempts: 1})
	if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fmt.Sprintf(`{"fence":%d}`, w.fence)); a.status != 200 {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	rangeStatus := func() string {
		for _, r := range w.j("GET", "/groups/g/ranges", w.admin, "").json(t)["ranges"].([]any) {
			if m := r.(map[string]any); int64(m["id"].(float64)) == w.rangeID {
				return m["status"].(string)
			}
		}
		return ""
	}
	if s := rangeStatus(); s != "failed" {
		t.Fatalf("range %d is %s after its only attempt, want failed", w.rangeID, s)
	}
	b := &browser{t: t, url: w.node.URL}
	c, _ := b.signIn(w.admin, w.node.URL)
	if c == nil {
		t.Fatal("no session")
	}
	b.cookie = c.Value
	// The back address is followed only when it is a path on this node.
	r := b.do("POST", fmt.Sprintf("/ranges/%d/retry", w.rangeID), w.node.URL, url.Values{"back": {"//evil.example/"}})
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/" {
		t.Fatalf("retry: %d to %q, want 303 to /", r.StatusCode, r.Header.Get("Location"))
	}
	if s := rangeStatus(); s != "planned" {
		t.Fatalf("range %d is %s after retry, want planned", w.rangeID, s)
	}
}

// TestDashboardOverviewFindings: the overview lists the watchman's
// findings with their ages, and the backlog apart from them.
func TestDashboardOverviewFindings(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	w := newWorld(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute})
	b := &browser{t: t, url: w.node.URL}
	c, _ := b.signIn(w.admin, w.node.URL)
	if c == nil {
		t.Fatal("no session")
	}
	overview := func() string {
		req, _ := http.NewRequest("GET", w.node.URL+"/", nil)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	if page := overview(); !strings.Contains(page, `id="no-findings"`) || !strings.Contains(page, `<td data-label="planned" id="backlog-tail">9</td>`) {
		t.Fatalf("overview before the TTL: want no findings and a backlog of 9:\n%s", page)
	}
	clock.Advance(90 * time.Second)
	page := overview()
	stale, quiet := strings.Index(page, ">range_stale<"), strings.Index(page, ">lease_quiet<")
	if stale < 0 || quiet < 0 || !strings.Contains(page, `<td data-label="age">1m30s</td>`) {
		t.Fatalf("overview after the TTL: want range_stale and lease_quiet aged 1m30s:\n%s", page)
	}
}

// fleetState is the nav's fleet state on a page, "" when it has none.
func fleetState(page string) string {
	m := regexp.MustCompile(`<a href="/fleet" id="fleet-state" class="fleet-state (\w+)">([^<]*)</a>`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return m[1] + ": " + m[2]
}

// row is the table row of a page whose attribute attr is value ("" when
// there is none), without its cells' data-label attributes (the labels a
// phone shows), so a want names only what a cell holds.
func row(page, attr, value string) string {
	re := regexp.MustCompile(`(?s)<tr[^>]* ` + attr + `="` + regexp.QuoteMeta(value) + `"[^>]*>.*?</tr>`)
	return cellLabels.ReplaceAllString(re.FindString(page), "")
}

var cellLabels = regexp.MustCompile(` data-label="[^"]*"`)

// TestFleetPageAlone: a node without peer sync has a fleet page that says
// it runs alone, behind the session like every page, and no fleet state
// in its nav.
func TestFleetPageAlone(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	anon := &browser{t: t, url: w.node.URL}
	if status, loc, _ := anon.get("/fleet"); status != http.StatusSeeOther || loc != "/signin" {
		t.Fatalf("GET /fleet without a session: %d to %q, want 303 to /signin", status, loc)
	}
	b := signedIn(t, w.node.URL, w.admin)
	status, _, page := b.get("/fleet")
	if status != http.StatusOK {
		t.Fatalf("GET /fleet: %d\n%s", status, page)
	}
	for _, want := range []string{`id="alone"`, `<code>--nats off</code>`, `<a href="/fleet" aria-current="page">Fleet</a>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the fleet page of a lone node lacks %s:\n%s", want, page)
		}
	}
	for _, unwanted := range []string{`id="peers"`, `id="fleet-connected"`} {
		if strings.Contains(page, unwanted) {
			t.Errorf("the fleet page of a lone node shows %s", unwanted)
		}
	}
	for _, p := range []string{"/", "/groups", "/fleet"} {
		if _, _, page := b.get(p); fleetState(page) != "" || !strings.Contains(page, `href="/fleet"`) {
			t.Errorf("%s of a lone node: nav fleet state %q and a Fleet link? want none and one", p, fleetState(page))
		}
	}
}

// TestFleetPage: a node in a fleet shows its name, its connection to NATS
// as a badge (and in the nav of every page, changing when NATS goes),
// the groups it owns, its peers and their worker nodes as folded into its
// catalog; a peer's group names its owner on the groups table and on its
// page. The fleet status comes from a function over the real catalog, as
// the node's peer sync answers it.
func TestFleetPage(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock() // ages and lags to the second
	// The node's fleet status is the test's (peers, below), read from
	// what the test folds into its catalog.
	var peers func(ctx context.Context) (leasehold.FleetStatus, error)
	w := newWorld(t, nodetest.Options{Clock: clock.Now, Web: web.Options{Peers: func(ctx context.Context) (leasehold.FleetStatus, error) { return peers(ctx) }}})
	db := w.node.DB
	now := w.node.App.Config.NowFunc()
	ctx := context.Background()
	lastB, lastC, seen := now.Add(-90*time.Second), now.Add(-2*time.Second), now.Add(-30*time.Second)
	if err := db.Write(ctx, func(tx *store.Tx) error {
		if err := tx.FoldPeer("node-b", "cat-b", 17, lastB, 4242); err != nil {
			return err
		}
		if err := tx.FoldPeer("node-c", "cat-c", 5, lastC, 4300); err != nil {
			return err
		}
		if err := tx.FoldNode("node-b", store.FleetNode{Node: leasehold.Node{Name: "wb1", Capacity: 2, Held: 1, LastSeenAt: &seen}}, 3); err != nil {
			return err
		}
		if err := tx.FoldNode("node-c", store.FleetNode{Node: leasehold.Node{Name: "wc1", Capacity: 1, Paused: true, PausedBy: "ops", PausedAt: &seen}}, 3); err != nil {
			return err
		}
		_, _, err := tx.FoldGroup("node-b", store.PeerGroup{
			Group:    leasehold.Group{Name: "peer.g", Priority: 1, Active: true, RangeSize: 100, Start: 1, TailEnd: 1000, HistoryFloor: 1, CreatedAt: now},
			ClaimRev: 3, Fence: 7, Holder: "wb1", LeasedAt: &seen, HeartbeatAt: &seen,
		}, 3)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var connected atomic.Bool
	connected.Store(true)
	var failing atomic.Bool
	peers = func(ctx context.Context) (leasehold.FleetStatus, error) {
		if failing.Load() {
			return leasehold.FleetStatus{}, leasehold.Errorf(leasehold.KindUnavailable, "the fleet is not reachable")
		}
		ps, err := db.Peers(ctx)
		for i := range ps {
			// node-b is up and owns a group; node-c was not seen for the
			// claim TTL.
			ps[i].State, ps[i].StateSince = "up", &lastB
			if ps[i].Name == "node-b" {
				ps[i].Owns = 1
			} else {
				ps[i].State, ps[i].StateSince = "down", &lastC
			}
		}
		return leasehold.FleetStatus{Name: "node-a", Enabled: true, Connected: connected.Load(), Owned: 1, Unpublished: 3, Published: 977, Peers: ps}, err
	}
	anon := &browser{t: t, url: w.node.URL}
	if status, loc, _ := anon.get("/fleet"); status != http.StatusSeeOther || loc != "/signin" {
		t.Fatalf("GET /fleet without a session: %d to %q, want 303 to /signin", status, loc)
	}
	b := signedIn(t, w.node.URL, w.admin)

	t.Run("Connected", func(t *testing.T) {
		status, _, page := b.get("/fleet")
		if status != http.StatusOK {
			t.Fatalf("GET /fleet: %d\n%s", status, page)
		}
		for _, want := range []string{
			`<b id="fleet-name">node-a</b>`,
			`<b id="fleet-connected"><span class="badge ok">connected</span></b>`,
			`<b id="fleet-owned">1</b>`,
			`<b id="fleet-peers">2</b>`,
			`<b id="fleet-unpublished"><span class="bad">3</span></b><span>changes not yet published (last at stream position 977)</span>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("the fleet page lacks %s:\n%s", want, page)
			}
		}
		if strings.Contains(page, `id="alone"`) || strings.Contains(page, `id="fleet-cut-off"`) {
			t.Errorf("a connected node's fleet page says it runs alone or is cut off")
		}
		cases := []struct {
			attr, value string
			want        []string
		}{
			{"data-peer", "node-b", []string{"<td>node-b</td>", `<span class="badge ok">up</span> <span class="note">since ` + stamp(lastB), stamp(lastB), "1m30s ago", "<td>4242</td>", "90.0 s", "<td>1</td>"}},
			{"data-peer", "node-c", []string{"<td>node-c</td>", `<span class="badge down">down</span> <span class="note">since ` + stamp(lastC), stamp(lastC), "2s ago", "<td>4300</td>", "2.0 s"}},
			{"data-node", "wb1", []string{"<td>node-b</td><td>wb1</td>", "active", "<td>1</td>", "30s ago"}},
			{"data-node", "wc1", []string{"<td>node-c</td><td>wc1</td>", `<span class="node-paused paused">paused</span> by ops`, "never"}},
		}
		for _, c := range cases {
			r := row(page, c.attr, c.value)
			if r == "" {
				t.Errorf("no row %s=%q on the fleet page:\n%s", c.attr, c.value, page)
				continue
			}
			for _, want := range c.want {
				if !strings.Contains(r, want) {
					t.Errorf("row %s=%q lacks %q: %s", c.attr, c.value, want, r)
				}
			}
		}
		for _, p := range []string{"/", "/groups", "/groups/g", "/nodes", "/fleet"} {
			if _, _, page := b.get(p); fleetState(page) != "ok: node-a · connected" {
				t.Errorf("%s: nav fleet state %q, want ok: node-a · connected", p, fleetState(page))
			}
		}
	})
	t.Run("OwnedByPeer", func(t *testing.T) {
		_, _, page := b.get("/groups")
		peer, own := row(page, "data-group", "peer.g"), row(page, "data-group", "g")
		if !strings.Contains(peer, `<span class="owner" data-origin="node-b">owned by node-b</span>`) || !strings.Contains(peer, "<td>wb1</td>") {
			t.Errorf("the groups table's row of peer.g names no owner node-b or holder wb1: %s", peer)
		}
		if own == "" || strings.Contains(own, "owned by") {
			t.Errorf("the groups table's row of g, this node's own: %q", own)
		}
		_, _, page = b.get("/groups/peer.g")
		if !strings.Contains(page, `id="owner" data-origin="node-b">owned by <b>node-b</b>`) || !strings.Contains(page, `<dd id="holder">wb1</dd>`) {
			t.Errorf("peer.g's page names no owner node-b or holder wb1:\n%s", page)
		}
		if _, _, page = b.get("/groups/g"); strings.Contains(page, `id="owner"`) || !strings.Contains(page, `<dd id="holder">w1</dd>`) {
			t.Errorf("g's page, this node's own, names an owner or not its holder w1:\n%s", page)
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		connected.Store(false)
		defer connected.Store(true)
		_, _, page := b.get("/fleet")
		if !strings.Contains(page, `<b id="fleet-connected"><span class="badge down">NATS unreachable</span></b>`) || !strings.Contains(page, `id="fleet-cut-off"`) {
			t.Errorf("the fleet page of a node cut off from NATS shows no red badge:\n%s", page)
		}
		if _, _, page := b.get("/groups"); fleetState(page) != "down: node-a · NATS unreachable" {
			t.Errorf("nav fleet state %q, want down: node-a · NATS unreachable", fleetState(page))
		}
	})
	t.Run("StatusFails", func(t *testing.T) {
		failing.Store(true)
		defer failing.Store(false)
		if status, _, page := b.get("/groups"); status != http.StatusOK || fleetState(page) != "unknown: fleet state unknown" {
			t.Errorf("/groups while the fleet status fails: %d, nav %q; want 200 and the state unknown", status, fleetState(page))
		}
		if status, _, _ := b.get("/fleet"); status != http.StatusServiceUnavailable {
			t.Errorf("/fleet while the fleet status fails: %d, want 503", status)
		}
	})
}

// stamp is how the fleet page prints an instant.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// TestFleetPageInBrowser: in real headless Chromium, the nav's fleet
// state follows NATS without a reload on any page (live.js swaps it with
// the page's main), and the fleet page's badge turns red.
func TestFleetPageInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	var connected atomic.Bool
	connected.Store(true)
	// The node's fleet status is the test's, its peers read from what the
	// test folds into its catalog.
	var db *store.DB
	peers := func(ctx context.Context) (leasehold.FleetStatus, error) {
		ps, err := db.Peers(ctx)
		return leasehold.FleetStatus{Name: "node-a", Enabled: true, Connected: connected.Load(), Owned: 1, Peers: ps}, err
	}
	w := newWorld(t, nodetest.Options{Web: web.Options{Peers: peers}})
	db = w.node.DB
	seen := w.node.App.Config.NowFunc().Add(-5 * time.Second)
	if err := w.node.DB.Write(context.Background(), func(tx *store.Tx) error {
		if err := tx.FoldPeer("node-b", "cat-b", 17, seen, 4242); err != nil {
			return err
		}
		return tx.FoldNode("node-b", store.FleetNode{Node: leasehold.Node{Name: "wb1", Capacity: 2, Held: 1, LastSeenAt: &seen}}, 3)
	}); err != nil {
		t.Fatal(err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	do("sign in",
		chromedp.Navigate(w.node.URL+"/signin"),
		chromedp.SendKeys(css(`#token`), w.admin),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#fleet-state.ok`)))
	state, err := chromedp.Run(ctx, chromedp.Text(css(`#fleet-state`)))
	if err != nil || state != "node-a · connected" {
		t.Fatalf("nav fleet state %q (%v), want node-a · connected", state, err)
	}
	do("open the groups page", chromedp.Navigate(w.node.URL+"/groups"), chromedp.WaitVisible(css(`tr[data-group="g"]`)),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	connected.Store(false)
	do("see the nav say NATS is unreachable without a reload",
		chromedp.Poll[chromedp.Void](`window.notReloaded === true && document.querySelector('#fleet-state.down') !== null &&
			document.querySelector('#fleet-state').textContent === "node-a · NATS unreachable"`, chromedp.WithPollingTimeout(30*time.Second)))
	do("open the fleet page", chromedp.Navigate(w.node.URL+"/fleet"), chromedp.WaitVisible(css(`#fleet-connected .badge.down`)),
		chromedp.WaitVisible(css(`#peers tr[data-peer="node-b"]`)), chromedp.WaitVisible(css(`#peer-nodes tr[data-node="wb1"]`)))
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifacts(t), "dashboard-fleet.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet screenshot: %s (%d bytes)", path, len(shot))
}

// TestDashboardBackRefusesControls: a back address with a control
// character (a browser drops a tab or a newline, and "/\t/evil.example"
// becomes "//evil.example") is not followed: the action goes to the
// overview instead.
func TestDashboardBackRefusesControls(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	if a := w.j("PUT", "/groups/free", w.admin, `{"range_size":100}`); a.status != 201 {
		t.Fatalf("create group: %d %s", a.status, a.body)
	}
	b := signedIn(t, w.node.URL, w.admin)
	for _, c := range []struct{ back, want string }{
		{"/groups/free", "/groups/free"},
		{"/\t/evil.example/x", "/"},
		{"/\n/evil.example/x", "/"},
		{"/\r/evil.example/x", "/"},
		{"/\x00/evil.example/x", "/"},
		{"/\x7f/evil.example/x", "/"},
		{"//evil.example/", "/"},
	} {
		r := b.do("POST", "/groups/free/window/drop", w.node.URL, url.Values{"back": {c.back}})
		if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != c.want {
			t.Errorf("back=%q: %d to %q, want 303 to %q", c.back, r.StatusCode, r.Header.Get("Location"), c.want)
		}
	}
}

// TestDashboardOverviewTimelinePaged: the overview shows the counts and
// the chart before the timeline, and the timeline a page of
// ten entries at a time with links to older and newer ones, so
// the page does not grow with the log; a bad page is refused.
func TestDashboardOverviewTimelinePaged(t *testing.T) {
	t.Parallel()
	const timelinePage = 10
	w := newWorld(t, nodetest.Options{})
	for i := range 20 { // 20 admin writes on top of newWorld's
		if a := w.j("PUT", fmt.Sprintf("/groups/p%02d", i), w.admin, `{"range_size":100}`); a.status != 201 {
			t.Fatalf("create p%02d: %d %s", i, a.status, a.body)
		}
	}
	b := signedIn(t, w.node.URL, w.admin)
	entries := regexp.MustCompile(`<tr class="entry[^"]*" data-kind="`)
	status, _, page := b.get("/")
	if status != http.StatusOK {
		t.Fatalf("overview: %d", status)
	}
	tiles, chart, timeline := strings.Index(page, `id="count-groups"`), strings.Index(page, "Throughput, last hour"), strings.Index(page, `id="timeline"`)
	if tiles < 0 || chart < 0 || timeline < tiles || timeline < chart {
		t.Errorf("overview order: tiles at %d, chart at %d, timeline at %d; want the timeline below both", tiles, chart, timeline)
	}
	if n := len(entries.FindAllString(page, -1)); n != timelinePage {
		t.Errorf("overview timeline: %d rows, want %d", n, timelinePage)
	}
	if !strings.Contains(page, `id="timeline-older" href="/?older=10#timeline-box"`) || strings.Contains(page, `id="timeline-newer"`) {
		t.Errorf("first timeline page: want an older link and no newer one:\n%s", page[timeline:])
	}
	if !strings.Contains(page, `<a href="/groups/p19">p19</a>`) {
		t.Error("first timeline page: no entry for the newest write (p19)")
	}
	kept := len(entries.FindAllString(page, -1))
	for skip := timelinePage; ; skip += timelinePage {
		_, _, older := b.get(fmt.Sprintf("/?older=%d", skip))
		n := len(entries.FindAllString(older, -1))
		if n == 0 || n > timelinePage {
			t.Fatalf("/?older=%d: %d rows", skip, n)
		}
		kept += n
		if !strings.Contains(older, fmt.Sprintf(`id="timeline-newer" href="/%s#timeline-box"`, map[bool]string{true: "", false: fmt.Sprintf("?older=%d", skip-timelinePage)}[skip == timelinePage])) {
			t.Errorf("/?older=%d: no link to the newer page", skip)
		}
		if !strings.Contains(older, `id="timeline-older"`) {
			break
		}
	}
	if m := regexp.MustCompile(`\((\d+) kept since`).FindStringSubmatch(page); m == nil || m[1] != strconv.Itoa(kept) {
		t.Errorf("pages showed %d entries, the timeline says it keeps %v", kept, m)
	}
	for _, bad := range []string{"x", "-1", "100000"} {
		if status, _, _ := b.get("/?older=" + bad); status != http.StatusBadRequest {
			t.Errorf("/?older=%s: %d, want 400", bad, status)
		}
	}
}

// TestDashboardGroupWatermarks: the group page shows the water marks its
// source last reported and when, and says so when none were reported.
func TestDashboardGroupWatermarks(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	w := newWorld(t, nodetest.Options{Clock: clock.Now})
	b := signedIn(t, w.node.URL, w.admin)
	if _, _, page := b.get("/groups/g"); !strings.Contains(page, "No water marks reported yet") {
		t.Errorf("group page before a report: want no water marks:\n%s", page)
	}
	if a := w.j("POST", "/groups/g/watermark", w.w1, `{"low":17,"high":1200}`); a.status != 200 {
		t.Fatalf("report: %d %s", a.status, a.body)
	}
	clock.Advance(3 * time.Minute)
	_, _, page := b.get("/groups/g")
	if !strings.Contains(page, `<b id="low">17</b> … <b id="high">1200</b>, last reported 3m00s ago`) {
		t.Errorf("group page after a report: want low 17, high 1200 reported 3m ago:\n%s", page)
	}
}

// TestDeleteGroupEndpoint: DELETE /api/v1/groups/{name} is the admin's
// only: 409 while the group is held, 404 for an unknown one, 204 for an
// unheld one, which is gone after.
func TestDeleteGroupEndpoint(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	if a := w.j("DELETE", "/groups/g", w.w1, ""); a.status != http.StatusForbidden {
		t.Errorf("a worker deleting g: %d %s, want 403", a.status, a.body)
	}
	if a := w.j("DELETE", "/groups/g", w.admin, ""); a.status != http.StatusConflict || !strings.Contains(string(a.body), "held") {
		t.Errorf("deleting held g: %d %s, want 409 saying it is held", a.status, a.body)
	}
	if a := w.j("DELETE", "/groups/nope", w.admin, ""); a.status != http.StatusNotFound {
		t.Errorf("deleting an unknown group: %d %s, want 404", a.status, a.body)
	}
	if a := w.j("PUT", "/groups/x", w.admin, `{"range_size":100}`); a.status != 201 {
		t.Fatalf("create x: %d %s", a.status, a.body)
	}
	if a := w.j("DELETE", "/groups/x", w.admin, ""); a.status != http.StatusNoContent {
		t.Errorf("deleting x: %d %s, want 204", a.status, a.body)
	}
	if a := w.j("GET", "/groups/x", w.admin, ""); a.status != http.StatusNotFound {
		t.Errorf("x after its deletion: %d, want 404", a.status)
	}
}
