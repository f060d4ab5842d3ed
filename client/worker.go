package client

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
)

// Window is the state a worker carries through a group from range to range.
// Save writes it whole and Load replaces it with what Save wrote; the loop
// moves it to and from the node gzipped.
type Window interface {
	Load(r io.Reader) error
	Save(w io.Writer) error
}

// ProgressFunc is handed to an IndexFunc to report how far it got: every id
// below next is in the window, and headers articles of the range were
// indexed so far. It is cheap (the loop sends the latest value with the
// next heartbeat) and safe to call from any goroutine.
type ProgressFunc func(next, headers int64)

// IndexFunc indexes ids r.Next..r.End of the granted group into w, calling
// progress as it advances. It returns nil when the whole range is in the
// window. It must return soon after ctx ends; the context's cause is
// leasehold.ErrLeaseLost when the group was lost, and the range is then
// given up. Ids may come again after a takeover, so indexing an id twice
// must leave w as indexing it once.
//
// Any other error is reported to the node as the range's failure, with
// its text (the range's last_error): the range is retried from its
// progress, and failed once its attempts run out; an error that is or
// wraps a PermanentError (Permanent(err)) fails it at once.
//
// g.Group.Name and g.Fence are the lease a store outside the node checks
// the writes of (DESIGN.md rule 15; docs/SHARED-INDEX.md): when the store
// refuses a write for an older fence, return an error that is or wraps
// leasehold.ErrLeaseLost, and the group is given up as lost, its range
// not finished.
type IndexFunc func(ctx context.Context, g *Grant, r leasehold.Range, w Window, progress ProgressFunc) error

// DefaultSnapshotInterval is how often a Worker uploads a window between
// ranges unless told otherwise: what a killed worker's successor redoes.
const DefaultSnapshotInterval = time.Minute

// DefaultPoll is how a Worker polls a node that has nothing for it. Its
// cap is low because work can come at any moment without any plan at this
// node (a peer hands a group over, a dead peer's groups are adopted): an
// idle worker asks again within 4 s, and an idle poll costs the node one
// indexed read.
var DefaultPoll = Backoff{Min: 500 * time.Millisecond, Max: 4 * time.Second}

// Worker is the pull loop of a worker node. It leases up to Capacity groups
// at once and, for each, loads the group's window snapshot (or starts an
// empty window at the group's first range, uploaded at once so a crash
// before the next upload loses nothing), takes the group's ranges in order
// and feeds them to IndexFunc, reports progress and heartbeats every TTL/3,
// finishes each range, uploads the window every SnapshotInterval, and when
// the group is caught up uploads the window and releases the group.
//
// A lost lease cancels that group's IndexFunc and the group is forgotten:
// nothing more is sent for it. An error from IndexFunc fails the range at
// the node with the error's text (retried unless the error is permanent),
// and the group is given back with its window up to the progress. A panic
// in IndexFunc is logged with its stack and the group released without
// finishing the range or uploading the window (which the panic may have
// left half changed); the node plans again whatever the last upload does
// not cover. A window snapshot that will not load (Window.Load fails, or
// the stored bytes are not gzip) is released with its error as
// window_error, and the node quarantines the group until an operator
// acts; a download that breaks off is released plainly. Run it with Run;
// set the fields before.
type Worker struct {
	// Client calls the node with the worker node's token.
	Client *Client
	// CapacityFunc is how many groups to hold at once. It is read before
	// every lease, so a change takes effect at the next one; 0 leases
	// nothing. Nil means 1.
	CapacityFunc func() int
	// NewWindowFunc returns the empty window of a group.
	NewWindowFunc func(g leasehold.Group) Window
	// IndexFunc does the work of one range.
	IndexFunc IndexFunc
	// Logger gets what happens; slog.Default() when nil.
	Logger *slog.Logger
	// SnapshotInterval is how long after the last upload a window is
	// uploaded again between ranges, so that a successor after a crash
	// redoes at most that much. 0 means DefaultSnapshotInterval; below 0,
	// windows are uploaded only when caught up or stopping.
	SnapshotInterval time.Duration
	// Poll is the wait between leases while the node has nothing to lease
	// (paused, at capacity, nothing planned) or cannot be reached. The zero
	// value means DefaultPoll.
	Poll Backoff
	// StopTimeout bounds the uploads and releases after Run's context ends.
	// 0 means 30s.
	StopTimeout time.Duration
	// MaxWindowBytes bounds what a downloaded window may expand to: a
	// window past it will not load (a few bytes of gzip may say gigabytes)
	// and is released as window_error. 0 means DefaultMaxWindowBytes.
	MaxWindowBytes int64
	// Failover names more nodes of the same fleet, asked in order after
	// Client when it cannot be reached (see ParseURLs and the comment on
	// failover). Each carries this worker's token at its node (a node
	// token is the node's own); a group is worked only at the node that
	// granted it.
	Failover []*Client
	// Reprobe is how long a node that could not be reached is passed over
	// before leases try it again. 0 means DefaultReprobe.
	Reprobe time.Duration

	held atomic.Int64
	// tenures are the groups held now, by name, so that a grant of a
	// group still held from another node ends that hold first.
	tenuresMu sync.Mutex
	tenures   map[string]*tenure
	failures  atomic.Int64 // holds in a row that ended in failure
}

