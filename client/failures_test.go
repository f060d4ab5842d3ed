package client_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/synthetic"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// rangeAt is the group's range starting at start, as the node lists it.
func (e *env) rangeAt(name string, start int64) leasehold.Range {
	e.t.Helper()
	rs, err := e.admin.AllRanges(bg, name, "")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range rs {
		if r.Start == start {
			return r
		}
	}
	e.t.Fatalf("%s has no range at %d", name, start)
	return leasehold.Range{}
}

// TestWorkerReportsIndexErrors: an error from IndexFunc is told to the
// node as the range's failure with its text: a passing one is retried
// (the range done in the end, its last error kept), a permanent one, even
// wrapped, fails the range at once; the loop goes on with the rest.
func TestWorkerReportsIndexErrors(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{MaxAttempts: 5})
	e.group("alt.flaky", 100, 1, 1, 300)
	e.group("alt.broken", 100, 1, 1, 300)
	c, _ := e.workerClient("w", 1, nil)
	w := newWorker(t, c, 1)
	var flaky atomic.Int64
	index := w.IndexFunc
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		switch {
		case g.Group.Name == "alt.flaky" && r.Start == 101 && flaky.Add(1) == 1:
			return errors.New("nntp: 400 service temporarily unavailable")
		case g.Group.Name == "alt.broken" && r.Start == 201:
			return fmt.Errorf("article 250: %w", client.Permanent(errors.New("unknown encoding x-weird")))
		}
		return index(ctx, g, r, win, progress)
	}
	run(t, w)
	waitFor(t, "both groups settled", func() bool { return e.settled("alt.flaky", "alt.broken") })

	r := e.rangeAt("alt.flaky", 101)
	if r.Status != leasehold.StatusDone || r.Attempts != 2 || r.LastError == nil ||
		*r.LastError != "nntp: 400 service temporarily unavailable" || r.LastErrorAt == nil {
		t.Errorf("the flaky range: %s after %d attempts, last error %v at %v; want done after 2 with its error",
			r.Status, r.Attempts, r.LastError, r.LastErrorAt)
	}
	r = e.rangeAt("alt.broken", 201)
	if r.Status != leasehold.StatusFailed || r.Attempts != 1 || r.LastError == nil ||
		*r.LastError != "article 250: unknown encoding x-weird" {
		t.Errorf("the broken range: %s after %d attempts, last error %v; want failed after 1 with its error", r.Status, r.Attempts, r.LastError)
	}
	for _, name := range []string{"alt.flaky", "alt.broken"} {
		if r := e.rangeAt(name, 1); r.Status != leasehold.StatusDone || r.LastError != nil {
			t.Errorf("%s range at 1: %s, last error %v; want done without one", name, r.Status, r.LastError)
		}
	}
}

// TestWorkerWindowUnreadable: a window snapshot that will not load is
// released with its error as window_error: the node quarantines the
// group, with a finding naming the worker, and leases it to nobody
// (the worker does not take it again); once the operator drops the window
// the group is worked to the end from an empty window.
func TestWorkerWindowUnreadable(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	e.group("alt.rotten", 100, 1, 1, 300)
	// A body that is not gzip is stored compressed: a whole gzip stream
	// whose content no synthetic window can load.
	if _, err := e.admin.PutGroupSnapshot(bg, "alt.rotten", 101, strings.NewReader("not a window at all"), client.SnapshotUpload{}); err != nil {
		t.Fatal(err)
	}
	c, _ := e.workerClient("w", 1, nil)
	w := newWorker(t, c, 1)
	var indexed atomic.Int64
	index := w.IndexFunc
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		indexed.Add(1)
		return index(ctx, g, r, win, progress)
	}
	run(t, w)
	var q *leasehold.Quarantine
	waitFor(t, "the group quarantined", func() bool {
		d, err := e.admin.Group(bg, "alt.rotten")
		if err != nil {
			t.Fatal(err)
		}
		q = d.Quarantine
		return q != nil && d.Lease == nil
	})
	if q.Node != "w" || !strings.HasPrefix(q.Error, "window did not load: ") {
		t.Errorf("quarantine = %+v, want w's load error", q)
	}
	f, err := e.admin.Findings(bg)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range f.Stuck {
		found = found || s.Kind == leasehold.FindingWindowUnreadable && s.Group == "alt.rotten" && s.Node == "w" && strings.Contains(s.Detail, q.Error)
	}
	if !found {
		t.Errorf("findings %+v: want window_unreadable of alt.rotten by w", f.Stuck)
	}
	if n := indexed.Load(); n != 0 {
		t.Errorf("IndexFunc ran %d times on a window that did not load", n)
	}
	if _, err := e.admin.DropGroupSnapshot(bg, "alt.rotten"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the group worked from an empty window", func() bool { return e.settled("alt.rotten") })
	e.checkWindow("alt.rotten")
}

