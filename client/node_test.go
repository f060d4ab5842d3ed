package client_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/synthetic"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestMain checks every answer the client's tests get from a real node
// against web/openapi.json (nodetest.RunRecorded): the client's calls
// must meet only answers the description names.
func TestMain(m *testing.M) { os.Exit(nodetest.RunRecorded(m)) }

// env is a real node (SQLite in a temp dir, echo on a loopback port) and an
// admin client of it.
type env struct {
	t     *testing.T
	node  *nodetest.Node
	admin *client.Client
}

func start(t *testing.T, o nodetest.Options) *env {
	t.Helper()
	n := nodetest.Start(t, o)
	admin := client.New(n.URL, n.AdminToken)
	admin.Retry = fastRetry
	return &env{t: t, node: n, admin: admin}
}

var bg = context.Background()

// group creates a group with ranges of size over start..high (tail) and
// low..start-1 (history, when low < start).
func (e *env) group(name string, size, low, start, high int64) {
	e.t.Helper()
	if _, _, err := e.admin.PutGroup(bg, name, client.GroupSpec{RangeSize: &size, Start: &start}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.admin.PlanTail(bg, name, high); err != nil {
		e.t.Fatal(err)
	}
	if low < start {
		if _, err := e.admin.PlanHistory(bg, name, low); err != nil {
			e.t.Fatal(err)
		}
	}
}

// workerClient registers a worker node and returns its client, whose
// requests go through tr when tr is not nil.
func (e *env) workerClient(name string, capacity int64, tr *transport) (*client.Client, *leasehold.Node) {
	e.t.Helper()
	n, err := e.admin.RegisterNode(bg, client.NodeSpec{Name: name, Capacity: &capacity})
	if err != nil {
		e.t.Fatal(err)
	}
	c := client.New(e.node.URL, n.Token)
	c.Retry = fastRetry
	if tr != nil {
		c.HTTPClient = &http.Client{Transport: tr}
	}
	return c, n
}

// settled reports whether every range of the groups is done and nobody
// holds them: the last holder uploaded its window and released.
func (e *env) settled(names ...string) bool {
	for _, name := range names {
		d, err := e.admin.Group(bg, name)
		if err != nil {
			e.t.Fatal(err)
		}
		if d.Lease != nil || d.Ranges[leasehold.StatusPlanned]+d.Ranges[leasehold.StatusLeased] > 0 {
			return false
		}
	}
	return true
}

// storedWindow loads the group's stored snapshot.
func (e *env) storedWindow(name string) *synthetic.Window {
	e.t.Helper()
	sr, err := e.admin.GetGroupSnapshot(bg, name, 0)
	if err != nil || sr == nil {
		e.t.Fatalf("snapshot of %s: %v, %v", name, sr, err)
	}
	defer sr.Close()
	gz, err := gzip.NewReader(sr)
	if err != nil {
		e.t.Fatal(err)
	}
	w := synthetic.NewWindow(name)
	if err := w.Load(gz); err != nil {
		e.t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, gz); err != nil {
		e.t.Fatalf("snapshot of %s: %v", name, err)
	}
	return w
}

// checkWindow compares the group's stored window with one uninterrupted pass.
func (e *env) checkWindow(name string) {
	e.t.Helper()
	d, err := e.admin.Group(bg, name)
	if err != nil {
		e.t.Fatal(err)
	}
	got, want := e.storedWindow(name), synthetic.Uninterrupted(name, d.HistoryFloor, d.TailEnd)
	if !got.Equal(want) {
		e.t.Errorf("window of %s: got %v, want %v", name, got, want)
	}
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, 60*time.Second, what, cond)
}

// transport is the worker's real HTTP transport with a switch to cut it,
// like a killed process's sockets, and a record of its lease calls.
type transport struct {
	killed        atomic.Bool
	failSnapshots atomic.Bool
	mu            sync.Mutex
	leases        []time.Time
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	cut := tr.killed.Load() ||
		tr.failSnapshots.Load() && req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/snapshot")
	if cut {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("connection cut by the test")
	}
	if req.Method == http.MethodPost && req.URL.Path == "/api/v1/leases" {
		tr.mu.Lock()
		tr.leases = append(tr.leases, time.Now())
		tr.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (tr *transport) leaseCalls() []time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]time.Time(nil), tr.leases...)
}