// DefaultMaxWindowBytes is as much as a node takes of a gzip snapshot
// by default (serve --snapshot-max-expanded-bytes, 2 GiB): a window the
// node took loads, and a window of a few MB of gzip cannot make a worker
// hold more than that.
const DefaultMaxWindowBytes = 2 << 30

func (w *Worker) maxWindowBytes() int64 {
	if w.MaxWindowBytes > 0 {
		return w.MaxWindowBytes
	}
	return DefaultMaxWindowBytes
}

// WindowLimit reads a decompressed window and fails once more than Max
// bytes come out of R: a window loader given it cannot be made to hold,
// or to inflate, more than that.
type WindowLimit struct {
	R    io.Reader
	Max  int64
	read int64
}

// ErrWindowTooLarge is a window that expands past its limit.
var ErrWindowTooLarge = errors.New("the window snapshot expands past the limit")

func (l *WindowLimit) Read(p []byte) (int, error) {
	if l.read > l.Max {
		return 0, ErrWindowTooLarge
	}
	if left := l.Max + 1 - l.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := l.R.Read(p)
	l.read += int64(n)
	if l.read > l.Max {
		return n, fmt.Errorf("%w of %d bytes", ErrWindowTooLarge, l.Max)
	}
	return n, err
}

// Held is how many groups the worker holds now.
func (w *Worker) Held() int { return int(w.held.Load()) }