// brokenDownloads cuts every snapshot download of a worker while on: the
// first answer's body breaks off after a few bytes and every request
// after it (the reader's resumes) fails to connect.
type brokenDownloads struct {
	on    atomic.Bool
	gets  atomic.Int64
	inner http.RoundTripper
}

func (b *brokenDownloads) RoundTrip(req *http.Request) (*http.Response, error) {
	if !b.on.Load() || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/snapshot") {
		return b.inner.RoundTrip(req)
	}
	if req.Header.Get("Range") != "" {
		return nil, errors.New("connection cut by the test")
	}
	b.gets.Add(1)
	resp, err := b.inner.RoundTrip(req)
	if err == nil {
		resp.Body = &breakingBody{r: io.LimitReader(resp.Body, 10), c: resp.Body}
	}
	return resp, err
}

type breakingBody struct {
	r io.Reader
	c io.Closer
}

func (b *breakingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *breakingBody) Close() error { return b.c.Close() }

// TestWorkerBrokenDownloadNotQuarantined: a window whose download breaks
// off is not the window's fault: the group is released plainly (never
// quarantined) and taken again, and once downloads work its window loads
// and the group is worked to the end.
func TestWorkerBrokenDownloadNotQuarantined(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	e.group("alt.far", 100, 1, 1, 300)
	var saved bytes.Buffer
	zw := gzip.NewWriter(&saved)
	if err := synthetic.NewWindow("alt.far").Save(zw); err != nil || zw.Close() != nil {
		t.Fatalf("saving an empty window: %v", err)
	}
	if _, err := e.admin.PutGroupSnapshot(bg, "alt.far", 1, &saved, client.SnapshotUpload{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	c, _ := e.workerClient("w", 1, nil)
	tr := &brokenDownloads{inner: http.DefaultTransport}
	tr.on.Store(true)
	c.HTTPClient = &http.Client{Transport: tr}
	w := newWorker(t, c, 1)
	run(t, w)
	waitFor(t, "two broken downloads", func() bool { return tr.gets.Load() >= 2 })
	if d, err := e.admin.Group(bg, "alt.far"); err != nil || d.Quarantine != nil {
		t.Fatalf("after broken downloads: quarantine %+v, %v; want none", d.Quarantine, err)
	}
	tr.on.Store(false)
	waitFor(t, "the group done", func() bool { return e.settled("alt.far") })
	e.checkWindow("alt.far")
}

// TestWorkerWindowTooLarge: a window that expands past the worker's
// MaxWindowBytes does not load, however little gzip it takes (here a
// real window after 4 MiB of blanks, which JSON allows): the group is
// released as window_error and quarantined, and the worker holds no
// more of it than the limit.
func TestWorkerWindowTooLarge(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	e.group("alt.bomb", 100, 1, 1, 300)
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	zw.Write(bytes.Repeat([]byte(" "), 4<<20))
	if err := synthetic.Uninterrupted("alt.bomb", 1, 100).Save(zw); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	if _, err := e.admin.PutGroupSnapshot(bg, "alt.bomb", 101, &body, client.SnapshotUpload{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	c, _ := e.workerClient("w", 1, nil)
	w := newWorker(t, c, 1)
	w.MaxWindowBytes = 1 << 20
	run(t, w)
	var q *leasehold.Quarantine
	waitFor(t, "the group quarantined", func() bool {
		d, err := e.admin.Group(bg, "alt.bomb")
		if err != nil {
			t.Fatal(err)
		}
		q = d.Quarantine
		return q != nil && d.Lease == nil
	})
	if q.Node != "w" || !strings.Contains(q.Error, "expands past the limit") {
		t.Errorf("quarantine = %+v, want w's error naming the limit", q)
	}
}
