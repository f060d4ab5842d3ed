package web_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
)

// api is a tiny raw client: the tests speak HTTP as curl would.
type api struct {
	t   *testing.T
	url string
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %q", a.status, a.body)
	}
	return m
}

func (a answer) code() string {
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(a.body, &e)
	return e.Error.Code
}

func (c api) do(method, path, token string, body io.Reader, hdr ...string) answer {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func (c api) j(method, path, token, body string) answer {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return c.do(method, path, token, r)
}

func num(m map[string]any, path ...string) int64 {
	var v any = m
	for _, p := range path {
		v = v.(map[string]any)[p]
	}
	return int64(v.(float64))
}

type world struct {
	api
	node          *nodetest.Node
	admin, w1, w2 string
	gid, fence    int64
	rangeID       int64
}

// newWorld: a node with group g (ranges of 100 from 1 to 1000), two
// workers, w1 holding g at a fence with its first range in work.
func newWorld(t *testing.T, o nodetest.Options) *world {
	n := nodetest.Start(t, o)
	w := &world{api: api{t, n.URL + "/api/v1"}, node: n, admin: n.AdminToken}
	if a := w.j("PUT", "/groups/g", w.admin, `{"range_size":100}`); a.status != 201 {
		t.Fatalf("create group: %d %s", a.status, a.body)
	}
	if a := w.j("POST", "/groups/g/tail", w.admin, `{"high":1000}`); a.status != 200 || num(a.json(t), "planned") != 10 {
		t.Fatalf("plan: %d %s", a.status, a.body)
	}
	w.w1 = w.j("POST", "/nodes", w.admin, `{"name":"w1"}`).json(t)["token"].(string)
	w.w2 = w.j("POST", "/nodes", w.admin, `{"name":"w2"}`).json(t)["token"].(string)
	l := w.j("POST", "/leases", w.w1, "")
	if l.status != 200 {
		t.Fatalf("lease: %d %s", l.status, l.body)
	}
	w.gid, w.fence = num(l.json(t), "group", "id"), num(l.json(t), "fence")
	r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fmt.Sprintf(`{"fence":%d}`, w.fence))
	if r.status != 200 {
		t.Fatalf("next: %d %s", r.status, r.body)
	}
	w.rangeID = num(r.json(t), "range", "id")
	return w
}

