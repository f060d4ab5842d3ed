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
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// The fuzz targets drive one real node each (real SQLite in a temporary
// directory, real echo on a loopback port), reused across iterations. Every
// iteration checks the API's promises for bad input:
//
//   - the node never answers 5xx but 503 or 507 (and never panics: a panic
//     in a handler would be a 500);
//   - a 4xx answer changes nothing: every row of the catalog and every file
//     of the snapshot directory are as they were before the request.
//
// Run one for a while with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzJSONBody$' -fuzztime 10s ./web

// fuzzNode is a node with a group g held by worker w1, its first range in
// work, and a second node (the victim of pause and resume).
type fuzzNode struct {
	node   *nodetest.Node
	view   *catalogView
	client *http.Client
	api    string
	admin  string
	w1     string
	victim int64
	gid    int64
	fence  int64
	rng    int64 // the range in work
	next   int64 // its resume point
	end    int64 // its last id
}

// fuzzAnswerTimeout is a failsafe, not an assertion of speed: a request
// the node never answers (a stuck writer) fails the input instead of
// hanging the fuzzer.
const fuzzAnswerTimeout = 30 * time.Second

func startFuzzNode(t testing.TB) *fuzzNode {
	t.Helper()
	// A clock that stands still: heartbeats and reads then rewrite the same
	// values, so even their state is comparable.
	clock := nodetest.NewClock()
	n := nodetest.Start(t, nodetest.Options{Clock: clock.Now, SnapshotMaxBytes: 1 << 20})
	fn := &fuzzNode{node: n, api: n.URL + "/api/v1", admin: n.AdminToken,
		client: &http.Client{Timeout: fuzzAnswerTimeout}}
	fn.view = openCatalogView(t, n.DataDir)
	// Ranges of 2^30 ids keep the catalog small whatever high the fuzzer
	// plans the tail to (at most MaxPlanRanges a call either way).
	fn.must(t, "PUT", "/groups/g", n.AdminToken, `{"range_size":1073741824}`, 201)
	fn.must(t, "POST", "/groups/g/tail", n.AdminToken, `{"high":4294967296}`, 200)
	fn.w1 = jsonOf(t, fn.must(t, "POST", "/nodes", n.AdminToken, `{"name":"w1"}`, 201))["token"].(string)
	fn.victim = num(jsonOf(t, fn.must(t, "POST", "/nodes", n.AdminToken, `{"name":"victim","capacity":0}`, 201)), "id")
	fn.ensure(t)
	return fn
}

func (fn *fuzzNode) do(t testing.TB, method, path, token string, body []byte, hdr ...string) answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, fn.api+path, r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := fn.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func (fn *fuzzNode) must(t testing.TB, method, path, token, body string, want int) answer {
	t.Helper()
	a := fn.do(t, method, path, token, []byte(body))
	if a.status != want {
		t.Fatalf("%s %s: got %d %s, want %d", method, path, a.status, a.body, want)
	}
	return a
}