// Run leases and works until ctx ends, then lets the running IndexFuncs see
// the cancelled context, uploads their windows, releases every group it
// holds and returns nil. It returns an error when the Worker is not set up,
// or, after stopping the same way, when the node (every node, with
// Failover) refuses the token (leasehold.ErrUnauthorized, ErrForbidden):
// waiting would not mend that.
// A worker killed instead leaves its groups to the TTL.
func (w *Worker) Run(ctx context.Context) error {
	if w.Client == nil || w.IndexFunc == nil || w.NewWindowFunc == nil {
		return errors.New("client: Worker needs Client, IndexFunc and NewWindowFunc")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	// ended wakes the loop when a hold ends and frees capacity.
	ended := make(chan struct{}, 1)
	idle := 0
	reprobe := w.Reprobe
	if reprobe <= 0 {
		reprobe = DefaultReprobe
	}
	ns := newNodes(w.Client, w.Failover, reprobe, w.logger())
	saidIdle := false
	for ctx.Err() == nil {
		if w.Held() >= w.capacity() {
			// Wait for a hold to end, or look at the capacity again soon.
			select {
			case <-ctx.Done():
			case <-ended:
			case <-time.After(w.poll().Min):
			}
			continue
		}
		g, at, lerr := ns.lease(ctx)
		if errors.Is(lerr, leasehold.ErrUnauthorized) || errors.Is(lerr, leasehold.ErrForbidden) {
			w.logger().Error("the node refuses the token; stopping", "err", lerr)
			cancel()
			return lerr
		}
		if lerr != nil || g == nil {
			if lerr != nil && ctx.Err() == nil {
				w.logger().Warn("lease failed", "err", lerr)
			}
			if lerr == nil && !saidIdle && w.Held() == 0 {
				// Once per idle stretch, not per poll.
				saidIdle = true
				w.logger().Info("idle: the node has nothing to lease in this worker's band and kinds; asking again until it has",
					"url", at.URL, "poll_max", w.poll().Max)
			}
			// Paused, nothing planned, at the node's own capacity or
			// unreachable: back off, up to Poll.Max, never spin. A hold
			// that ends frees a slot of the node's capacity too: ask then.
			t := time.NewTimer(w.poll().Delay(idle))
			select {
			case <-ctx.Done():
			case <-ended:
				idle = 0
			case <-t.C:
				idle++
			}
			t.Stop()
			continue
		}
		idle, saidIdle = 0, false
		w.held.Add(1)
		t, prev := w.begin(g.Group.Name)
		wg.Go(func() { w.holdGranted(ctx, g, at, t, prev, ended) })
	}
	return nil
}

// holdGranted works a group granted at at, in its own goroutine, then
// frees its slot and wakes Run's loop (ended).
func (w *Worker) holdGranted(ctx context.Context, g *Grant, at *Client, t, prev *tenure, ended chan<- struct{}) {
	defer func() {
		w.end(g.Group.Name, t)
		w.held.Add(-1)
		select {
		case ended <- struct{}{}:
		default:
		}
	}()
	if prev != nil {
		// Granted anew at another node while an older hold of it (from a
		// node gone quiet) still runs: that one is lost by the rules; it
		// ends before this one starts.
		prev.lose(leasehold.Errorf(leasehold.KindLeaseLost, "group %q granted again at %s", g.Group.Name, at.URL))
		<-prev.done
	}
	// A group that failed goes back to the node; wait before the next
	// lease so a failure that repeats (a node error, a source down) is
	// not retried in a tight loop.
	switch w.hold(ctx, g, at, t) {
	case failed, suspect, unreadable:
		n := w.failures.Add(1)
		sleep(ctx, w.poll().Delay(int(n-1)))
	case caughtUp:
		w.failures.Store(0)
	}
}

// tenure is one hold of a group by name, from its grant to its end.
type tenure struct {
	done chan struct{}
	mu   sync.Mutex
	h    *hold
	why  error // set when lost before the hold began
}

// attach ties the running hold to t, losing it at once if t was lost.
func (t *tenure) attach(h *hold) {
	t.mu.Lock()
	t.h = h
	why := t.why
	t.mu.Unlock()
	if why != nil {
		h.lose(why)
	}
}

// lose ends the tenure's hold as lost: its work is cancelled and nothing
// more is sent for it.
func (t *tenure) lose(why error) {
	t.mu.Lock()
	h := t.h
	if h == nil {
		t.why = why
	}
	t.mu.Unlock()
	if h != nil {
		h.lose(why)
	}
}

// begin records a new tenure of group and returns the one it replaces,
// if the group is still held (from another node).
func (w *Worker) begin(group string) (t, prev *tenure) {
	t = &tenure{done: make(chan struct{})}
	w.tenuresMu.Lock()
	defer w.tenuresMu.Unlock()
	if w.tenures == nil {
		w.tenures = map[string]*tenure{}
	}
	prev = w.tenures[group]
	w.tenures[group] = t
	return t, prev
}

// end closes t and forgets it unless a newer tenure replaced it.
func (w *Worker) end(group string, t *tenure) {
	w.tenuresMu.Lock()
	if w.tenures[group] == t {
		delete(w.tenures, group)
	}
	w.tenuresMu.Unlock()
	close(t.done)
}

func (w *Worker) capacity() int {
	if w.CapacityFunc == nil {
		return 1
	}
	return w.CapacityFunc()
}

func (w *Worker) poll() Backoff {
	if w.Poll.Min <= 0 && w.Poll.Max <= 0 {
		return DefaultPoll
	}
	return w.Poll
}

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.Default()
	}
	return w.Logger
}

// outcome is how the work on a held group ended, which decides what is
// sent before letting it go.
type outcome int

const (
	caughtUp   outcome = iota // snapshot, release
	stopped                   // Run's context ended: flush progress, snapshot, release
	failed                    // an error; the window is sound up to the progress: snapshot, release
	suspect                   // a panic, or a window whose download broke: release only
	lost                      // someone else holds it: send nothing
	unreadable                // the window did not load: release with window_error only
)

// errLeaseLost is the cause of a group's context after its lease was lost.
var errLeaseLost = leasehold.Errorf(leasehold.KindLeaseLost, "lease lost")

