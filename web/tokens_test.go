package web_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/web"
)

// nodeID is the id of the named node, as the admin lists it.
func (w *world) nodeID(t *testing.T, name string) int64 {
	t.Helper()
	for _, n := range jsonList(t, w.j("GET", "/nodes", w.admin, "")) {
		if n["name"] == name {
			return int64(n["id"].(float64))
		}
	}
	t.Fatalf("node %s not listed", name)
	return 0
}

// TestRotateNodeToken: a node's token is replaced by the admin or by the
// node itself; the old one is refused from the answer on (even just
// after it was used, when the node remembers it), the new one works,
// another node may not replace it, and a refused call changes no token.
func TestRotateNodeToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	id1, id2 := w.nodeID(t, "w1"), w.nodeID(t, "w2")
	heartbeat := func(token string) int {
		return w.j("POST", fmt.Sprintf("/leases/%d/heartbeat", w.gid), token, fmt.Sprintf(`{"fence":%d}`, w.fence)).status
	}
	if s := heartbeat(w.w1); s != 200 {
		t.Fatalf("heartbeat before: %d", s)
	}
	// Refused calls change nothing.
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{fmt.Sprintf("/nodes/%d/token", id1), w.w2, 403},
		{fmt.Sprintf("/nodes/%d/token", id1), "", 401},
		{fmt.Sprintf("/nodes/%d/token", id1), "lhn_wrong", 401},
		{"/nodes/999/token", w.admin, 404},
		{"/nodes/abc/token", w.admin, 400},
	} {
		if a := w.j("POST", c.path, c.token, ""); a.status != c.want {
			t.Errorf("POST %s: %d %s, want %d", c.path, a.status, a.body, c.want)
		}
	}
	if s := heartbeat(w.w1); s != 200 {
		t.Fatalf("a refused rotation changed w1's token: heartbeat %d", s)
	}
	// The node replaces its own token.
	a := w.j("POST", fmt.Sprintf("/nodes/%d/token", id1), w.w1, "")
	if a.status != 201 {
		t.Fatalf("self rotation: %d %s", a.status, a.body)
	}
	fresh := a.json(t)["token"].(string)
	if !strings.HasPrefix(fresh, "lhn_") || fresh == w.w1 {
		t.Fatalf("new token %q", fresh)
	}
	if s := heartbeat(w.w1); s != 401 {
		t.Errorf("the old token after rotation: %d, want 401", s)
	}
	if s := heartbeat(fresh); s != 200 {
		t.Errorf("the new token: %d, want 200", s)
	}
	// The admin replaces another's.
	a = w.j("POST", fmt.Sprintf("/nodes/%d/token", id2), w.admin, "")
	if a.status != 201 {
		t.Fatalf("admin rotation: %d %s", a.status, a.body)
	}
	if s := w.j("POST", "/leases", w.w2, "").status; s != 401 {
		t.Errorf("w2's old token after the admin rotated it: %d, want 401", s)
	}
	if s := w.j("POST", "/leases", a.json(t)["token"].(string), "").status; s != 200 && s != 204 {
		t.Errorf("w2's new token: %d, want 200 or 204", s)
	}
}