func testLogger(t *testing.T) (*slog.Logger, *syncbuf.Buffer) {
	buf := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", buf)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func syntheticIndex(src synthetic.Source) client.IndexFunc {
	return func(ctx context.Context, g *client.Grant, r leasehold.Range, w client.Window, progress client.ProgressFunc) error {
		return src.Index(ctx, w.(*synthetic.Window), r, progress)
	}
}

func newWindow(g leasehold.Group) client.Window { return synthetic.NewWindow(g.Name) }

// newWorker is a Worker over the synthetic source with short waits.
func newWorker(t *testing.T, c *client.Client, capacity int) *client.Worker {
	log, _ := testLogger(t)
	return &client.Worker{
		Client:        c,
		CapacityFunc:  func() int { return capacity },
		NewWindowFunc: newWindow,
		IndexFunc:     syntheticIndex(synthetic.Source{}),
		Logger:        log,
		Poll:          client.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		StopTimeout:   5 * time.Second,
	}
}

// run runs w until the returned stop is called (or the test ends) and
// checks that Run returns.
func run(t *testing.T, w *client.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestAPI drives every endpoint of API.md through the client.
func TestAPI(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	ctx := bg
	a := e.admin

	if err := a.Healthy(ctx); err != nil {
		t.Errorf("Healthy: %v", err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
	g, created, err := a.PutGroup(ctx, "alt.binaries.test", client.GroupSpec{RangeSize: new(int64(1000))})
	if err != nil || !created || g.RangeSize != 1000 {
		t.Fatalf("PutGroup: got %+v, %v, %v", g, created, err)
	}
	if _, created, err := a.PutGroup(ctx, "alt.binaries.test", client.GroupSpec{Priority: new(int64(3))}); err != nil || created {
		t.Fatalf("PutGroup again: created %v, %v; want an update", created, err)
	}
	if _, _, err := a.PutGroup(ctx, "-bad", client.GroupSpec{}); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("PutGroup bad name: got %v, want invalid", err)
	}
	if n, err := a.PlanTail(ctx, "alt.binaries.test", 5000); err != nil || n != 5 {
		t.Fatalf("PlanTail: got %d, %v; want 5", n, err)
	}
	if n, err := a.PlanTail(ctx, "alt.binaries.test", 5000); err != nil || n != 0 {
		t.Errorf("PlanTail again: got %d, %v; want 0", n, err)
	}
	if _, err := a.PlanTail(ctx, "no.such.group", 5000); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("PlanTail unknown: got %v, want not found", err)
	}
	for i := range 3 {
		if _, _, err := a.PutGroup(ctx, fmt.Sprintf("alt.page.%d", i), client.GroupSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := a.Groups(ctx, "", 2)
	if err != nil || len(p.Groups) != 2 || p.Next == "" {
		t.Fatalf("Groups page: got %+v, %v", p, err)
	}
	all, err := a.AllGroups(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("AllGroups: got %d, %v; want 4", len(all), err)
	}
	d, err := a.Group(ctx, "alt.binaries.test")
	if err != nil || d.Priority != 3 || d.Ranges[leasehold.StatusPlanned] != 5 || d.Lease != nil || d.TailEnd != 5000 {
		t.Fatalf("Group: got %+v, %v", d, err)
	}
	rs, err := a.AllRanges(ctx, "alt.binaries.test", leasehold.StatusPlanned)
	if err != nil || len(rs) != 5 || rs[0].Start != 1 || rs[0].End != 1000 {
		t.Fatalf("Ranges: got %+v, %v", rs, err)
	}
	if v, err := a.PutRules(ctx, []byte(`{"spam":["x"]}`)); err != nil || v < 1 {
		t.Fatalf("PutRules: got %d, %v", v, err)
	}
	if _, err := a.PutRules(ctx, []byte(`[1]`)); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("PutRules array: got %v, want invalid", err)
	}
	if r, err := a.CurrentRules(ctx); err != nil || string(r.Body) != `{"spam":["x"]}` {
		t.Errorf("CurrentRules: got %+v, %v", r, err)
	}

	w, node := e.workerClient("w1", 4, nil)
	if _, err := a.RegisterNode(ctx, client.NodeSpec{Name: "w1"}); !errors.Is(err, leasehold.ErrConflict) {
		t.Errorf("RegisterNode twice: got %v, want conflict", err)
	}
	if _, err := w.Nodes(ctx); !errors.Is(err, leasehold.ErrForbidden) {
		t.Errorf("Nodes with a node token: got %v, want forbidden", err)
	}
	if _, err := client.New(e.node.URL, "wrong").Lease(ctx); !errors.Is(err, leasehold.ErrUnauthorized) {
		t.Errorf("Lease with a wrong token: got %v, want unauthorized", err)
	}
	if n, err := a.PauseNode(ctx, node.ID, "alice"); err != nil || !n.Paused || n.PausedBy != "alice" {
		t.Fatalf("PauseNode: got %+v, %v", n, err)
	}
	if gr, err := w.Lease(ctx); gr != nil || err != nil {
		t.Errorf("Lease while paused: got %+v, %v; want nothing", gr, err)
	}
	if n, err := a.ResumeNode(ctx, node.ID, ""); err != nil || n.Paused {
		t.Fatalf("ResumeNode: got %+v, %v", n, err)
	}

	gr, err := w.Lease(ctx)
	if err != nil || gr == nil || gr.Group.Name != "alt.binaries.test" || gr.Snapshot != nil || gr.TTL <= 0 || gr.Rules.Version < 1 {
		t.Fatalf("Lease: got %+v, %v", gr, err)
	}
	G, F := gr.Group.ID, gr.Fence
	r, err := w.Next(ctx, G, F)
	if err != nil || r == nil || r.Start != 1 || r.Next != 1 {
		t.Fatalf("Next: got %+v, %v", r, err)
	}
	if got, err := w.Progress(ctx, r.ID, F, 500); err != nil || got.Next != 500 {
		t.Errorf("Progress: got %+v, %v", got, err)
	}
	if _, err := w.Progress(ctx, r.ID, F, 400); !errors.Is(err, leasehold.ErrUnprocessable) {
		t.Errorf("Progress backwards: got %v, want unprocessable", err)
	}
	if _, err := w.Progress(ctx, r.ID, F+1, 600); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Errorf("Progress at a wrong fence: got %v, want lease lost", err)
	}
	if got, err := w.Finish(ctx, r.ID, F, 1000); err != nil || got.Status != leasehold.StatusDone {
		t.Errorf("Finish: got %+v, %v", got, err)
	}
	if ttl, err := w.Heartbeat(ctx, G, F); err != nil || ttl <= 0 {
		t.Errorf("Heartbeat: got %v, %v", ttl, err)
	}
	if sr, err := w.GetSnapshot(ctx, G, F, 0); sr != nil || err != nil {
		t.Errorf("GetSnapshot before any: got %v, %v; want nothing", sr, err)
	}
	window := bytes.Repeat([]byte("window "), 10000)
	s, err := w.PutSnapshot(ctx, G, F, 1001, bytes.NewReader(window), client.SnapshotUpload{})
	if err != nil || s.Next != 1001 || s.Size == 0 {
		t.Fatalf("PutSnapshot raw: got %+v, %v", s, err)
	}
	sr, err := w.GetSnapshot(ctx, G, F, 0)
	if err != nil || sr == nil || sr.Next != 1001 || sr.Size != s.Size || sr.SHA256 != s.SHA256 {
		t.Fatalf("GetSnapshot: got %+v, %v", sr, err)
	}
	gz, err := gzip.NewReader(sr)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := io.ReadAll(gz); err != nil || !bytes.Equal(back, window) {
		t.Errorf("GetSnapshot body: got %d bytes, %v; want the window the node compressed", len(back), err)
	}
	sr.Close()
	// The tail of the stored bytes, as a resumed download asks for it.
	sr, err = w.GetSnapshot(ctx, G, F, 10)
	if err != nil || sr == nil {
		t.Fatalf("GetSnapshot from 10: %v, %v", sr, err)
	}
	if rest, err := io.ReadAll(sr); err != nil || int64(len(rest)) != s.Size-10 || sr.Size != s.Size {
		t.Errorf("GetSnapshot from 10: got %d bytes of %d, %v", len(rest), sr.Size, err)
	}
	sr.Close()
	if _, err := a.PutGroupSnapshot(ctx, "alt.binaries.test", 1, strings.NewReader("x"), client.SnapshotUpload{}); !errors.Is(err, leasehold.ErrConflict) {
		t.Errorf("PutGroupSnapshot while held: got %v, want conflict", err)
	}
	if err := w.Release(ctx, G, F); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := w.Heartbeat(ctx, G, F); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Errorf("Heartbeat after release: got %v, want lease lost", err)
	}
	if err := w.Release(ctx, G, F); !errors.Is(err, leasehold.ErrLeaseLost) {
		t.Errorf("Release twice: got %v, want lease lost", err)
	}
	// An operator moves the window between boxes.
	sr, err = a.GetGroupSnapshot(ctx, "alt.binaries.test", 0)
	if err != nil || sr == nil {
		t.Fatalf("GetGroupSnapshot: %v, %v", sr, err)
	}
	stored, err := io.ReadAll(sr)
	if err != nil {
		t.Fatalf("GetGroupSnapshot: %v", err)
	}
	sr.Close()
	s2, err := a.PutGroupSnapshot(ctx, "alt.binaries.test", 1001, bytes.NewReader(stored), client.SnapshotUpload{Gzip: true, Digest: sha(stored)})
	if err != nil || s2.SHA256 != s.SHA256 {
		t.Errorf("PutGroupSnapshot gzip: got %+v, %v; want stored as is (sha %s)", s2, err, s.SHA256)
	}
	if _, err := a.PutGroupSnapshot(ctx, "alt.binaries.test", 1001, bytes.NewReader(stored), client.SnapshotUpload{Gzip: true, Digest: sha([]byte("other"))}); err == nil {
		t.Error("PutGroupSnapshot with a wrong digest: got nil error")
	}

	if _, err := a.RetryRange(ctx, r.ID); !errors.Is(err, leasehold.ErrConflict) {
		t.Errorf("RetryRange of a done range: got %v, want conflict", err)
	}
	if _, err := a.RetryRange(ctx, 99999); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("RetryRange unknown: got %v, want not found", err)
	}
	f, err := a.Findings(ctx)
	if err != nil || f.Backlog.Planned != 4 {
		t.Errorf("Findings: got %+v, %v; want a backlog of 4", f, err)
	}
	ns, err := a.Nodes(ctx)
	if err != nil || len(ns) != 1 || ns[0].Name != "w1" || ns[0].Token != "" {
		t.Errorf("Nodes: got %+v, %v", ns, err)
	}
	if err := a.DeleteNode(ctx, node.ID, false); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if _, err := w.Lease(ctx); !errors.Is(err, leasehold.ErrUnauthorized) {
		t.Errorf("Lease after delete: got %v, want unauthorized", err)
	}
	if err := a.DeleteNode(ctx, node.ID, false); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("DeleteNode twice: got %v, want not found", err)
	}
}

