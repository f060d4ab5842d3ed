package web_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/web"
)

// badWorld is a fuzz world (w1 holds g with a range in work and a stored
// window) plus a second worker w2 holding group h, and a free group fresh
// that has planned nothing yet.
type badWorld struct {
	*fuzzNode
	w2               string
	hid, hfence, hr  int64
	window, w2window []byte
}

func newBadWorld(t *testing.T) *badWorld {
	fn := startFuzzNode(t)
	w := &badWorld{fuzzNode: fn}
	w.window = gzipOf(t, bytes.Repeat([]byte("window state "), 400))
	put := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=%d", fn.gid, fn.fence, fn.next)
	if a := fn.do(t, "PUT", put, fn.w1, w.window, "Content-Type", "application/gzip"); a.status != 201 {
		t.Fatalf("storing g's window: %d %s", a.status, a.body)
	}
	fn.must(t, "PUT", "/groups/h", fn.admin, `{"range_size":100}`, 201)
	fn.must(t, "POST", "/groups/h/tail", fn.admin, `{"high":1000}`, 200)
	fn.must(t, "PUT", "/groups/fresh", fn.admin, `{"range_size":100}`, 201)
	w.w2 = jsonOf(t, fn.must(t, "POST", "/nodes", fn.admin, `{"name":"w2"}`, 201))["token"].(string)
	l := jsonOf(t, fn.must(t, "POST", "/leases", w.w2, "", 200))
	w.hid, w.hfence = num(l, "group", "id"), num(l, "fence")
	if l["group"].(map[string]any)["name"] != "h" {
		t.Fatalf("w2 leased %v, want h", l["group"])
	}
	r := jsonOf(t, fn.must(t, "POST", fmt.Sprintf("/leases/%d/next", w.hid), w.w2, fmt.Sprintf(`{"fence":%d}`, w.hfence), 200))
	w.hr = num(r, "range", "id")
	w.w2window = gzipOf(t, []byte("h's window"))
	hput := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=1", w.hid, w.hfence)
	if a := fn.do(t, "PUT", hput, w.w2, w.w2window, "Content-Type", "application/gzip"); a.status != 201 {
		t.Fatalf("storing h's window: %d %s", a.status, a.body)
	}
	return w
}

// hiddenLength hides a body's length from the client, so it is sent
// chunked and the node learns its size only by reading it.
type hiddenLength struct{ r io.Reader }

func (h hiddenLength) Read(p []byte) (int, error) { return h.r.Read(p) }