// hold is one held group: its grant, its window and what has been
// reported of the range in work.
type hold struct {
	w      *Worker
	g      *Grant
	c      *Client // the node that granted g: every holder call goes there
	log    *slog.Logger
	window Window

	// cancelWork ends the group's work context (Index, Next).
	cancelWork context.CancelCauseFunc
	isLost     atomic.Bool
	ttl        atomic.Int64 // time.Duration
	contact    atomic.Int64 // unix nanoseconds of the last holder call answered

	// callMu orders progress after the range's Next and before its
	// Finish, so that a late progress never hits a finished range.
	callMu sync.Mutex
	// mu guards the fields below, written by Index's progress calls.
	mu      sync.Mutex
	rng     leasehold.Range // the range in work; ID 0 when none
	pending int64           // latest next Index reported
	sent    int64           // latest next the node acknowledged
	headers int64

	// windowNext is the id the window covers up to, for its snapshot.
	windowNext int64
	// windowError is why the window did not load (outcome unreadable).
	windowError string
	// dirty is whether the window changed since it was loaded or uploaded.
	dirty        bool
	lastSnapshot time.Time
}

// fallbackTTL stands in for a TTL the node did not send.
const fallbackTTL = time.Minute

// hold works one leased group until it is caught up, lost, failed or the
// worker stops, and lets it go as the outcome says. It returns the outcome.
func (w *Worker) hold(parent context.Context, g *Grant, at *Client, t *tenure) outcome {
	h := &hold{w: w, g: g, c: at, log: w.logger().With("group", g.Group.Name, "fence", g.Fence), lastSnapshot: time.Now()}
	if g.TTL <= 0 {
		g.TTL = fallbackTTL
	}
	h.ttl.Store(int64(g.TTL))
	h.touch()
	// In a fleet the worker asks several nodes: the line says which
	// granted the group, the one every holder call goes to.
	h.log.Info("leased group", "node", at.URL, "snapshot_next", snapshotNext(g.Snapshot), "takeover", g.Takeover, "ttl", g.TTL)

	workCtx, cancelWork := context.WithCancelCause(parent)
	defer cancelWork(nil)
	h.cancelWork = cancelWork
	t.attach(h)
	// Heartbeats outlive the work: they keep the lease while the window is
	// uploaded after Run's context ended, until the release.
	beatCtx, stopBeats := context.WithCancel(context.WithoutCancel(parent))
	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		h.heartbeat(beatCtx)
	}()
	defer func() {
		stopBeats()
		<-beatsDone
	}()

	out := h.work(workCtx)

	endCtx := context.WithoutCancel(parent)
	if parent.Err() != nil {
		var cancel context.CancelFunc
		endCtx, cancel = context.WithTimeout(endCtx, w.stopTimeout())
		defer cancel()
		if out != lost && out != suspect && out != unreadable {
			out = stopped
		}
	}
	if out == lost || h.isLost.Load() {
		h.log.Warn("lease lost; group forgotten")
		return lost
	}
	// saved is a stop that handed its progress and window back whole: the
	// node does not count its lease as an attempt of the range.
	saved := out == stopped
	if out != suspect && out != unreadable {
		saved = saved && h.flushProgress(endCtx)
		if h.dirty {
			if err := h.upload(endCtx); err != nil {
				if h.isLost.Load() || errors.Is(err, leasehold.ErrLeaseLost) {
					h.log.Warn("lease lost; group forgotten")
					return lost
				}
				h.log.Error("window upload failed; releasing anyway", "err", err)
				saved = false
			}
		}
	}
	var err error
	switch {
	case out == unreadable:
		err = h.c.ReleaseUnreadable(endCtx, g.Group.ID, g.Fence, h.windowError)
	case saved:
		err = h.c.ReleaseStopped(endCtx, g.Group.ID, g.Fence)
	default:
		err = h.c.Release(endCtx, g.Group.ID, g.Fence)
	}
	if err != nil {
		if errors.Is(err, leasehold.ErrLeaseLost) {
			h.log.Warn("lease lost before release")
			return lost
		}
		h.log.Error("release failed; the TTL will free the group", "err", err)
		return out
	}
	h.log.Info("released group", "why", [...]string{"caught up", "stopping", "failed", "suspect window", "lost", "unreadable window"}[out])
	return out
}

func (w *Worker) stopTimeout() time.Duration {
	if w.StopTimeout <= 0 {
		return 30 * time.Second
	}
	return w.StopTimeout
}

func snapshotNext(s *leasehold.Snapshot) int64 {
	if s == nil {
		return 0
	}
	return s.Next
}