// TestEndpoints: each endpoint's success and its errors, with the
// documented status and error code.
func TestEndpoints(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	g, f, r := w.gid, w.fence, w.rangeID
	fb := func(extra string) string { return fmt.Sprintf(`{"fence":%d%s}`, f, extra) }
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"NodesList", "GET", "/nodes", w.admin, "", 200, ""},
		{"NodesNoToken", "GET", "/nodes", "", "", 401, "unauthorized"},
		{"NodesWrongToken", "GET", "/nodes", "nope", "", 401, "unauthorized"},
		{"NodesWorkerToken", "GET", "/nodes", w.w1, "", 403, "forbidden"},
		{"NodeDuplicate", "POST", "/nodes", w.admin, `{"name":"w1"}`, 409, "conflict"},
		{"NodeBadName", "POST", "/nodes", w.admin, `{"name":""}`, 400, "bad_request"},
		{"NodeUnknownField", "POST", "/nodes", w.admin, `{"name":"x","colour":1}`, 400, "bad_request"},
		{"NodeWrongType", "POST", "/nodes", w.admin, `{"name":7}`, 400, "bad_request"},
		{"NodeBadBand", "POST", "/nodes", w.admin, `{"name":"x","priority_min":5,"priority_max":1}`, 400, "bad_request"},
		{"PauseMissing", "POST", "/nodes/99/pause", w.admin, "", 404, "not_found"},
		{"PauseBadID", "POST", "/nodes/x/pause", w.admin, "", 400, "bad_request"},
		{"DeleteMissing", "DELETE", "/nodes/99", w.admin, "", 404, "not_found"},
		{"GroupUpdate", "PUT", "/groups/g", w.admin, `{"priority":3}`, 200, ""},
		{"GroupBadName", "PUT", "/groups/-x", w.admin, "", 400, "bad_request"},
		{"GroupStartChange", "PUT", "/groups/g", w.admin, `{"start":9}`, 409, "conflict"},
		{"GroupBadRangeSize", "PUT", "/groups/h", w.admin, `{"range_size":0}`, 400, "bad_request"},
		{"GroupsList", "GET", "/groups?limit=10", w.admin, "", 200, ""},
		{"GroupsBadLimit", "GET", "/groups?limit=0", w.admin, "", 400, "bad_request"},
		{"GroupGet", "GET", "/groups/g", w.admin, "", 200, ""},
		{"GroupMissing", "GET", "/groups/nope", w.admin, "", 404, "not_found"},
		{"TailMissingHigh", "POST", "/groups/g/tail", w.admin, `{}`, 400, "bad_request"},
		{"TailMissingGroup", "POST", "/groups/nope/tail", w.admin, `{"high":5}`, 404, "not_found"},
		{"TailTooMany", "POST", "/groups/g/tail", w.admin, `{"high":100000000000}`, 422, "unprocessable"},
		{"HistoryNegative", "POST", "/groups/g/history", w.admin, `{"low":-5}`, 400, "bad_request"},
		{"Ranges", "GET", "/groups/g/ranges?status=planned&limit=5", w.admin, "", 200, ""},
		{"RangesBadStatus", "GET", "/groups/g/ranges?status=weird", w.admin, "", 400, "bad_request"},
		{"RetryNotFailed", "POST", fmt.Sprintf("/ranges/%d/retry", r), w.admin, "", 409, "conflict"},
		{"RetryMissing", "POST", "/ranges/999/retry", w.admin, "", 404, "not_found"},
		{"RulesPut", "PUT", "/rules", w.admin, `{"a":1}`, 201, ""},
		{"RulesNotObject", "PUT", "/rules", w.admin, `[1]`, 400, "bad_request"},
		{"RulesGet", "GET", "/rules", w.admin, "", 200, ""},
		{"Findings", "GET", "/findings", w.admin, "", 200, ""},
		{"PeersAlone", "GET", "/peers", w.admin, "", 200, ""},
		{"AdminSnapshotWhileHeld", "PUT", "/groups/g/snapshot?next=1", w.admin, "x", 409, "conflict"},
		{"AdminSnapshotNone", "GET", "/groups/g/snapshot", w.admin, "", 204, ""},
		{"LeaseAdminToken", "POST", "/leases", w.admin, "", 403, "forbidden"},
		{"LeaseNoToken", "POST", "/leases", "", "", 401, "unauthorized"},
		{"LeaseNothingLeft", "POST", "/leases", w.w2, "", 204, ""},
		{"NextStaleFence", "POST", fmt.Sprintf("/leases/%d/next", g), w.w1, `{"fence":0}`, 409, "lease_lost"},
		{"NextOtherNode", "POST", fmt.Sprintf("/leases/%d/next", g), w.w2, fb(""), 409, "lease_lost"},
		{"NextNoFence", "POST", fmt.Sprintf("/leases/%d/next", g), w.w1, `{}`, 400, "bad_request"},
		{"NextMissingGroup", "POST", "/leases/999/next", w.w1, fb(""), 404, "not_found"},
		{"NextInWork", "POST", fmt.Sprintf("/leases/%d/next", g), w.w1, fb(""), 200, ""},
		{"Heartbeat", "POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, fb(""), 200, ""},
		{"ProgressOK", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, fb(`,"next":50`), 200, ""},
		{"ProgressBackwards", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, fb(`,"next":10`), 422, "unprocessable"},
		{"ProgressPastEnd", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, fb(`,"next":102`), 422, "unprocessable"},
		{"ProgressOtherNode", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w2, fb(`,"next":60`), 409, "lease_lost"},
		{"ProgressMissing", "POST", "/ranges/999/progress", w.w1, fb(`,"next":60`), 404, "not_found"},
		{"ProgressNoNext", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, fb(""), 400, "bad_request"},
		{"FinishOK", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, fb(`,"headers":100`), 200, ""},
		{"FinishNegative", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, fb(`,"headers":-1`), 400, "bad_request"},
		{"SnapshotNoneYet", "GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", g, f), w.w1, "", 204, ""},
		{"SnapshotNoFence", "PUT", fmt.Sprintf("/leases/%d/snapshot?next=5", g), w.w1, "x", 400, "bad_request"},
		{"SnapshotStale", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=0&next=5", g), w.w1, "x", 409, "lease_lost"},
		{"ReleaseOtherNode", "POST", fmt.Sprintf("/leases/%d/release", g), w.w2, fb(""), 409, "lease_lost"},
		{"Release", "POST", fmt.Sprintf("/leases/%d/release", g), w.w1, fb(""), 200, ""},
		{"ReleaseAgain", "POST", fmt.Sprintf("/leases/%d/release", g), w.w1, fb(""), 409, "lease_lost"},
		{"NoRoute", "GET", "/nope", w.admin, "", 404, "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			a := w.j(tc.method, tc.path, tc.token, tc.body)
			if a.status != tc.status || a.code() != tc.code {
				t.Fatalf("%s %s: got %d %q (%s), want %d %q", tc.method, tc.path, a.status, a.code(), a.body, tc.status, tc.code)
			}
			if a.status >= 400 && !strings.Contains(a.header.Get("Content-Type"), "application/json") {
				t.Fatalf("error answer is %q, not JSON", a.header.Get("Content-Type"))
			}
		})
	}
}

