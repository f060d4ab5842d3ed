package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"leasehold/internal/nodetest"
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
	w := newWorld(t, nodetest.Options{})
	self := w.node.URL
	b := &browser{t: t, url: w.node.URL}
	pages := []string{"/", "/groups", "/groups?q=g", "/groups/g", "/groups/g/snapshot", "/nodes"}
	actions := []string{"/nodes/1/pause", "/nodes/1/resume", "/ranges/1/retry", "/signout"}

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
			if r := s.do("POST", "/nodes/1/pause", origin, url.Values{}); r.StatusCode != http.StatusForbidden {
				t.Errorf("pause with Origin %q: %d, want 403", origin, r.StatusCode)
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
	if page := overview(); !strings.Contains(page, `id="no-findings"`) || !strings.Contains(page, `<td id="backlog-tail">9</td>`) {
		t.Fatalf("overview before the TTL: want no findings and a backlog of 9:\n%s", page)
	}
	clock.Advance(90 * time.Second)
	page := overview()
	stale, quiet := strings.Index(page, ">range_stale<"), strings.Index(page, ">lease_quiet<")
	if stale < 0 || quiet < 0 || !strings.Contains(page, "<td>1m30s</td>") {
		t.Fatalf("overview after the TTL: want range_stale and lease_quiet aged 1m30s:\n%s", page)
	}
}