// work loads the window and runs the group's ranges until caught up, lost,
// stopped or failed.
func (h *hold) work(ctx context.Context) outcome {
	c := h.c
	if out, ok := h.loadWindow(ctx); !ok {
		return out
	}
	// done is the range indexed last, finished with the call for the next
	// one unless a window upload is due first.
	var done *leasehold.Range
	for {
		var r *leasehold.Range
		var err error
		if done != nil {
			r, err = h.finishAndNext(ctx, *done)
		} else {
			r, err = c.Next(ctx, h.g.Group.ID, h.g.Fence)
		}
		if err != nil {
			return h.judge(ctx, err, "next")
		}
		done = nil
		if ctx.Err() != nil {
			return stopped // the range just leased goes back with the release
		}
		h.touch()
		if r == nil {
			return caughtUp
		}
		if h.windowNext == 0 {
			if out, ok := h.startWindow(ctx, r.Start); !ok {
				return out
			}
		}
		if out, ok := h.indexRange(ctx, r); !ok {
			return out
		}
		iv := h.w.snapshotInterval()
		if ctx.Err() == nil && (iv <= 0 || time.Since(h.lastSnapshot) < iv) {
			done = r // finished with the next call
			continue
		}
		if out, ok := h.finish(ctx, *r); !ok {
			return out
		}
		if iv > 0 && time.Since(h.lastSnapshot) >= iv {
			if out, ok := h.uploadDue(ctx); !ok {
				return out
			}
		}
	}
}

// startWindow starts an empty window at the group's first range. It goes
// up at once: without any snapshot the node keeps finished ranges done on
// the next lease, so a crash or a panic before the first upload would lose
// them from every later window; with one, the next lease plans again all
// after it. A failed upload other than a lost lease is only logged.
func (h *hold) startWindow(ctx context.Context, start int64) (outcome, bool) {
	h.windowNext = start
	if err := h.upload(ctx); err != nil {
		if h.isLost.Load() || errors.Is(err, leasehold.ErrLeaseLost) {
			return lost, false
		}
		h.log.Warn("upload of the empty window failed; going on", "err", err)
	}
	return 0, true
}

// indexRange makes r the range in work and indexes it; false with the
// hold's outcome when the work of the group ends with it.
func (h *hold) indexRange(ctx context.Context, r *leasehold.Range) (outcome, bool) {
	h.mu.Lock()
	h.rng, h.pending, h.sent, h.headers = *r, r.Next, r.Next, 0
	h.mu.Unlock()

	h.dirty = true
	err, panicked := h.index(ctx, *r)
	switch {
	case panicked:
		return suspect, false
	case h.isLost.Load():
		return lost, false
	case err != nil:
		if ctx.Err() == nil {
			h.log.Error("index failed; releasing the group", "range", r.ID, "err", err)
		}
		h.mu.Lock()
		h.windowNext = h.pending
		h.mu.Unlock()
		out := h.judge(ctx, err, "index")
		if out == failed && !h.failRange(ctx, *r, err) {
			return lost, false
		}
		return out, false
	}
	return 0, true
}

// uploadDue uploads the window the snapshot interval asks for; a failed
// upload other than a lost lease or a stop is only logged.
func (h *hold) uploadDue(ctx context.Context) (outcome, bool) {
	if err := h.upload(ctx); err != nil {
		if h.isLost.Load() || errors.Is(err, leasehold.ErrLeaseLost) {
			return lost, false
		}
		if ctx.Err() != nil {
			return stopped, false
		}
		h.log.Warn("window upload failed; going on", "err", err)
	}
	return 0, true
}

// judge turns an error of the work into its outcome.
func (h *hold) judge(ctx context.Context, err error, what string) outcome {
	switch {
	case h.isLost.Load() || errors.Is(err, leasehold.ErrLeaseLost):
		h.lose(err)
		return lost
	case ctx.Err() != nil:
		return stopped
	}
	if what != "index" {
		h.log.Error(what+" failed; releasing the group", "err", err)
	}
	return failed
}