// TestRotateAdminToken: the admin token is replaced at once: the file
// it is kept in holds the new one (0600) when the answer comes, the old
// token and every dashboard session signed in with it are refused, and
// a node's token cannot do it.
func TestRotateAdminToken(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	b := signedIn(t, w.node.URL, w.admin)
	if status, _, _ := b.get("/"); status != 200 {
		t.Fatalf("dashboard before: %d", status)
	}
	if a := w.j("POST", "/admin/token", w.w1, ""); a.status != 403 {
		t.Errorf("a node's token rotating the admin token: %d, want 403", a.status)
	}
	if a := w.j("POST", "/admin/token", "lha_wrong_wrong_wrong", ""); a.status != 401 {
		t.Errorf("a wrong token rotating the admin token: %d, want 401", a.status)
	}
	if a := w.j("GET", "/nodes", w.admin, ""); a.status != 200 {
		t.Fatalf("refused rotations changed the admin token: %d", a.status)
	}
	a := w.j("POST", "/admin/token", w.admin, "")
	if a.status != 201 {
		t.Fatalf("rotation: %d %s", a.status, a.body)
	}
	fresh := a.json(t)["token"].(string)
	path := filepath.Join(w.node.DataDir, "admin.token")
	got, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(got)) != fresh {
		t.Errorf("admin.token holds %q, %v; want the new token", got, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.token mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if a := w.j("GET", "/nodes", w.admin, ""); a.status != 401 {
		t.Errorf("the old admin token after rotation: %d, want 401", a.status)
	}
	if a := w.j("GET", "/nodes", fresh, ""); a.status != 200 {
		t.Errorf("the new admin token: %d, want 200", a.status)
	}
	if status, loc, _ := b.get("/"); status != http.StatusSeeOther || loc != "/signin" {
		t.Errorf("a session signed in with the old token: %d to %q, want 303 to /signin", status, loc)
	}
	if c, _ := (&browser{t: t, url: w.node.URL}).signIn(w.admin, w.node.URL); c != nil {
		t.Errorf("signed in with the old token")
	}
	signedIn(t, w.node.URL, fresh)
}

// TestRotateAdminTokenDirOfOthers is the second review's R-N4 token
// case: a rotation whose token file's directory another user owns (with
// a link planted at <file>.tmp to a file of theirs), or one every user
// can write, is refused (503) and changes nothing: the file, the link and
// its target as they were, the old token still taken. Once the directory
// is the node's own again the rotation goes through.
func TestRotateAdminTokenDirOfOthers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a directory to another user")
	}
	w := newWorld(t, nodetest.Options{})
	dir := w.node.DataDir
	path := filepath.Join(dir, "admin.token")
	stolen := filepath.Join(t.TempDir(), "stolen")
	if err := os.WriteFile(stolen, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stolen, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, c := range []struct {
		name       string
		uid        int
		mode       os.FileMode
		wantInBody string
	}{
		{"OwnedByNobody", 65534, 0o700, "owned by uid 65534"},
		{"WritableByAll", 0, 0o777, "can be written by other users"},
	} {
		if err := os.Chown(dir, c.uid, -1); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		a := w.j("POST", "/admin/token", w.admin, "")
		if a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), c.wantInBody) {
			t.Errorf("%s: rotation %d %s, want 503 naming %q", c.name, a.status, a.body, c.wantInBody)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, before) {
			t.Errorf("%s: admin.token holds %q after a refused rotation, want %q", c.name, got, before)
		}
		if got, _ := os.ReadFile(stolen); len(got) != 0 {
			t.Errorf("%s: the planted link's target holds %q, want it empty", c.name, got)
		}
		if target, err := os.Readlink(path + ".tmp"); err != nil || target != stolen {
			t.Errorf("%s: the planted link is %q, %v; want it left as it was", c.name, target, err)
		}
		if a := w.j("GET", "/nodes", w.admin, ""); a.status != 200 {
			t.Errorf("%s: the old admin token after a refused rotation: %d, want 200", c.name, a.status)
		}
	}
	if err := errors.Join(os.Chown(dir, 0, -1), os.Chmod(dir, 0o700)); err != nil {
		t.Fatal(err)
	}
	a := w.j("POST", "/admin/token", w.admin, "")
	if a.status != 201 {
		t.Fatalf("rotation in the node's own directory: %d %s, want 201", a.status, a.body)
	}
	if got, _ := os.ReadFile(stolen); len(got) != 0 {
		t.Errorf("the link's target holds %q after the rotation, want it empty", got)
	}
}

// syncBuffer is a log sink the node's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuthFailures: refused tokens and sign-ins are counted by kind and
// logged, once a minute from one address, with the count and never the
// token.
func TestAuthFailures(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	w := newWorld(t, nodetest.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 50 {
		w.j("GET", "/nodes", fmt.Sprintf("lha_guess_admin_%d", i), "")
		w.j("POST", "/leases", fmt.Sprintf("lhn_guess_node_%d", i), "")
		(&browser{t: t, url: w.node.URL}).signIn(fmt.Sprintf("lha_guess_signin_%d", i), w.node.URL)
	}
	for _, kind := range []string{"admin", "node", "dashboard"} {
		if got := w.metric(`leasehold_auth_failures_total{kind="` + kind + `"}`); got != 50 {
			t.Errorf("auth failures of kind %s: %v, want 50", kind, got)
		}
	}
	lines := strings.Count(logs.String(), "authentication failed")
	if lines < 1 || lines > 3 {
		t.Errorf("%d log lines for 150 failures from one address in well under a minute, want 1 to 3:\n%s", lines, logs.String())
	}
	if strings.Contains(logs.String(), "guess") {
		t.Errorf("the log carries a token presented:\n%s", logs.String())
	}
}

// TestConnectionCap: connections over the cap, and over the cap per
// remote address, are closed at once and counted; closing one makes
// room again.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	metrics := web.NewMetrics()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := web.LimitConnections(ln, 5, 3, metrics)
	defer lim.Close()
	// An echo of one byte a connection, so a client sees it served.
	go func() {
		for {
			c, err := lim.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					c.Write(b)
				}
			}()
		}
	}()
	served := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return false
		}
		_, err := c.Read(make([]byte, 1))
		return err == nil
	}
	dial := func(local string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var open []net.Conn
	for range 3 {
		c := dial("127.0.0.1")
		if !served(c) {
			t.Fatal("a connection under the caps was not served")
		}
		open = append(open, c)
	}
	if served(dial("127.0.0.1")) {
		t.Error("a 4th connection from one address was served, cap 3")
	}
	for range 2 {
		if c := dial("127.0.0.2"); !served(c) {
			t.Fatal("another address's connection under the caps was not served")
		}
	}
	if served(dial("127.0.0.3")) {
		t.Error("a 6th connection was served, cap 5")
	}
	open[0].Close()
	poll.Eventually(t, 10*time.Second, "room made by closing a connection", func() bool { return served(dial("127.0.0.1")) })
	for _, c := range []struct {
		series string
		min    float64
	}{
		{`leasehold_connections_refused_total{reason="per_remote"}`, 1},
		{`leasehold_connections_refused_total{reason="total"}`, 1},
	} {
		if got := scrape(t, metrics, c.series); got < c.min {
			t.Errorf("%s = %v, want at least %v", c.series, got, c.min)
		}
	}
}

// scrape reads one sample of m (0 when absent).
func scrape(t *testing.T, m *web.Metrics, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}
