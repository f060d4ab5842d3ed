package fleetfault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// A recording worker drives one node's worker API as a worker program
// would (lease, snapshot get, next, progress, finish, snapshot put, and
// release when caught up or after a few ranges, heartbeats beside), and
// records every call. A call that gets no answer or a 5xx is tried again
// with the same fence until the retry bound; a 409 ends the lease.
type worker struct {
	run  *run
	node *Node
	name string
	c    *client.Client
}

// outcome is what became of a call and its retries.
type outcome int

const (
	acked  outcome = iota
	lost           // 409: the lease is gone
	failed         // another 4xx, or the retry bound passed, or stopped
)

// statusOf is the HTTP status of a failed call, NoAnswer when none came.
func statusOf(err error) int {
	var he *client.HTTPError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	return NoAnswer
}

// attempt makes one call, records it and says what came of it.
func (w *worker) attempt(ctx context.Context, base Call, fn func(ctx context.Context, c *Call) (int, error)) Call {
	c := base
	c.Node, c.Worker = w.node.Name, w.name
	actx, cancel := context.WithTimeout(ctx, w.run.cfg.CallTimeout)
	c.Sent = w.run.since()
	st, err := fn(actx, &c)
	c.Recv = w.run.since()
	cancel()
	if err != nil {
		c.Status, c.Err = statusOf(err), shortErr(err)
	} else {
		c.Status = st
	}
	w.run.hist.Add(c)
	return c
}

// retry makes a holder call, trying it again with the same fence while it
// gets no answer or a 5xx, for at most the retry bound.
func (w *worker) retry(ctx context.Context, base Call, fn func(ctx context.Context, c *Call) (int, error)) (Call, outcome) {
	deadline := time.Now().Add(w.run.cfg.RetryFor)
	for {
		c := w.attempt(ctx, base, fn)
		switch {
		case c.Acked():
			return c, acked
		case c.Status == http.StatusConflict:
			return c, lost
		case c.Status != NoAnswer && c.Status < 500:
			return c, failed
		case ctx.Err() != nil || time.Now().After(deadline):
			return c, failed
		}
		if sleepCtx(ctx, w.run.cfg.RetryEvery) != nil {
			return c, failed
		}
	}
}

func (w *worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		var g *client.Grant
		c := w.attempt(ctx, Call{Kind: KindLease}, func(ctx context.Context, c *Call) (int, error) {
			var err error
			if g, err = w.c.Lease(ctx); err != nil || g == nil {
				return http.StatusNoContent, err
			}
			c.Lease = w.run.hist.NewLease()
			c.Group, c.Fence = g.Group.Name, g.Fence
			return http.StatusOK, nil
		})
		if c.Status != http.StatusOK || g == nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		w.hold(ctx, g, c.Lease)
	}
}

// hold works one lease until it is released, lost or given up.
func (w *worker) hold(ctx context.Context, g *client.Grant, lease int) {
	cfg := w.run.cfg
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gid, fence := g.Group.ID, g.Fence
	w.run.hold(w.node.Name, 1)
	defer w.run.hold(w.node.Name, -1)
	base := Call{Group: g.Group.Name, Lease: lease, Fence: fence}
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		t := time.NewTicker(cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			hb := base
			hb.Kind = KindHeartbeat
			c := w.attempt(lctx, hb, func(ctx context.Context, _ *Call) (int, error) {
				_, err := w.c.Heartbeat(ctx, gid, fence)
				return http.StatusOK, err
			})
			if c.Status == http.StatusConflict {
				cancel()
				return
			}
		}
	}()
	defer func() { cancel(); <-beats }()

	call := func(kind string, fn func(ctx context.Context, c *Call) (int, error)) (Call, bool) {
		b := base
		b.Kind = kind
		c, o := w.retry(lctx, b, fn)
		return c, o == acked
	}
	win := &Window{Group: g.Group.Name}
	if _, ok := call(KindSnapGet, func(ctx context.Context, c *Call) (int, error) {
		r, err := w.c.GetSnapshot(ctx, gid, fence, 0)
		if err != nil || r == nil {
			return http.StatusNoContent, err
		}
		defer r.Close()
		body, err := io.ReadAll(io.LimitReader(r, 16<<20))
		if err != nil {
			return 0, err
		}
		got, err := DecodeWindow(body)
		if err != nil {
			c.Err = err.Error()
			return http.StatusOK, nil
		}
		win = got
		c.Upload, c.Next = got.Upload, got.Next
		return http.StatusOK, nil
	}); !ok {
		return
	}
	uploads := 0
	for ranges := 0; ; ranges++ {
		if ctx.Err() != nil {
			return
		}
		if ranges == cfg.ReleaseAfter && !w.run.draining.Load() {
			call(KindRelease, func(ctx context.Context, _ *Call) (int, error) {
				return http.StatusOK, w.c.Release(ctx, gid, fence)
			})
			return
		}
		var rg *leasehold.Range
		if _, ok := call(KindNext, func(ctx context.Context, c *Call) (int, error) {
			var err error
			if rg, err = w.c.Next(ctx, gid, fence); err != nil || rg == nil {
				return http.StatusNoContent, err
			}
			c.Range, c.Next = &Span{rg.Start, rg.End}, rg.Next
			return http.StatusOK, nil
		}); !ok {
			return
		}
		if rg == nil { // caught up
			call(KindRelease, func(ctx context.Context, _ *Call) (int, error) {
				return http.StatusOK, w.c.Release(ctx, gid, fence)
			})
			return
		}
		span := Span{rg.Start, rg.End}
		from := rg.Next
		mid := from + (rg.End+1-from)/2
		if sleepCtx(lctx, cfg.Work/2) != nil {
			return
		}
		if mid > from {
			if _, ok := call(KindProgress, func(ctx context.Context, c *Call) (int, error) {
				c.Range, c.Next = &span, mid
				_, err := w.c.Progress(ctx, rg.ID, fence, mid)
				return http.StatusOK, err
			}); !ok {
				return
			}
		}
		if sleepCtx(lctx, cfg.Work/2) != nil {
			return
		}
		if _, ok := call(KindFinish, func(ctx context.Context, c *Call) (int, error) {
			c.Range = &span
			_, err := w.c.Finish(ctx, rg.ID, fence, rg.End+1-from)
			return http.StatusOK, err
		}); !ok {
			return
		}
		w.run.finish(g.Group.Name, rg.End)
		win.Add(Span{from, rg.End})
		uploads++
		win.Next, win.Upload = rg.End+1, fmt.Sprintf("L%d.%d", lease, uploads)
		body := win.Encode()
		if _, ok := call(KindSnapPut, func(ctx context.Context, c *Call) (int, error) {
			c.Upload, c.Next = win.Upload, win.Next
			snap, err := w.c.PutSnapshot(ctx, gid, fence, win.Next, bytes.NewReader(body), client.SnapshotUpload{Length: int64(len(body))})
			if err == nil && snap.Replicated != nil {
				c.Kept = *snap.Replicated
			}
			return http.StatusCreated, err
		}); !ok {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}