// ensure puts the world back after a request that changed it: w1 holds g
// and has a range in work. It reads the catalog through the store.
func (fn *fuzzNode) ensure(t testing.TB) {
	t.Helper()
	ctx := t.Context()
	db := fn.node.DB
	if fn.gid == 0 {
		g, err := db.GroupByName(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		fn.gid = g.ID
	}
	l, err := db.Lease(ctx, fn.gid)
	if err != nil {
		t.Fatal(err)
	}
	if l == nil || l.Node != "w1" {
		a := fn.do(t, "POST", "/leases", fn.w1, nil)
		if a.status != 200 {
			// Nothing planned is left: plan further up the tail.
			g, err := db.GroupByName(ctx, "g")
			if err != nil {
				t.Fatal(err)
			}
			fn.must(t, "POST", "/groups/g/tail", fn.admin, fmt.Sprintf(`{"high":%d}`, g.TailEnd+4*g.RangeSize), 200)
			a = fn.must(t, "POST", "/leases", fn.w1, "", 200)
		}
		if num(jsonOf(t, a), "group", "id") != fn.gid {
			t.Fatalf("w1 leased %s, want group g", a.body)
		}
		fn.fence = num(jsonOf(t, a), "fence")
	} else {
		fn.fence = l.Fence
	}
	a := fn.do(t, "POST", fmt.Sprintf("/leases/%d/next", fn.gid), fn.w1, []byte(fmt.Sprintf(`{"fence":%d}`, fn.fence)))
	if a.status == 204 {
		g, err := db.GroupByName(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		fn.must(t, "POST", "/groups/g/tail", fn.admin, fmt.Sprintf(`{"high":%d}`, g.TailEnd+4*g.RangeSize), 200)
		a = fn.do(t, "POST", fmt.Sprintf("/leases/%d/next", fn.gid), fn.w1, []byte(fmt.Sprintf(`{"fence":%d}`, fn.fence)))
	}
	if a.status != 200 {
		t.Fatalf("next after a change: %d %s", a.status, a.body)
	}
	m := jsonOf(t, a)
	fn.rng, fn.next, fn.end = num(m, "range", "id"), num(m, "range", "next"), num(m, "range", "end")
}

// fill replaces the placeholders of a fuzzed path, query or body with the
// world's current values, so the fuzzer reaches past the fence checks.
func (fn *fuzzNode) fill(s string) string {
	return strings.NewReplacer(
		"$G", strconv.FormatInt(fn.gid, 10),
		"$F", strconv.FormatInt(fn.fence, 10),
		"$R", strconv.FormatInt(fn.rng, 10),
		"$N", strconv.FormatInt(fn.next, 10),
		"$M", strconv.FormatInt(fn.next+1, 10),
		"$P", strconv.FormatInt(fn.next-1, 10),
		"$E", strconv.FormatInt(fn.end+2, 10),
		"$V", strconv.FormatInt(fn.victim, 10),
	).Replace(s)
}

// check holds an answer to the promises: no 5xx but 503 and 507, an API
// error body on every error, and on a 4xx nothing changed. After a
// success it puts the world back for the next input.
func (fn *fuzzNode) check(t testing.TB, before state, a answer, what string) {
	t.Helper()
	switch {
	case a.status >= 500 && a.status != 503 && a.status != 507:
		t.Fatalf("%s: got %d %s; a node answers no 5xx but 503 and 507", what, a.status, a.body)
	case a.status >= 400:
		if a.status != 416 && a.code() == "" {
			t.Fatalf("%s: %d without an API error body: %q", what, a.status, a.body)
		}
		if after := fn.view.state(t); after != before {
			t.Fatalf("%s: got %d %s and the state changed:\nbefore %v\nafter  %v", what, a.status, a.body, before, after)
		}
	default:
		fn.ensure(t)
	}
}

// jsonRoutes are the endpoints that take a JSON body, with the token that
// reaches past their auth.
var jsonRoutes = []struct {
	method, path string
	worker       bool
}{
	{"POST", "/nodes", false},
	{"POST", "/nodes/$V/pause", false},
	{"POST", "/nodes/$V/resume", false},
	{"PUT", "/groups/fz", false},
	{"POST", "/groups/g/tail", false},
	{"POST", "/groups/g/history", false},
	{"POST", "/ranges/$R/retry", false},
	{"PUT", "/rules", false},
	{"POST", "/leases", true},
	{"POST", "/leases/$G/next", true},
	{"POST", "/leases/$G/heartbeat", true},
	{"POST", "/leases/$G/release", true},
	{"POST", "/ranges/$R/progress", true},
	{"POST", "/ranges/$R/finish", true},
}

// FuzzJSONBody sends fuzzed bodies to every endpoint that takes JSON.
// $F, $R, $N, $M, $P, $E, $G and $V in a body stand for w1's fence, its
// range in work, the range's resume point, one past it and one before it,
// one past the range's end+1, the group and the victim node.
func FuzzJSONBody(f *testing.F) {
	seeds := map[int][]string{
		0:  {`{"name":"w9"}`, `{"name":"w8","priority_min":-100,"priority_max":100,"capacity":4}`, `{"name":7}`, `{"name":"x","priority_min":5,"priority_max":1}`, `{"name":"x","capacity":-1}`},
		1:  {`{"by":"alice"}`, ``, `{"by":5}`},
		2:  {`{}`, `null`},
		3:  {`{"priority":0,"active":true,"range_size":100000,"start":1}`, `{"range_size":0}`, `{"start":-1}`, `{"active":"yes"}`},
		4:  {`{"high":8589934592}`, `{"high":-1}`, `{"high":9223372036854775807}`, `{"high":"5"}`, `{}`},
		5:  {`{"low":0}`, `{"low":-5}`, `{"low":1e3}`},
		6:  {``, `{"x":1}`},
		7:  {`{"a":1}`, `[1]`, `"s"`, `{"a":{"b":[null,true,1.5e300]}}`},
		8:  {``, `{}`, `{"x":1}`},
		9:  {`{"fence":$F}`, `{"fence":0}`, `{"fence":"$F"}`, `{"fence":$F} x`},
		10: {`{"fence":$F}`, `{"fence":null}`, `{"fence":$F,"fence":1}`},
		11: {`{"fence":$F}`, `{"fence":-$F}`},
		12: {`{"fence":$F,"next":$M}`, `{"fence":$F,"next":0}`, `{"fence":$F,"next":-1}`, `{"fence":$F,"next":9223372036854775807}`, `{"fence":$F}`},
		13: {`{"fence":$F,"headers":5}`, `{"fence":$F,"headers":-1}`, `{"fence":$F,"headers":9223372036854775807}`, `{"fence":$F,"headers":1.5}`},
	}
	for route, bodies := range seeds {
		for _, b := range bodies {
			f.Add(uint8(route), []byte(b))
		}
	}
	fn := startFuzzNode(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := jsonRoutes[int(route)%len(jsonRoutes)]
		token := fn.admin
		if r.worker {
			token = fn.w1
		}
		path := fn.fill(r.path)
		b := []byte(fn.fill(string(body)))
		before := fn.view.state(t)
		a := fn.do(t, r.method, path, token, b)
		fn.check(t, before, a, fmt.Sprintf("%s %s %q", r.method, path, b))
	})
}

// FuzzGroupName puts and gets groups by fuzzed names: a valid name is
// created (or updated) and read back under the same name; any other name is
// refused with 400 and changes nothing.
func FuzzGroupName(f *testing.F) {
	for _, s := range []string{"alt.binaries.test", "a", "A-b_c+d.9", strings.Repeat("x", 255), strings.Repeat("x", 256),
		"-x", ".x", "_x", "+x", "a b", "a/b", "a%2Fb", "..", ".", "é", "a\x00b", "a\nb", "g", "a?b", "a#b", "a;b"} {
		f.Add(s)
	}
	fn := startFuzzNode(f)
	f.Fuzz(func(t *testing.T, name string) {
		path := "/groups/" + url.PathEscape(name)
		before := fn.view.state(t)
		a := fn.do(t, "PUT", path, fn.admin, nil)
		what := fmt.Sprintf("PUT /groups/%q", name)
		valid := leasehold.ValidGroupName(name)
		switch {
		case valid && a.status != 200 && a.status != 201:
			t.Fatalf("%s: got %d %s for a valid name", what, a.status, a.body)
		case !valid && name != "" && a.status != 400:
			t.Fatalf("%s: got %d %s for an invalid name, want 400", what, a.status, a.body)
		case !valid && (a.status < 400 || a.status >= 500):
			t.Fatalf("%s: got %d %s for an invalid name, want a 4xx", what, a.status, a.body)
		}
		fn.check(t, before, a, what)
		if valid {
			g := fn.do(t, "GET", path, fn.admin, nil)
			if g.status != 200 || jsonOf(t, g)["name"] != name {
				t.Fatalf("GET /groups/%q: got %d %s, want the group of that name", name, g.status, g.body)
			}
		}
	})
}

// queryRoutes are the endpoints that read query parameters.
var queryRoutes = []struct {
	method, path string
	worker       bool
	body         bool // sends a small gzip body (snapshot uploads)
}{
	{"GET", "/groups", false, false},
	{"GET", "/groups/g/ranges", false, false},
	{"GET", "/leases/$G/snapshot", true, false},
	{"PUT", "/leases/$G/snapshot", true, true},
	{"PUT", "/groups/g/snapshot", false, true},
	{"GET", "/groups/g/snapshot", false, false},
}

// escapeQuery keeps a fuzzed query inside the request line: bytes HTTP does
// not allow there are percent-encoded; everything else reaches the node raw.
func escapeQuery(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		c := q[i]
		if c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// FuzzQuery sends fuzzed query strings to every endpoint that reads one.
func FuzzQuery(f *testing.F) {
	for route, qs := range map[int][]string{
		0: {"limit=10", "limit=0", "limit=1001", "after=-1", "limit=abc&after=2", "limit=1&limit=2", "after=9223372036854775808"},
		1: {"status=planned&limit=5", "status=weird", "status=done&after=1", "limit=-1", "status=%00"},
		2: {"fence=$F", "fence=", "fence=-1", "fence=$F&fence=0", "fence=1e3"},
		3: {"fence=$F&next=1", "fence=$F&next=-1", "fence=$F", "next=5", "fence=$F&next=9223372036854775807", "fence=x&next=1"},
		4: {"next=1", "next=-1", ""},
		5: {"", "x=1"},
	} {
		for _, q := range qs {
			f.Add(uint8(route), q)
		}
	}
	fn := startFuzzNode(f)
	window := gzipOf(f, []byte("a small window"))
	f.Fuzz(func(t *testing.T, route uint8, query string) {
		r := queryRoutes[int(route)%len(queryRoutes)]
		token := fn.admin
		if r.worker {
			token = fn.w1
		}
		var body []byte
		if r.body {
			body = window
		}
		path := fn.fill(r.path) + "?" + escapeQuery(fn.fill(query))
		before := fn.view.state(t)
		a := fn.do(t, r.method, path, token, body, "Content-Type", "application/gzip")
		fn.check(t, before, a, r.method+" "+path)
	})
}

func jsonOf(t testing.TB, a answer) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %q", a.status, a.body)
	}
	return m
}

