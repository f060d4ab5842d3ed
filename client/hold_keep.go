// The holder calls that keep a held group while it is worked: heartbeats,
// progress reports and window uploads.

package client

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/leasehold/leasehold"
)

// snapshotInterval is how often a held window is uploaded.
func (w *Worker) snapshotInterval() time.Duration {
	if w.SnapshotInterval == 0 {
		return DefaultSnapshotInterval
	}
	return w.SnapshotInterval
}

// heartbeat keeps the lease alive every TTL/3 until ctx ends: with the
// range's progress when there is new progress (a holder call is a
// heartbeat), else with a heartbeat unless another holder call was
// answered since the last tick. On lease_lost, or when the node has not
// answered for a whole TTL (someone else may hold the group by now), it
// cancels the group's work.
func (h *hold) heartbeat(ctx context.Context) {
	for {
		interval := max(time.Duration(h.ttl.Load())/3, 10*time.Millisecond)
		if sleep(ctx, interval) != nil {
			return
		}
		sentProgress, err := h.sendProgress(ctx)
		if err == nil && !sentProgress && time.Since(h.lastContact()) >= interval {
			var ttl time.Duration
			if ttl, err = h.c.Heartbeat(ctx, h.g.Group.ID, h.g.Fence); err == nil {
				h.touch()
				if ttl > 0 {
					h.ttl.Store(int64(ttl))
				}
			}
		}
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, leasehold.ErrLeaseLost):
			h.lose(err)
			return
		case time.Since(h.lastContact()) > time.Duration(h.ttl.Load()):
			h.lose(fmt.Errorf("no answer from the node for a TTL: %w", err))
			return
		default:
			h.log.Warn("heartbeat failed", "err", err)
		}
	}
}

// sendProgress sends the range's new progress, if any, and reports
// whether it did.
func (h *hold) sendProgress(ctx context.Context) (bool, error) {
	h.callMu.Lock()
	defer h.callMu.Unlock()
	h.mu.Lock()
	id, next, sent := h.rng.ID, h.pending, h.sent
	h.mu.Unlock()
	if id == 0 || next <= sent {
		return false, nil
	}
	if _, err := h.c.Progress(ctx, id, h.g.Fence, next); err != nil {
		if errors.Is(err, leasehold.ErrUnprocessable) {
			// The node is past this point already; nothing to fix.
			return false, nil
		}
		return false, err
	}
	h.touch()
	h.mu.Lock()
	h.sent = max(h.sent, next)
	h.mu.Unlock()
	return true, nil
}

// flushProgress sends the last progress before an upload or release, so
// the range resumes where the window ends.
func (h *hold) flushProgress(ctx context.Context) (sent bool) {
	if _, err := h.sendProgress(ctx); err != nil {
		if errors.Is(err, leasehold.ErrLeaseLost) {
			h.lose(err)
			return false
		}
		h.log.Warn("last progress not sent", "err", err)
		return false
	}
	return true
}

func (h *hold) touch()                 { h.contact.Store(time.Now().UnixNano()) }
func (h *hold) lastContact() time.Time { return time.Unix(0, h.contact.Load()) }

// lose marks the group lost and cancels its work at once.
func (h *hold) lose(err error) {
	if h.isLost.CompareAndSwap(false, true) {
		h.log.Warn("lease lost; cancelling the group's work", "err", err)
		h.cancelWork(errLeaseLost)
	}
}

// upload saves the window gzipped and streams it to the node as the
// snapshot at windowNext. Save runs again on a retry, since a streamed
// body cannot be rewound.
func (h *hold) upload(ctx context.Context) error {
	c := h.c
	attempts := max(c.Retry.Attempts, 1)
	for attempt := 0; ; attempt++ {
		if h.isLost.Load() {
			return errLeaseLost
		}
		s, sum, err := h.uploadOnce(ctx)
		if err == nil && s.SHA256 != "" && s.SHA256 != sum {
			err = leasehold.Errorf(leasehold.KindInternal, "node stored sha-256 %s, sent %s", s.SHA256, sum)
		}
		if err == nil {
			h.touch()
			h.dirty = false
			h.lastSnapshot = time.Now()
			h.log.Info("window uploaded", "next", s.Next, "bytes", s.Size)
			return nil
		}
		k := leasehold.KindOf(err)
		retry := k == leasehold.KindUnavailable || k == leasehold.KindInternal
		if !retry || attempt+1 >= attempts || ctx.Err() != nil {
			return err
		}
		if err := c.Retry.Sleep(ctx, attempt, 0); err != nil {
			return err
		}
	}
}

func (h *hold) uploadOnce(ctx context.Context) (*leasehold.Snapshot, string, error) {
	pr, pw := io.Pipe()
	sum := sha256.New()
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic in Save: %v", p)
				h.log.Error("panic in Window.Save", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
			pw.CloseWithError(err)
		}()
		gz := gzip.NewWriter(io.MultiWriter(pw, sum))
		if err = h.window.Save(gz); err == nil {
			err = gz.Close()
		}
	}()
	s, err := h.c.PutSnapshot(ctx, h.g.Group.ID, h.g.Fence, h.windowNext, pr, SnapshotUpload{Gzip: true})
	// Unblock a Save the node stopped reading.
	pr.CloseWithError(errors.New("upload ended"))
	<-saved
	if err != nil {
		return nil, "", err
	}
	return s, hex.EncodeToString(sum.Sum(nil)), nil
}