// TestBadInput sends every kind of bad input the API documents a status
// for and checks that status, the error code, and that the catalog and the
// snapshot files are exactly as they were.
func TestBadInput(t *testing.T) {
	t.Parallel()
	w := newBadWorld(t)
	g, f, r, h, hf, hr := w.gid, w.fence, w.rng, w.hid, w.hfence, w.hr
	fb := func(extra string) []byte { return []byte(fmt.Sprintf(`{"fence":%d%s}`, f, extra)) }
	snapPut := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=%d", g, f, w.next)
	snapGet := fmt.Sprintf("/leases/%d/snapshot?fence=%d", g, f)
	gzipHdr := []string{"Content-Type", "application/gzip"}
	sum := sha256.Sum256(w.window)
	digestOf := func(b []byte) string {
		s := sha256.Sum256(b)
		return "sha-256=:" + base64.StdEncoding.EncodeToString(s[:]) + ":"
	}
	corrupt := bytes.Clone(w.window)
	corrupt[len(corrupt)/2] ^= 0xff
	// Whole gzip, over the limit of 1 MiB however it is counted.
	noise := make([]byte, 2<<20)
	rand.NewChaCha8([32]byte{1}).Read(noise)
	incompressible := gzipOf(t, noise)
	big := func(prefix string) []byte { // 10 MiB of JSON
		return []byte(prefix + `"` + strings.Repeat("a", 10<<20) + `"}`)
	}
	jsonEndpoints := []struct{ method, path, token, prefix string }{
		{"POST", "/nodes", w.admin, `{"name":`},
		{"POST", fmt.Sprintf("/nodes/%d/pause", w.victim), w.admin, `{"by":`},
		{"PUT", "/groups/g", w.admin, `{"x":`},
		{"POST", "/groups/g/tail", w.admin, `{"high":`},
		{"POST", "/groups/g/history", w.admin, `{"low":`},
		{"PUT", "/rules", w.admin, `{"a":`},
		{"POST", fmt.Sprintf("/leases/%d/next", g), w.w1, `{"fence":`},
		{"POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, `{"fence":`},
		{"POST", fmt.Sprintf("/leases/%d/release", g), w.w1, `{"fence":`},
		{"POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, `{"fence":`},
		{"POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, `{"fence":`},
	}

	type row struct {
		name, method, path, token string
		body                      io.Reader
		hdr                       []string
		status                    int
		code                      string
	}
	js := func(name, method, path, token, body string, status int, code string) row {
		return row{name, method, path, token, strings.NewReader(body), nil, status, code}
	}
	rows := []row{
		// Negative and reversed ranges, and ids the planner cannot add to.
		js("TailNegative", "POST", "/groups/g/tail", w.admin, `{"high":-1}`, 400, "bad_request"),
		js("HistoryNegative", "POST", "/groups/g/history", w.admin, `{"low":-1}`, 400, "bad_request"),
		js("TailReversed", "POST", "/groups/g/tail", w.admin, `{"high":1}`, 200, ""),
		js("HistoryReversed", "POST", "/groups/g/history", w.admin, `{"low":5}`, 200, ""),
		js("TailTooMany", "POST", "/groups/fresh/tail", w.admin, `{"high":100000000000}`, 422, "unprocessable"),
		js("TailMaxInt64", "POST", "/groups/fresh/tail", w.admin, `{"high":9223372036854775807}`, 400, "bad_request"),
		js("TailOverflowsInt64", "POST", "/groups/fresh/tail", w.admin, `{"high":9223372036854775808}`, 400, "bad_request"),
		js("HistoryMaxInt64", "POST", "/groups/fresh/history", w.admin, `{"low":9223372036854775807}`, 400, "bad_request"),
		js("RangeSizeZero", "PUT", "/groups/fresh", w.admin, `{"range_size":0}`, 400, "bad_request"),
		js("RangeSizeHuge", "PUT", "/groups/fresh", w.admin, `{"range_size":9223372036854775807}`, 400, "bad_request"),
		js("StartNegative", "PUT", "/groups/new", w.admin, `{"start":-1}`, 400, "bad_request"),
		js("StartHuge", "PUT", "/groups/new", w.admin, `{"start":9223372036854775807}`, 400, "bad_request"),
		js("StartChanged", "PUT", "/groups/g", w.admin, `{"start":7}`, 409, "conflict"),
		js("RangesAfterNegative", "GET", "/groups/g/ranges?after=-1", w.admin, "", 400, "bad_request"),
		js("RangesLimitNegative", "GET", "/groups/g/ranges?limit=-5", w.admin, "", 400, "bad_request"),
		js("RangesLimitTooBig", "GET", "/groups/g/ranges?limit=1001", w.admin, "", 400, "bad_request"),
		js("RangesBadStatus", "GET", "/groups/g/ranges?status=leased%00", w.admin, "", 400, "bad_request"),
		js("GroupsLimitNotInt", "GET", "/groups?limit=1e3", w.admin, "", 400, "bad_request"),
		{"RangeReversed", "GET", snapGet, w.w1, nil, []string{"Range", "bytes=50-10"}, 416, ""},
		{"RangeZeroSuffix", "GET", snapGet, w.w1, nil, []string{"Range", "bytes=-0"}, 416, ""},
		{"RangePastEnd", "GET", snapGet, w.w1, nil, []string{"Range", fmt.Sprintf("bytes=%d-", len(w.window))}, 416, ""},
		// next backwards or past the end.
		js("ProgressBackwards", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, string(fb(fmt.Sprintf(`,"next":%d`, w.next-1))), 422, "unprocessable"),
		js("ProgressPastEnd", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, string(fb(fmt.Sprintf(`,"next":%d`, w.end+2))), 422, "unprocessable"),
		js("ProgressNegative", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, string(fb(`,"next":-1`)), 422, "unprocessable"),
		js("ProgressMaxInt64", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, string(fb(`,"next":9223372036854775807`)), 422, "unprocessable"),
		js("FinishHeadersNegative", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, string(fb(`,"headers":-1`)), 400, "bad_request"),
		js("FinishHeadersOverIDs", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, string(fb(fmt.Sprintf(`,"headers":%d`, w.end-w.next+2))), 422, "unprocessable"),
		js("FinishHeadersMaxInt64", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, string(fb(`,"headers":9223372036854775807`)), 422, "unprocessable"),
		{"SnapshotNextNegative", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=-1", g, f), w.w1, bytes.NewReader(w.window), gzipHdr, 400, "bad_request"},
		{"SnapshotNextNotInt", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=1.5", g, f), w.w1, bytes.NewReader(w.window), gzipHdr, 400, "bad_request"},
		{"SnapshotNoNext", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d", g, f), w.w1, bytes.NewReader(w.window), gzipHdr, 400, "bad_request"},
		// Unknown fields.
		js("UnknownFieldNode", "POST", "/nodes", w.admin, `{"name":"z","colour":1}`, 400, "bad_request"),
		js("UnknownFieldGroup", "PUT", "/groups/g", w.admin, `{"prio":1}`, 400, "bad_request"),
		js("UnknownFieldTail", "POST", "/groups/g/tail", w.admin, `{"high":5,"x":1}`, 400, "bad_request"),
		js("UnknownFieldPause", "POST", fmt.Sprintf("/nodes/%d/pause", w.victim), w.admin, `{"by":"a","why":"b"}`, 400, "bad_request"),
		js("UnknownFieldRetry", "POST", "/ranges/1/retry", w.admin, `{"x":1}`, 400, "bad_request"),
		js("UnknownFieldLease", "POST", "/leases", w.w1, `{"group":1}`, 400, "bad_request"),
		js("UnknownFieldNext", "POST", fmt.Sprintf("/leases/%d/next", g), w.w1, string(fb(`,"x":1`)), 400, "bad_request"),
		js("UnknownFieldProgress", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, string(fb(fmt.Sprintf(`,"next":%d,"x":1`, w.next+1))), 400, "bad_request"),
		js("UnknownFieldFinish", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, string(fb(`,"headers":1,"x":1`)), 400, "bad_request"),
		// Wrong types.
		js("WrongTypeName", "POST", "/nodes", w.admin, `{"name":7}`, 400, "bad_request"),
		js("WrongTypeCapacity", "POST", "/nodes", w.admin, `{"name":"z","capacity":"4"}`, 400, "bad_request"),
		js("WrongTypeActive", "PUT", "/groups/g", w.admin, `{"active":"yes"}`, 400, "bad_request"),
		js("WrongTypeHigh", "POST", "/groups/g/tail", w.admin, `{"high":"8589934592"}`, 400, "bad_request"),
		js("WrongTypeBy", "POST", fmt.Sprintf("/nodes/%d/pause", w.victim), w.admin, `{"by":5}`, 400, "bad_request"),
		js("WrongTypeFenceString", "POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, fmt.Sprintf(`{"fence":"%d"}`, f), 400, "bad_request"),
		js("WrongTypeFenceFloat", "POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, fmt.Sprintf(`{"fence":%d.5}`, f), 400, "bad_request"),
		js("WrongTypeFenceHuge", "POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, `{"fence":1e400}`, 400, "bad_request"),
		js("WrongTypeNext", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, string(fb(`,"next":true`)), 400, "bad_request"),
		js("WrongTypeArray", "POST", fmt.Sprintf("/leases/%d/release", g), w.w1, `[1]`, 400, "bad_request"),
		js("WrongTypeRulesArray", "PUT", "/rules", w.admin, `[{"a":1}]`, 400, "bad_request"),
		js("WrongTypeRulesString", "PUT", "/rules", w.admin, `"{}"`, 400, "bad_request"),
		js("InvalidUTF8Name", "POST", "/nodes", w.admin, "{\"name\":\"w\xff\"}", 400, "bad_request"),
		js("TrailingData", "POST", fmt.Sprintf("/leases/%d/release", g), w.w1, string(fb(""))+" {}", 400, "bad_request"),
		js("Truncated", "POST", fmt.Sprintf("/leases/%d/release", g), w.w1, fmt.Sprintf(`{"fence":%d`, f), 400, "bad_request"),
		// Empty bodies where one is required.
		js("EmptyNode", "POST", "/nodes", w.admin, "", 400, "bad_request"),
		js("EmptyTail", "POST", "/groups/g/tail", w.admin, "", 400, "bad_request"),
		js("EmptyHistory", "POST", "/groups/g/history", w.admin, "", 400, "bad_request"),
		js("EmptyRules", "PUT", "/rules", w.admin, "", 400, "bad_request"),
		js("EmptyNext", "POST", fmt.Sprintf("/leases/%d/next", g), w.w1, "", 400, "bad_request"),
		js("EmptyHeartbeat", "POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, "", 400, "bad_request"),
		js("EmptyRelease", "POST", fmt.Sprintf("/leases/%d/release", g), w.w1, "  \n", 400, "bad_request"),
		js("EmptyProgress", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w1, "", 400, "bad_request"),
		js("EmptyFinish", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, "", 400, "bad_request"),
		js("EmptyObjectFinish", "POST", fmt.Sprintf("/ranges/%d/finish", r), w.w1, "{}", 400, "bad_request"),
		// Bad ids in paths.
		js("GroupIDNotInt", "POST", "/leases/abc/next", w.w1, string(fb("")), 400, "bad_request"),
		js("GroupIDNegative", "POST", "/leases/-1/next", w.w1, string(fb("")), 400, "bad_request"),
		js("RangeIDZero", "POST", "/ranges/0/progress", w.w1, string(fb(`,"next":1`)), 400, "bad_request"),
		js("GroupIDMissing", "POST", "/leases/99999/next", w.w1, string(fb("")), 404, "not_found"),
		js("NodeIDOverflow", "DELETE", "/nodes/99999999999999999999", w.admin, "", 400, "bad_request"),
		// Snapshots: truncated or corrupt gzip, digests, the limit.
		{"SnapshotTruncatedGzip", "PUT", snapPut, w.w1, bytes.NewReader(w.window[:len(w.window)-6]), gzipHdr, 400, "bad_request"},
		{"SnapshotTruncatedGzipEncoding", "PUT", snapPut, w.w1, bytes.NewReader(w.window[:len(w.window)/2]), []string{"Content-Encoding", "gzip"}, 400, "bad_request"},
		{"SnapshotTruncatedGzipAdmin", "PUT", "/groups/fresh/snapshot?next=1", w.admin, bytes.NewReader(w.window[:20]), gzipHdr, 400, "bad_request"},
		{"SnapshotCorruptGzip", "PUT", snapPut, w.w1, bytes.NewReader(corrupt), gzipHdr, 400, "bad_request"},
		{"SnapshotGzipTrailingBytes", "PUT", snapPut, w.w1, bytes.NewReader(append(bytes.Clone(w.window), "junk"...)), gzipHdr, 400, "bad_request"},
		{"SnapshotEmptyGzip", "PUT", snapPut, w.w1, bytes.NewReader(nil), gzipHdr, 400, "bad_request"},
		{"SnapshotNotGzip", "PUT", snapPut, w.w1, strings.NewReader("plain text"), gzipHdr, 400, "bad_request"},
		{"SnapshotDigestMismatch", "PUT", snapPut, w.w1, bytes.NewReader(w.window), []string{"Content-Type", "application/gzip", "Repr-Digest", digestOf([]byte("other"))}, 422, "unprocessable"},
		{"SnapshotDigestMismatchRaw", "PUT", snapPut, w.w1, strings.NewReader("raw"), []string{"Repr-Digest", "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"}, 422, "unprocessable"},
		{"SnapshotDigestMalformed", "PUT", snapPut, w.w1, bytes.NewReader(w.window), []string{"Content-Type", "application/gzip", "Repr-Digest", "sha-256=abc"}, 400, "bad_request"},
		{"SnapshotDigestShort", "PUT", snapPut, w.w1, bytes.NewReader(w.window), []string{"Content-Type", "application/gzip", "Repr-Digest", "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:31]) + ":"}, 400, "bad_request"},
		{"SnapshotDigestTwoValues", "PUT", snapPut, w.w1, bytes.NewReader(w.window), []string{"Content-Type", "application/gzip", "Repr-Digest", digestOf(w.window) + ", " + digestOf(nil)}, 400, "bad_request"},
		{"SnapshotOverLimitDeclared", "PUT", snapPut, w.w1, bytes.NewReader(make([]byte, 2<<20)), gzipHdr, 413, "too_large"},
		{"SnapshotOverLimitStreamed", "PUT", snapPut, w.w1, hiddenLength{io.LimitReader(neverEnding('x'), 2<<20)}, nil, 413, "too_large"},
		{"SnapshotOverLimitGzipStreamed", "PUT", snapPut, w.w1, hiddenLength{bytes.NewReader(incompressible)}, gzipHdr, 413, "too_large"},
		// Another node's group, lease and range.
		js("NextOthersGroup", "POST", fmt.Sprintf("/leases/%d/next", h), w.w1, fmt.Sprintf(`{"fence":%d}`, hf), 409, "lease_lost"),
		js("HeartbeatOthersGroup", "POST", fmt.Sprintf("/leases/%d/heartbeat", h), w.w1, fmt.Sprintf(`{"fence":%d}`, hf), 409, "lease_lost"),
		js("ReleaseOthersGroup", "POST", fmt.Sprintf("/leases/%d/release", h), w.w1, fmt.Sprintf(`{"fence":%d}`, hf), 409, "lease_lost"),
		js("ProgressOthersRange", "POST", fmt.Sprintf("/ranges/%d/progress", hr), w.w1, fmt.Sprintf(`{"fence":%d,"next":50}`, hf), 409, "lease_lost"),
		js("FinishOthersRange", "POST", fmt.Sprintf("/ranges/%d/finish", hr), w.w1, fmt.Sprintf(`{"fence":%d,"headers":1}`, hf), 409, "lease_lost"),
		js("SnapshotGetOthersGroup", "GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", h, hf), w.w1, "", 409, "lease_lost"),
		{"SnapshotPutOthersGroup", "PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=9", h, hf), w.w1, bytes.NewReader(w.window), gzipHdr, 409, "lease_lost"},
		js("W2OnW1sGroup", "POST", fmt.Sprintf("/leases/%d/next", g), w.w2, fmt.Sprintf(`{"fence":%d}`, f), 409, "lease_lost"),
		js("W2OnW1sRange", "POST", fmt.Sprintf("/ranges/%d/progress", r), w.w2, fmt.Sprintf(`{"fence":%d,"next":%d}`, f, w.next+1), 409, "lease_lost"),
		js("StaleFence", "POST", fmt.Sprintf("/leases/%d/heartbeat", g), w.w1, fmt.Sprintf(`{"fence":%d}`, f-1), 409, "lease_lost"),
		{"AdminSnapshotWhileHeld", "PUT", "/groups/g/snapshot?next=1", w.admin, bytes.NewReader(w.window), gzipHdr, 409, "conflict"},
	}
	for _, e := range jsonEndpoints {
		rows = append(rows,
			row{"TenMiB" + e.method + strings.ReplaceAll(e.path, "/", "_"), e.method, e.path, e.token, bytes.NewReader(big(e.prefix)), nil, 413, "too_large"},
			row{"TenMiBChunked" + e.method + strings.ReplaceAll(e.path, "/", "_"), e.method, e.path, e.token, hiddenLength{bytes.NewReader(big(e.prefix))}, nil, 413, "too_large"})
	}

	files := w.view.files(t)
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			before := w.view.state(t)
			req, err := http.NewRequest(tc.method, w.api+tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tc.token)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := w.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a := answer{resp.StatusCode, resp.Header, b}
			if a.status != tc.status || a.code() != tc.code {
				t.Fatalf("%s %s: got %d %q (%.300s), want %d %q", tc.method, tc.path, a.status, a.code(), a.body, tc.status, tc.code)
			}
			if a.status == 416 && a.header.Get("Content-Range") != fmt.Sprintf("bytes */%d", len(w.window)) {
				t.Fatalf("416 with Content-Range %q", a.header.Get("Content-Range"))
			}
			if after := w.view.state(t); after != before {
				t.Fatalf("the state changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	// Every refusal left the two windows whole, byte for byte.
	if got := w.view.files(t); got != files {
		t.Fatalf("snapshot files: got %s, want %s", got, files)
	}
	if d := w.do(t, "GET", snapGet, w.w1, nil); d.status != 200 || !bytes.Equal(d.body, w.window) {
		t.Fatalf("g's window after the bad input: %d, %d bytes", d.status, len(d.body))
	}
	t.Logf("%d bad inputs tried", len(rows))
}

// slowNode starts a node on a clock that stands still, with the server's
// options given: short slow-client timeouts, so a test sees a slow client
// cut off without waiting the production minutes, or a logger to read.
func slowNode(t *testing.T, o web.Options) *nodetest.Node {
	t.Helper()
	return nodetest.Start(t, nodetest.Options{
		DataDir:          filepath.Join(t.TempDir(), "data"), // made by the node
		SnapshotMaxBytes: 1 << 20, Clock: nodetest.NewClock().Now, Logger: o.Logger, Web: o,
	})
}

// slowClient holds a raw connection and trickles a request into it, a byte
// at a time, until the node cuts it off. ended is closed then, with what
// the node answered (if anything) in answer.
type slowClient struct {
	conn   net.Conn
	ended  chan struct{}
	answer *http.Response
	stop   chan struct{}
}

func startSlowClient(t *testing.T, url, head string, trickle []byte) *slowClient {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	s := &slowClient{conn: conn, ended: make(chan struct{}), stop: make(chan struct{})}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	writing := make(chan struct{})
	go func() { // the trickle: a byte every 10ms, until a write fails
		defer close(writing)
		for i := 0; len(trickle) > 0; i++ {
			select {
			case <-s.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{trickle[i%len(trickle)]}); err != nil {
				return
			}
		}
	}()
	go func() { // the node's side: an answer or the connection closed
		defer close(s.ended)
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.answer = resp
			// After answering, the node must also close the connection.
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
				s.answer = nil // kept open: not cut
			}
		}
	}()
	t.Cleanup(func() { close(s.stop); conn.Close(); <-writing })
	if len(trickle) == 0 {
		<-writing
	}
	return s
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// waitCut waits until the node has cut the slow client off. The bound is
// a failsafe, far above the node's timeouts, not a measure of them.
func (s *slowClient) waitCut(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ended:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: the node never cut the slow client off", what)
	}
}

// TestSlowClients: clients that trickle their headers or their body, or
// stall an upload, are cut off by the node's timeouts, other clients are
// served meanwhile, and nothing the slow ones sent is stored.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	// 1 s, not less: under -race at a load of 13 a well-behaved request's
	// JSON body once took longer than 300 ms to be read, and was answered
	// as a slow client.
	n := slowNode(t, web.Options{
		ReadHeaderTimeout: time.Second,
		JSONReadTimeout:   time.Second,
		StreamIdleTimeout: time.Second,
	})
	fn := &fuzzNode{node: n, api: n.URL + "/api/v1", admin: n.AdminToken, client: &http.Client{Timeout: fuzzAnswerTimeout}}
	fn.view = openCatalogView(t, n.DataDir)
	fn.must(t, "PUT", "/groups/g", n.AdminToken, `{"range_size":100}`, 201)
	fn.must(t, "POST", "/groups/g/tail", n.AdminToken, `{"high":1000}`, 200)
	fn.w1 = jsonOf(t, fn.must(t, "POST", "/nodes", n.AdminToken, `{"name":"w1"}`, 201))["token"].(string)
	fn.victim = 1
	fn.ensure(t)
	window := gzipOf(t, bytes.Repeat([]byte("window "), 1000))
	put := fmt.Sprintf("/api/v1/leases/%d/snapshot?fence=%d&next=1", fn.gid, fn.fence)
	if a := fn.do(t, "PUT", strings.TrimPrefix(put, "/api/v1"), fn.w1, window, "Content-Type", "application/gzip"); a.status != 201 {
		t.Fatalf("storing the window: %d %s", a.status, a.body)
	}
	before := fn.view.state(t)

	headers := startSlowClient(t, n.URL, "GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+n.AdminToken+"\r\nX-Slow: ", []byte("abcdef"))
	body := `{"name":"slowpoke","capacity":1}`
	jsonBody := startSlowClient(t, n.URL, fmt.Sprintf("POST /api/v1/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		n.AdminToken, len(body)*100, body), []byte(" "))
	// An upload that sends half its window and then stalls (no trickle).
	stalled := startSlowClient(t, n.URL, fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/gzip\r\nContent-Length: %d\r\n\r\n%s",
		strings.Replace(put, "next=1", "next=50", 1), fn.w1, len(window), window[:len(window)/2]), nil)

	// Others are served while the slow ones hold their connections.
	fn.must(t, "POST", fmt.Sprintf("/leases/%d/heartbeat", fn.gid), fn.w1, fmt.Sprintf(`{"fence":%d}`, fn.fence), 200)
	fn.must(t, "GET", "/nodes", n.AdminToken, "", 200)

	headers.waitCut(t, "trickled headers")
	jsonBody.waitCut(t, "trickled JSON body")
	stalled.waitCut(t, "stalled upload")
	cases := []struct {
		name   string
		c      *slowClient
		status int // 0: cut without an answer
	}{
		{"HeadersTrickled", headers, 0},
		{"JSONBodyTrickled", jsonBody, 400},
		{"SnapshotStalled", stalled, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := 0
			if tc.c.answer != nil {
				got = tc.c.answer.StatusCode
			}
			if tc.status != 0 && got != tc.status {
				t.Fatalf("got %d, want %d and the connection closed", got, tc.status)
			}
			if tc.status == 0 && got >= 200 && got < 300 {
				t.Fatalf("a request whose headers never ended was answered %d", got)
			}
		})
	}
	// The heartbeat above rewrote heartbeat times; compare what the slow
	// clients could have changed: nodes, and the window and its files.
	after := fn.view.state(t)
	if after.files != before.files {
		t.Fatalf("snapshot files: before %s, after %s", before.files, after.files)
	}
	if ns := fn.must(t, "GET", "/nodes", n.AdminToken, "", 200); strings.Contains(string(ns.body), "slowpoke") {
		t.Fatalf("the trickled registration was stored: %s", ns.body)
	}
	if d := fn.do(t, "GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", fn.gid, fn.fence), fn.w1, nil); d.status != 200 || !bytes.Equal(d.body, window) || d.header.Get("X-Snapshot-Next") != "1" {
		t.Fatalf("the window after the stalled upload: %d, %d bytes, next %s", d.status, len(d.body), d.header.Get("X-Snapshot-Next"))
	}
}