func TestWorkerCapacity(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	var names []string
	for i := range 8 {
		name := fmt.Sprintf("alt.cap.%d", i)
		e.group(name, 100, 1, 1, 400)
		names = append(names, name)
	}
	tr := &transport{}
	c, node := e.workerClient("w1", 10, tr)
	var capacity, reads atomic.Int64
	capacity.Store(2)

	// in counts the groups inside Index at once; peak is its maximum.
	var mu sync.Mutex
	in := map[int64]int{}
	peak := 0
	index := syntheticIndex(synthetic.Source{Rate: 4000})
	w := newWorker(t, c, 0)
	w.CapacityFunc = func() int { reads.Add(1); return int(capacity.Load()) }
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		mu.Lock()
		in[g.Group.ID]++
		peak = max(peak, len(in))
		mu.Unlock()
		defer func() {
			mu.Lock()
			if in[g.Group.ID]--; in[g.Group.ID] == 0 {
				delete(in, g.Group.ID)
			}
			mu.Unlock()
		}()
		return index(ctx, g, r, win, progress)
	}
	// The node's view, sampled: what it counts as held by the worker.
	var nodePeak, workerPeak atomic.Int64
	sample := func() {
		ns, err := e.admin.Nodes(bg)
		if err != nil {
			t.Error(err)
			return
		}
		for _, n := range ns {
			if n.ID == node.ID && n.Held > nodePeak.Load() {
				nodePeak.Store(n.Held)
			}
		}
		if h := int64(w.Held()); h > workerPeak.Load() {
			workerPeak.Store(h)
		}
	}
	run(t, w)
	waitFor(t, "two groups held", func() bool { sample(); return w.Held() == 2 })
	waitFor(t, "a group caught up", func() bool {
		sample()
		done := 0
		for _, n := range names {
			if e.settled(n) {
				done++
			}
		}
		return done >= 2
	})
	mu.Lock()
	if peak > 2 || nodePeak.Load() > 2 || workerPeak.Load() > 2 {
		t.Errorf("capacity 2: got %d groups in Index at once, %d held by the node's count, %d by the worker's", peak, nodePeak.Load(), workerPeak.Load())
	}
	mu.Unlock()

	// A change takes effect at the next lease.
	capacity.Store(3)
	waitFor(t, "three groups held", func() bool { sample(); return w.Held() == 3 })
	waitFor(t, "every group done", func() bool { sample(); return e.settled(names...) })
	mu.Lock()
	if peak > 3 || nodePeak.Load() > 3 || workerPeak.Load() > 3 {
		t.Errorf("capacity 3: got %d groups in Index at once, %d held by the node's count, %d by the worker's", peak, nodePeak.Load(), workerPeak.Load())
	}
	mu.Unlock()
	for _, n := range names {
		e.checkWindow(n)
	}

	// Capacity 0 takes nothing: the loop reads it again and again and
	// never asks for a lease.
	capacity.Store(0)
	reads.Store(0)
	// A read counted now saw 0; a lease on its way before it has ended.
	waitFor(t, "capacity read", func() bool { return reads.Load() >= 1 })
	leasesBefore := len(tr.leaseCalls())
	e.group("alt.cap.late", 100, 1, 1, 100)
	waitFor(t, "capacity read five times more", func() bool { return reads.Load() >= 6 })
	if n := len(tr.leaseCalls()) - leasesBefore; n != 0 {
		t.Errorf("capacity 0: got %d lease calls, want none", n)
	}
	if d, err := e.admin.Group(bg, "alt.cap.late"); err != nil || d.Lease != nil || d.Ranges[leasehold.StatusDone] != 0 {
		t.Errorf("capacity 0: got %+v, %v; want the group untouched", d, err)
	}
}

