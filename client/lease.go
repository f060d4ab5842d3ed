package client

import (
	"context"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

// The worker calls take a node token: the node is the token's node. Every
// call on a group or range names the fence of the lease; a node that no
// longer holds the group at that fence gets leasehold.ErrLeaseLost and
// nothing changes. Every one of them also counts as a heartbeat.

// Grant is a lease of a group: the fence every holder call names, the
// current rules, the snapshot to resume from (nil: start an empty window)
// and the lease's TTL. It is the node's own type, read from the wire form
// leasehold.LeaseAnswer.
type Grant = leasehold.Grant

// Lease asks the node for a group. It returns nil, nil when there is
// nothing to lease: the node is paused, at capacity, or nothing is planned
// in its band.
//
// Lease is retried on connection errors like every call; if an answer is
// lost on the way back, the group granted by it is held until the TTL lets
// it go.
func (c *Client) Lease(ctx context.Context) (*Grant, error) {
	var a leasehold.LeaseAnswer
	ok, err := c.do(ctx, http.MethodPost, "/api/v1/leases", nil, &a)
	if err != nil || !ok {
		return nil, err
	}
	return a.Grant(), nil
}

// Next returns the range to work on in group: the one in work, or the
// group's lowest planned range. It returns nil, nil when the group is caught
// up: save the window, upload it and release.
func (c *Client) Next(ctx context.Context, group, fence int64) (*leasehold.Range, error) {
	return c.next(ctx, group, leasehold.NextCall{Fence: leasehold.Int(fence)})
}

func (c *Client) next(ctx context.Context, group int64, in leasehold.NextCall) (*leasehold.Range, error) {
	var out leasehold.NextAnswer
	ok, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/next", group), in, &out)
	if err != nil || !ok || out.Range == nil {
		return nil, err
	}
	out.Range.GroupID = group
	return out.Range, nil
}

// Finished is a range reported done in the call that asks for the next
// one (NextAfter): the node's own type, leasehold.FinishedRange; on the
// wire it is leasehold.Finished.
type Finished = leasehold.FinishedRange

// NextAfter finishes done (as Finish does) and leases the group's next
// range in one call and one write on the node: a range costs one call. If
// the finish is refused nothing changes. nil when the group is caught up.
// Retrying it is safe: a range finished again is answered again, and the
// range in work is handed out again.
func (c *Client) NextAfter(ctx context.Context, group, fence int64, done *Finished) (*leasehold.Range, error) {
	if done == nil {
		return c.Next(ctx, group, fence)
	}
	return c.next(ctx, group, leasehold.NextCall{Fence: leasehold.Int(fence),
		Finished: &leasehold.Finished{Range: leasehold.Int(done.Range), Headers: leasehold.Int(done.Headers)}})
}

// Heartbeat keeps the lease of group alive and returns its TTL.
func (c *Client) Heartbeat(ctx context.Context, group, fence int64) (time.Duration, error) {
	var out leasehold.HeartbeatAnswer
	in := leasehold.HolderCall{Fence: leasehold.Int(fence)}
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/heartbeat", group), in, &out); err != nil {
		return 0, err
	}
	return leasehold.Seconds(out.TTLS), nil
}

// Progress moves the resume point of range id to next: every id below it is
// in the window. A next that goes backwards or past end+1 is
// leasehold.ErrUnprocessable.
func (c *Client) Progress(ctx context.Context, id, fence, next int64) (*leasehold.Range, error) {
	in := leasehold.ProgressCall{Fence: leasehold.Int(fence), Next: leasehold.Int(next)}
	var r leasehold.Range
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/ranges/%d/progress", id), in, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Finish marks range id done with the number of headers it indexed.
func (c *Client) Finish(ctx context.Context, id, fence, headers int64) (*leasehold.Range, error) {
	in := leasehold.FinishCall{Fence: leasehold.Int(fence), Headers: leasehold.Int(headers)}
	var r leasehold.Range
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/ranges/%d/finish", id), in, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Release gives group back; its range in work goes back to planned at its
// resume point.
func (c *Client) Release(ctx context.Context, group, fence int64) error {
	in := leasehold.ReleaseCall{Fence: leasehold.Int(fence)}
	_, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/release", group), in, nil)
	return err
}

// ReleaseStopped gives group back as its holder stops cleanly, its
// progress and window saved: its range in work goes back to planned at
// its resume point and gets back the attempt its lease counted.
func (c *Client) ReleaseStopped(ctx context.Context, group, fence int64) error {
	stopped := true
	in := leasehold.ReleaseCall{Fence: leasehold.Int(fence), Stopped: &stopped}
	_, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/release", group), in, nil)
	return err
}

// ReleaseUnreadable gives group back because its window would not load,
// saying why (windowError, 1 to 4096 bytes): the node quarantines the
// group, leasing it to nobody until an operator keeps the window, drops
// it or restores another. A text over 4096 bytes is cut to fit.
func (c *Client) ReleaseUnreadable(ctx context.Context, group, fence int64, windowError string) error {
	text := errorText(windowError)
	in := leasehold.ReleaseCall{Fence: leasehold.Int(fence), WindowError: &text}
	_, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/release", group), in, nil)
	return err
}

// FailRange says why range id cannot be indexed (text, 1 to 4096 bytes;
// a longer one is cut to fit). With retry the node plans the range again
// at its resume point until its attempts run out, then fails it; without,
// it fails it at once. Either way the range shows the error as its
// last_error. The range leaves the holder's work: take the next one with
// Next.
func (c *Client) FailRange(ctx context.Context, id, fence int64, text string, retry bool) (*leasehold.Range, error) {
	text = errorText(text)
	in := leasehold.FailCall{Fence: leasehold.Int(fence), Error: &text, Retry: &retry}
	var r leasehold.Range
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/ranges/%d/fail", id), in, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// errorText fits an error's text to what the node takes: valid UTF-8
// (JSON would widen each invalid byte to three), 1 to
// leasehold.MaxErrorBytes bytes, cut at a rune boundary.
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if s == "" {
		return "(no error text)"
	}
	if len(s) <= leasehold.MaxErrorBytes {
		return s
	}
	cut := leasehold.MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// PermanentError marks an IndexFunc error that retrying the range will
// not mend (an article the indexer cannot parse, a rule that rejects the
// range): the Worker fails the range at once instead of asking for a
// retry. Make one with Permanent; errors.As finds it through wrapping.
type PermanentError struct {
	Err error
}

// Permanent marks err as permanent (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap is the error marked permanent.
func (e *PermanentError) Unwrap() error { return e.Err }
