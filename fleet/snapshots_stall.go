package fleet

// The stall bound on a replicated window's download: an import that
// waits too long for its next bytes gives the download up, so a node
// never holds a group it won while a download hangs.

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// snapshotStall is how long an import waits for the next bytes of a
// window, its object store read before the first byte included, before it
// gives the download up as stalled; the size-based allowance above stays
// as the bound on the whole. An external-NATS fault run on a loaded
// machine had a download hang for its whole minute while the node held
// the claim it had won for the group, so the group made no progress. 10 s
// outlasts a leader election (4–9 s, see renewEvery), the pause a healthy
// download may see, and is two of the client's 5 s idle heartbeats; it is
// below the shortest claim TTL (ClaimTTLFloor), so a group waits on a
// stalled import for less than it would on a crashed node: the adoption
// lets the claim go (ErrBehind) and the group is taken up again later.
// The client's own reset of a silent consumer comes only 10–20 s in, too
// late to count on.
const snapshotStall = 10 * time.Second

// downloadWatch gives up a window's download that waits r.stall for bytes
// with none arriving (see snapshotStall): it cancels the download's
// context with the stall as its cause. Only time spent waiting on the
// object store counts, not the snapshot store's writes between reads, so
// a slow disk is not taken for a stalled download.
type downloadWatch struct {
	ctx    context.Context // the download's, as the object store client is given it
	cancel context.CancelCauseFunc
	group  string
	size   uint64
	bound  time.Duration
	log    *slog.Logger
	timer  *time.Timer

	mu      sync.Mutex
	read    uint64    // bytes arrived so far
	waiting bool      // a wait for bytes is under way
	since   time.Time // when it began
	stalled error     // the stall that cut the download off
	stopped bool
}

// watchDownload watches a download of size bytes of group's window made
// within ctx, which bounds it as a whole.
func watchDownload(ctx context.Context, group string, size uint64, bound time.Duration, log *slog.Logger) *downloadWatch {
	cctx, cancel := context.WithCancelCause(ctx)
	w := &downloadWatch{ctx: stallDeadline{cctx, bound}, cancel: cancel, group: group, size: size, bound: bound, log: log}
	w.timer = time.AfterFunc(bound, w.check)
	w.timer.Stop()
	return w
}

// stallDeadline is a download's context as the object store client sees
// it, its deadline never more than the stall bound away. The client's
// Read waits on a pipe until its context's deadline and looks at the
// context's end only then, so with the whole download's deadline a stall's
// cancel would not be seen before that; with this one a Read that gets no
// bytes ends within the bound (with the pipe's timeout as its error, or
// the cancel), and the watch takes that for the stall.
type stallDeadline struct {
	context.Context
	bound time.Duration
}

func (c stallDeadline) Deadline() (time.Time, bool) {
	soon := time.Now().Add(c.bound)
	if d, ok := c.Context.Deadline(); ok && d.Before(soon) {
		return d, true
	}
	return soon, true
}

// wait marks a wait for bytes begun, unless one is under way already: a
// read that returned nothing does not restart the stall's clock.
func (w *downloadWatch) wait() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting || w.stopped {
		return
	}
	w.waiting, w.since = true, time.Now()
	w.timer.Reset(w.bound)
}

// arrived counts n bytes arrived; bytes, or the end of the wait (ended:
// an error, the end of the body, Get's return), end the wait.
func (w *downloadWatch) arrived(n int, ended bool) {
	if n <= 0 && !ended {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.read += uint64(max(n, 0))
	w.waiting = false
	w.timer.Stop()
}

// check runs when the bound has passed since a wait was armed, or a
// wait ended in an error: the download is cut off if that wait is still
// under way and as old as the bound (a timer that fired just as bytes
// came, with a new wait armed since, is set again for what is left of it).
func (w *downloadWatch) check() {
	w.mu.Lock()
	if !w.waiting || w.stopped || w.stalled != nil {
		w.mu.Unlock()
		return
	}
	if left := w.bound - time.Since(w.since); left > 0 {
		w.timer.Reset(left)
		w.mu.Unlock()
		return
	}
	w.stalled = leasehold.Errorf(leasehold.KindUnavailable, "downloading the snapshot of group %q stalled: no bytes for %s after %d of %d bytes", w.group, w.bound, w.read, w.size)
	w.cancel(w.stalled)
	read := w.read
	w.mu.Unlock()
	w.log.Warn("snapshots: a replicated window's download stalled; the group is let go and taken up again later", "group", w.group, "read", read, "size", w.size, "bound", w.bound)
}

// err is the stall that cut the download off, nil if none did.
func (w *downloadWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalled
}

// stop ends the watch: no stall is seen after it.
func (w *downloadWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
	w.cancel(nil)
}

// watchedBody is a download's body read through its watch: every read is
// a wait for bytes until some arrive. It reads into the caller's buffer,
// holding nothing of its own.
type watchedBody struct {
	r     io.Reader
	watch *downloadWatch
}

func (b watchedBody) Read(p []byte) (int, error) {
	b.watch.wait()
	n, err := b.r.Read(p)
	if n == 0 && err != nil {
		// A read ended on the stall's deadline (stallDeadline) may come
		// back before the watch's timer fires: the stall is seen here.
		b.watch.check()
	}
	b.watch.arrived(n, err != nil)
	if n == 0 || err != nil {
		if serr := b.watch.err(); serr != nil {
			return n, serr
		}
	}
	return n, err
}