// TestBodyLimits: JSON bodies over 1 MiB are 413 and change nothing.
func TestBodyLimits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	big := `{"name":"` + strings.Repeat("a", 2<<20) + `"}`
	a := w.j("POST", "/nodes", w.admin, big)
	if a.status != 413 || a.code() != "too_large" {
		t.Fatalf("2 MiB body: %d %s", a.status, a.body)
	}
	if n := strings.Count(string(w.j("GET", "/nodes", w.admin, "").body), `"id"`); n != 2 {
		t.Fatalf("%d nodes after a refused registration, want 2", n)
	}
	if a := w.j("PUT", "/rules", w.admin, `{"a":"`+strings.Repeat("b", 2<<20)+`"}`); a.status != 413 {
		t.Fatalf("2 MiB rules: %d", a.status)
	}
	if v := num(w.j("GET", "/rules", w.admin, "").json(t), "version"); v != 0 {
		t.Fatalf("rules version %d after a refused put", v)
	}
}

// TestNodeAdmin: pause, resume, delete and tokens.
func TestNodeAdmin(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	reg := w.j("POST", "/nodes", w.admin, `{"name":"w3","priority_min":-5,"priority_max":5,"capacity":2}`)
	if reg.status != 201 {
		t.Fatalf("register: %d %s", reg.status, reg.body)
	}
	n := reg.json(t)
	id, tok := num(n, "id"), n["token"].(string)
	if num(n, "capacity") != 2 || num(n, "priority_min") != -5 {
		t.Fatalf("registered %s", reg.body)
	}
	list := w.j("GET", "/nodes", w.admin, "")
	if strings.Contains(string(list.body), tok) || strings.Contains(string(list.body), `"token"`) {
		t.Fatal("the node list shows a token")
	}
	p := w.j("POST", fmt.Sprintf("/nodes/%d/pause", id), w.admin, `{"by":"alice"}`).json(t)
	if p["paused"] != true || p["paused_by"] != "alice" || p["paused_at"] == nil {
		t.Fatalf("pause: %v", p)
	}
	if a := w.j("POST", "/leases", tok, ""); a.status != 204 {
		t.Fatalf("a paused node's lease: %d", a.status)
	}
	if p := w.j("POST", fmt.Sprintf("/nodes/%d/resume", id), w.admin, "").json(t); p["paused"] != false {
		t.Fatalf("resume: %v", p)
	}
	// w1 holds g; deleting w1 (forced, as it holds a group) releases it
	// and its token stops working.
	if a := w.j("DELETE", "/nodes/1?force=true", w.admin, ""); a.status != 204 {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	if a := w.j("POST", "/leases", w.w1, ""); a.status != 401 {
		t.Fatalf("a deleted node's token: %d, want 401", a.status)
	}
	if a := w.j("POST", "/leases", tok, ""); a.status != 200 || num(a.json(t), "group", "id") != w.gid {
		t.Fatalf("the released group was not leased again: %d %s", a.status, a.body)
	}
	info, err := os.Stat(filepath.Join(w.node.DataDir, "admin.token"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v, mode %v; want 0600", err, info.Mode())
	}
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// TestSnapshots: upload and download, gzip kept or made, digests, Range,
// limits, and the old snapshot whole after every failed upload.
func TestSnapshots(t *testing.T) {
	t.Parallel()
	storing := nodetest.NewSignal()
	w := newWorld(t, nodetest.Options{SnapshotMaxBytes: 1 << 20, UploadStoring: storing.Fire})
	put := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=", w.gid, w.fence)
	get := fmt.Sprintf("/leases/%d/snapshot?fence=%d", w.gid, w.fence)
	window := gz(t, bytes.Repeat([]byte("window state "), 1000))
	sum := sha256.Sum256(window)
	digest := "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"

	a := w.do("PUT", put+"101", w.w1, bytes.NewReader(window), "Content-Type", "application/gzip", "Repr-Digest", digest)
	if a.status != 201 {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	m := a.json(t)
	if m["sha256"] != hex.EncodeToString(sum[:]) || num(m, "size") != int64(len(window)) || num(m, "next") != 101 {
		t.Fatalf("upload answer %s", a.body)
	}
	check := func(t *testing.T, wantNext string) {
		t.Helper()
		d := w.do("GET", get, w.w1, nil)
		if d.status != 200 || !bytes.Equal(d.body, window) {
			t.Fatalf("download: %d, %d bytes; want the stored window", d.status, len(d.body))
		}
		if d.header.Get("X-Snapshot-Next") != wantNext || d.header.Get("Repr-Digest") != digest ||
			d.header.Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` || d.header.Get("Content-Length") != fmt.Sprint(len(window)) {
			t.Fatalf("download headers %v", d.header)
		}
		files, _ := filepath.Glob(filepath.Join(w.node.DataDir, "snapshots", "*"))
		if len(files) != 1 || !strings.HasSuffix(files[0], ".gz") {
			t.Fatalf("snapshot dir holds %v, want one .gz", files)
		}
	}
	check(t, "101")

	t.Run("Range", func(t *testing.T) {
		d := w.do("GET", get, w.w1, nil, "Range", "bytes=10-")
		if d.status != 206 || !bytes.Equal(d.body, window[10:]) {
			t.Fatalf("range: %d, %d bytes", d.status, len(d.body))
		}
		d = w.do("GET", get, w.w1, nil, "Range", fmt.Sprintf("bytes=%d-", len(window)+5))
		if d.status != 416 {
			t.Fatalf("range past the end: %d", d.status)
		}
	})
	failures := []struct {
		name   string
		body   io.Reader
		hdr    []string
		status int
		code   string
	}{
		{"BadDigest", bytes.NewReader(window[1:]), []string{"Content-Type", "application/gzip", "Repr-Digest", digest}, 422, "unprocessable"},
		{"MalformedDigest", bytes.NewReader(window), []string{"Repr-Digest", "sha-256=abc"}, 400, "bad_request"},
		{"TooLargeDeclared", bytes.NewReader(make([]byte, 2<<20)), []string{"Content-Type", "application/gzip"}, 413, "too_large"},
		{"TooLargeStreamed", io.LimitReader(neverEnding('x'), 2<<20), []string{"Content-Type", "application/gzip"}, 413, "too_large"},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			a := w.do("PUT", put+"555", w.w1, tc.body, tc.hdr...)
			if a.status != tc.status || a.code() != tc.code {
				t.Fatalf("got %d %s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
			check(t, "101")
		})
	}
	t.Run("BrokenConnection", func(t *testing.T) {
		brokenBefore := w.metric(`leasehold_http_requests_total{method="PUT",route="/api/v1/leases/:group/snapshot",status="400"}`)
		// A raw connection: the headers and the first half of the body
		// surely reach the node, then the connection is cut.
		conn, err := net.Dial("tcp", strings.TrimPrefix(w.node.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT /api/v1%s777 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/gzip\r\nContent-Length: %d\r\n\r\n",
			put, w.w1, len(window))
		storing.Drain()
		conn.Write(window[:len(window)/2])
		storing.Wait(t, "the node storing the upload's body")
		conn.Close()
		// Wait until the node has answered the broken upload (400: the body
		// broke off) and so cleaned up after it.
		poll.Eventually(t, 10*time.Second, "the node's answer to the broken upload", func() bool {
			return w.metric(`leasehold_http_requests_total{method="PUT",route="/api/v1/leases/:group/snapshot",status="400"}`) > brokenBefore
		})
		check(t, "101")
	})
	t.Run("RawBodyCompressed", func(t *testing.T) {
		raw := []byte("a raw window, not gzip")
		rs := sha256.Sum256(raw)
		a := w.do("PUT", put+"201", w.w1, bytes.NewReader(raw), "Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(rs[:])+":")
		if a.status != 201 {
			t.Fatalf("raw upload: %d %s", a.status, a.body)
		}
		d := w.do("GET", get, w.w1, nil)
		zr, err := gzip.NewReader(bytes.NewReader(d.body))
		if err != nil {
			t.Fatalf("the stored raw body is not gzip: %v", err)
		}
		back, _ := io.ReadAll(zr)
		if !bytes.Equal(back, raw) || d.header.Get("X-Snapshot-Next") != "201" {
			t.Fatalf("round trip gave %q next %s", back, d.header.Get("X-Snapshot-Next"))
		}
		stored := sha256.Sum256(d.body)
		if d.header.Get("ETag") != `"`+hex.EncodeToString(stored[:])+`"` {
			t.Fatal("the ETag is not the stored bytes' sha-256")
		}
	})
	t.Run("TakeoverHandsItOn", func(t *testing.T) {
		if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fmt.Sprintf(`{"fence":%d}`, w.fence)); a.status != 200 {
			t.Fatal(a.status)
		}
		l := w.j("POST", "/leases", w.w2, "")
		if l.status != 200 || num(l.json(t), "snapshot", "next") != 201 {
			t.Fatalf("the next holder's lease %s, want the snapshot at next 201", l.body)
		}
		if a := w.j("GET", "/groups/g/snapshot", w.admin, ""); a.status != 200 || a.header.Get("X-Snapshot-Next") != "201" {
			t.Fatalf("admin download: %d", a.status)
		}
	})
}

// metric reads one sample of the node's /metrics (0 when absent).
func (w *world) metric(series string) float64 {
	m := api{w.t, w.node.URL}.j("GET", "/metrics", "", "")
	for _, line := range strings.Split(string(m.body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// TestAdminSnapshotSeed: an operator seeds a free group's window, and its
// next holder resumes from it.
func TestAdminSnapshotSeed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w1, fmt.Sprintf(`{"fence":%d}`, w.fence))
	a := w.do("PUT", "/groups/g/snapshot?next=301", w.admin, bytes.NewReader(gz(t, []byte("seed"))), "Content-Encoding", "gzip")
	if a.status != 201 {
		t.Fatalf("seed: %d %s", a.status, a.body)
	}
	l := w.j("POST", "/leases", w.w2, "")
	gid, fence := num(l.json(t), "group", "id"), num(l.json(t), "fence")
	r := w.j("POST", fmt.Sprintf("/leases/%d/next", gid), w.w2, fmt.Sprintf(`{"fence":%d}`, fence)).json(t)
	if num(r, "range", "start") != 1 {
		t.Fatalf("first range after the seed %v", r)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	a := api{t, n.URL}
	if h := a.j("GET", "/healthz", "", ""); h.status != 200 || h.json(t)["status"] != "ok" {
		t.Fatalf("healthz: %d %s", h.status, h.body)
	}
	if h := a.j("GET", "/readyz", "", ""); h.status != 200 {
		t.Fatalf("readyz: %d %s", h.status, h.body)
	}
	a.j("GET", "/api/v1/nodes", n.AdminToken, "")
	m := a.j("GET", "/metrics", "", "")
	for _, want := range []string{"leasehold_http_requests_total", "leasehold_commit_batch_writes", "leasehold_leases_granted_total", "leasehold_takeovers_total", "leasehold_http_request_duration_seconds"} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	n.Stop()
}