func gzipOf(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// validHeaderValue reports whether Go's client will send v as a header
// value (no control bytes but tab).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// FuzzRangeHeader downloads the stored window with fuzzed Range headers:
// the answer is the whole file (200), exactly the bytes each range names
// (206) or 416, and a download changes nothing.
func FuzzRangeHeader(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=10-", "bytes=-5", "bytes=50-10", "bytes=-0", "bytes=0-0,5-9", "bytes=0-1,1-2,2-3",
		"bytes=99999-", "bytes=1-2-3", "bytes=-1-5", "bits=0-1", "bytes=", "bytes=0-9223372036854775807", "bytes= 1 - 2 ", "bytes=0-,0-,0-"} {
		f.Add(s)
	}
	fn := startFuzzNode(f)
	window := gzipOf(f, bytes.Repeat([]byte("window state "), 400))
	put := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=1", fn.gid, fn.fence)
	if a := fn.do(f, "PUT", put, fn.w1, window, "Content-Type", "application/gzip"); a.status != 201 {
		f.Fatalf("storing the window: %d %s", a.status, a.body)
	}
	f.Fuzz(func(t *testing.T, rng string) {
		if !validHeaderValue(rng) {
			t.Skip("not a header value a client can send")
		}
		get := fmt.Sprintf("/leases/%d/snapshot?fence=%d", fn.gid, fn.fence)
		before := fn.view.state(t)
		a := fn.do(t, "GET", get, fn.w1, nil, "Range", rng)
		what := fmt.Sprintf("GET with Range %q", rng)
		switch a.status {
		case 200:
			if !bytes.Equal(a.body, window) {
				t.Fatalf("%s: 200 with %d bytes, want the whole window of %d", what, len(a.body), len(window))
			}
		case 206:
			checkPartial(t, what, a, window)
		case 416:
			if want := fmt.Sprintf("bytes */%d", len(window)); a.header.Get("Content-Range") != want {
				t.Fatalf("%s: 416 with Content-Range %q, want %q", what, a.header.Get("Content-Range"), want)
			}
		default:
			t.Fatalf("%s: got %d %s, want 200, 206 or 416", what, a.status, a.body)
		}
		if after := fn.view.state(t); after != before {
			t.Fatalf("%s: a download changed the state:\nbefore %v\nafter  %v", what, before, after)
		}
	})
}