// loadWindow starts the group's window: the snapshot's when there is one.
func (h *hold) loadWindow(ctx context.Context) (outcome, bool) {
	h.window = h.w.NewWindowFunc(h.g.Group)
	if h.g.Snapshot == nil {
		return 0, true
	}
	sr, err := h.c.GetSnapshot(ctx, h.g.Group.ID, h.g.Fence, 0)
	if err != nil {
		return h.judge(ctx, err, "snapshot download"), false
	}
	if sr == nil {
		h.log.Warn("lease named a snapshot the node no longer has; starting empty")
		return 0, true
	}
	defer sr.Close()
	h.touch()
	src := &downloadReader{r: sr}
	err = func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				h.log.Error("panic in Window.Load", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				err = fmt.Errorf("panic in Load: %v", p)
			}
		}()
		gz, err := gzip.NewReader(src)
		if err != nil {
			return err
		}
		window := &WindowLimit{R: gz, Max: h.w.maxWindowBytes()}
		if err := h.window.Load(window); err != nil {
			return err
		}
		// Read to the end so the download's digest is checked.
		if _, err := io.Copy(io.Discard, window); err != nil {
			return err
		}
		return gz.Close()
	}()
	if err != nil {
		if out := h.judge(ctx, err, "index"); out != failed {
			return out, false
		}
		if src.err != nil {
			// The download broke, not the window: let the group go plainly.
			h.log.Error("window snapshot download failed; releasing the group", "err", err)
			return suspect, false
		}
		h.log.Error("window snapshot did not load; releasing the group for an operator to look at", "err", err)
		h.windowError = "window did not load: " + err.Error()
		return unreadable, false
	}
	h.windowNext = sr.Next
	if h.windowNext == 0 {
		h.windowNext = h.g.Snapshot.Next
	}
	h.log.Info("window loaded", "next", h.windowNext, "bytes", sr.Size)
	return 0, true
}

// downloadReader keeps the first error of a snapshot download other than
// its end, so a window that did not load is told from a transfer that
// broke off.
type downloadReader struct {
	r   io.Reader
	err error
}

func (d *downloadReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF && d.err == nil {
		d.err = err
	}
	return n, err
}

// failRange tells the node why r could not be indexed, after its last
// progress, so it resumes where the window ends: retried unless err is
// permanent. It reports false when the lease turned out lost; any other
// refusal is logged, and the release that follows plans the range again.
func (h *hold) failRange(ctx context.Context, r leasehold.Range, err error) bool {
	h.flushProgress(ctx)
	if h.isLost.Load() {
		return false
	}
	var permanent *PermanentError
	retry := !errors.As(err, &permanent)
	h.callMu.Lock()
	h.mu.Lock()
	h.rng = leasehold.Range{}
	h.mu.Unlock()
	_, ferr := h.c.FailRange(ctx, r.ID, h.g.Fence, err.Error(), retry)
	h.callMu.Unlock()
	switch {
	case ferr == nil:
		h.touch()
		h.log.Info("range failed at the node", "range", r.ID, "retry", retry)
	case errors.Is(ferr, leasehold.ErrLeaseLost):
		h.lose(ferr)
		return false
	default:
		h.log.Warn("range failure not reported", "range", r.ID, "err", ferr)
	}
	return true
}

// index calls IndexFunc on r, turning a panic into a logged failure.
func (h *hold) index(ctx context.Context, r leasehold.Range) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic in IndexFunc; releasing the group without finishing the range",
				"range", r.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err, panicked = fmt.Errorf("panic: %v", p), true
		}
	}()
	progress := func(next, headers int64) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.rng.ID != r.ID {
			return // a late call for a range already finished
		}
		next = min(max(next, r.Next), r.End+1)
		h.pending = max(h.pending, next)
		h.headers = headers
	}
	return h.w.IndexFunc(ctx, h.g, r, h.window, progress), false
}

// finish reports r done, after its last progress.
func (h *hold) finish(ctx context.Context, r leasehold.Range) (outcome, bool) {
	h.callMu.Lock()
	h.mu.Lock()
	headers := h.headers
	h.rng = leasehold.Range{}
	h.mu.Unlock()
	// The range is in the window whole: finish it even if the worker is
	// stopping meanwhile, so that nobody redoes it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.w.stopTimeout())
	_, err := h.c.Finish(fctx, r.ID, h.g.Fence, headers)
	cancel()
	h.callMu.Unlock()
	if err != nil {
		return h.judge(ctx, err, "finish"), false
	}
	h.touch()
	h.windowNext = r.End + 1
	return 0, true
}

// finishAndNext reports r done and leases the next range in one call,
// after r's last progress. Like finish it is not cut short by a stop: the
// range is in the window whole, and a range leased meanwhile goes back
// with the release.
func (h *hold) finishAndNext(ctx context.Context, r leasehold.Range) (*leasehold.Range, error) {
	h.callMu.Lock()
	h.mu.Lock()
	headers := h.headers
	h.rng = leasehold.Range{}
	h.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.w.stopTimeout())
	next, err := h.c.NextAfter(fctx, h.g.Group.ID, h.g.Fence, &Finished{Range: r.ID, Headers: headers})
	cancel()
	h.callMu.Unlock()
	if err != nil {
		return nil, err
	}
	h.touch()
	h.windowNext = r.End + 1
	return next, nil
}