func sha(b []byte) []byte {
	s := sha256Sum(b)
	return s[:]
}

// TestRetryFailedRange: a range leased max_attempts times without
// finishing is failed, reported, and planned again by an operator.
func TestRetryFailedRange(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{MaxAttempts: 1})
	e.group("alt.fail", 100, 1, 1, 100)
	w, _ := e.workerClient("w", 1, nil)
	g, err := w.Lease(bg)
	if err != nil || g == nil {
		t.Fatalf("Lease: %v, %v", g, err)
	}
	r, err := w.Next(bg, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		t.Fatalf("Next: %v, %v", r, err)
	}
	if err := w.Release(bg, g.Group.ID, g.Fence); err != nil {
		t.Fatal(err)
	}
	rs, err := e.admin.AllRanges(bg, "alt.fail", leasehold.StatusFailed)
	if err != nil || len(rs) != 1 || rs[0].ID != r.ID {
		t.Fatalf("failed ranges: got %+v, %v; want range %d", rs, err, r.ID)
	}
	f, err := e.admin.Findings(bg)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range f.Stuck {
		found = found || s.Kind == leasehold.FindingRangeFailed && s.Range != nil && *s.Range == r.ID
	}
	if !found {
		t.Errorf("findings: got %+v, want range %d failed", f.Stuck, r.ID)
	}
	got, err := e.admin.RetryRange(bg, r.ID)
	if err != nil || got == nil || got.Status != leasehold.StatusPlanned || got.Attempts != 0 {
		t.Fatalf("RetryRange: got %+v, %v; want planned with attempts reset", got, err)
	}
}