// checkPartial checks that a 206 carries exactly the bytes its
// Content-Range (or each multipart part's) names.
func checkPartial(t *testing.T, what string, a answer, whole []byte) {
	t.Helper()
	part := func(cr string, body []byte) {
		var first, last, size int
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &first, &last, &size); err != nil || size != len(whole) || first > last || last >= size {
			t.Fatalf("%s: Content-Range %q for a window of %d bytes", what, cr, len(whole))
		}
		if !bytes.Equal(body, whole[first:last+1]) {
			t.Fatalf("%s: the part %q is not those bytes of the window", what, cr)
		}
	}
	mt, params, err := mime.ParseMediaType(a.header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		part(a.header.Get("Content-Range"), a.body)
		return
	}
	mr := multipart.NewReader(bytes.NewReader(a.body), params["boundary"])
	n := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: multipart answer: %v", what, err)
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("%s: multipart answer: %v", what, err)
		}
		part(p.Header.Get("Content-Range"), b)
		n++
	}
	if n < 2 {
		t.Fatalf("%s: a multipart answer of %d parts", what, n)
	}
}

// FuzzReprDigest uploads fuzzed bodies under fuzzed Repr-Digest headers,
// as gzip or raw. A 201 means the body is stored (and, sent as gzip, is one
// whole gzip stream) and no sha-256 in the header contradicts it; anything
// refused leaves the old window whole.
func FuzzReprDigest(f *testing.F) {
	window := gzipOf(f, []byte("the window a worker carries"))
	sum := sha256.Sum256(window)
	good := "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
	raw := []byte("a raw window")
	rawSum := sha256.Sum256(raw)
	for _, s := range []struct {
		digest string
		body   []byte
		gzip   bool
	}{
		{good, window, true},
		{"", window, true},
		{"sha-256=:" + base64.StdEncoding.EncodeToString(rawSum[:]) + ":", raw, false},
		{"sha-512=:AAAA:, " + good, window, true},
		{good + ", sha-256=:" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ":", window, true},
		{good + ", " + good, window, true},
		{"SHA-256=" + good[8:], window, true},
		{"sha-256=abc", window, true},
		{"sha-256=:" + base64.StdEncoding.EncodeToString(sum[:16]) + ":", window, true},
		{"sha-256=:" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ":", window, true},
		{"sha-256=::", window, true},
		{"sha-256", window, true},
		{",,,", window, true},
		{good, window[:len(window)-4], true},
		{"", window[:len(window)/2], true},
		{"", []byte("not gzip at all"), true},
		{"", nil, false},
	} {
		f.Add(s.digest, s.body, s.gzip)
	}
	fn := startFuzzNode(f)
	f.Fuzz(func(t *testing.T, digest string, body []byte, isGzip bool) {
		if !validHeaderValue(digest) {
			t.Skip("not a header value a client can send")
		}
		put := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=%d", fn.gid, fn.fence, fn.next)
		hdr := []string{"Repr-Digest", digest}
		if isGzip {
			hdr = append(hdr, "Content-Type", "application/gzip")
		}
		before := fn.view.state(t)
		a := fn.do(t, "PUT", put, fn.w1, body, hdr...)
		what := fmt.Sprintf("PUT snapshot (gzip %v, %d bytes) with Repr-Digest %q", isGzip, len(body), digest)
		if a.status == 201 {
			sent := sha256.Sum256(body)
			if d, ok := contradicts(digest, sent[:]); ok {
				t.Fatalf("%s: stored although the header names sha-256 %x and the body's is %x", what, d, sent)
			}
			get := fmt.Sprintf("/leases/%d/snapshot?fence=%d", fn.gid, fn.fence)
			d := fn.do(t, "GET", get, fn.w1, nil)
			stored := sha256.Sum256(d.body)
			if d.status != 200 || hex.EncodeToString(stored[:]) != jsonOf(t, a)["sha256"] {
				t.Fatalf("%s: the download (%d, %d bytes) is not what the upload answered: %s", what, d.status, len(d.body), a.body)
			}
			if isGzip && !bytes.Equal(d.body, body) {
				t.Fatalf("%s: a gzip upload was not stored as sent", what)
			}
			if err := wholeGzip(d.body); err != nil {
				t.Fatalf("%s: stored a snapshot that is not whole gzip: %v", what, err)
			}
		}
		fn.check(t, before, a, what)
	})
}

// contradicts finds a sha-256 item in a Repr-Digest header that decodes to
// 32 bytes other than sum.
func contradicts(header string, sum []byte) ([]byte, bool) {
	for _, item := range strings.Split(header, ",") {
		alg, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(alg), "sha-256") {
			continue
		}
		val = strings.Trim(strings.TrimSpace(val), ":")
		d, err := base64.StdEncoding.DecodeString(val)
		if err == nil && len(d) == 32 && !bytes.Equal(d, sum) {
			return d, true
		}
	}
	return nil, false
}

func wholeGzip(b []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, zr)
	return err
}
