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
// and the lease's TTL.
type Grant struct {
	// Group has ID, Name and Priority set.
	Group    leasehold.Group
	Fence    int64
	Rules    Rules
	Snapshot *leasehold.Snapshot
	TTL      time.Duration
	// Takeover is true when the group was taken from a holder that went
	// quiet (an extra field of the node's answer; false if not sent).
	Takeover bool

	// node is the client of the node that granted the lease; nil means
	// the Worker's Client.
	node *Client
}

// client is the node every holder call of the grant goes to.
func (g *Grant) client(w *Worker) *Client {
	if g.node != nil {
		return g.node
	}
	return w.Client
}

type grantWire struct {
	Group    leasehold.Group     `json:"group"`
	Fence    int64               `json:"fence"`
	Rules    Rules               `json:"rules"`
	Snapshot *leasehold.Snapshot `json:"snapshot"`
	TTLS     float64             `json:"ttl_s"`
	Takeover bool                `json:"takeover"`
}

// Lease asks the node for a group. It returns nil, nil when there is
// nothing to lease: the node is paused, at capacity, or nothing is planned
// in its band.
//
// Lease is retried on connection errors like every call; if an answer is
// lost on the way back, the group granted by it is held until the TTL lets
// it go.
func (c *Client) Lease(ctx context.Context) (*Grant, error) {
	var w grantWire
	ok, err := c.do(ctx, http.MethodPost, "/api/v1/leases", nil, &w)
	if err != nil || !ok {
		return nil, err
	}
	return &Grant{Group: w.Group, Fence: w.Fence, Rules: w.Rules, Snapshot: w.Snapshot, TTL: seconds(w.TTLS), Takeover: w.Takeover}, nil
}

type fenceBody struct {
	Fence int64 `json:"fence"`
}

// Next returns the range to work on in group: the one in work, or the
// group's lowest planned range. It returns nil, nil when the group is caught
// up: save the window, upload it and release.
func (c *Client) Next(ctx context.Context, group, fence int64) (*leasehold.Range, error) {
	var out struct {
		Range leasehold.Range `json:"range"`
	}
	ok, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/next", group), fenceBody{fence}, &out)
	if err != nil || !ok {
		return nil, err
	}
	out.Range.GroupID = group
	return &out.Range, nil
}

// Finished is a range reported done in the call that asks for the next
// one (NextAfter).
type Finished struct {
	Range   int64 `json:"range"`
	Headers int64 `json:"headers"`
}

// NextAfter finishes done (as Finish does) and leases the group's next
// range in one call and one write on the node: a range costs one call. If
// the finish is refused nothing changes. nil when the group is caught up.
// Retrying it is safe: a range finished again is answered again, and the
// range in work is handed out again.
func (c *Client) NextAfter(ctx context.Context, group, fence int64, done *Finished) (*leasehold.Range, error) {
	if done == nil {
		return c.Next(ctx, group, fence)
	}
	in := struct {
		Fence    int64     `json:"fence"`
		Finished *Finished `json:"finished"`
	}{fence, done}
	var out struct {
		Range leasehold.Range `json:"range"`
	}
	ok, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/next", group), in, &out)
	if err != nil || !ok {
		return nil, err
	}
	out.Range.GroupID = group
	return &out.Range, nil
}

// Heartbeat keeps the lease of group alive and returns its TTL.
func (c *Client) Heartbeat(ctx context.Context, group, fence int64) (time.Duration, error) {
	var out struct {
		TTLS float64 `json:"ttl_s"`
	}
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/heartbeat", group), fenceBody{fence}, &out); err != nil {
		return 0, err
	}
	return seconds(out.TTLS), nil
}

// Progress moves the resume point of range id to next: every id below it is
// in the window. A next that goes backwards or past end+1 is
// leasehold.ErrUnprocessable.
func (c *Client) Progress(ctx context.Context, id, fence, next int64) (*leasehold.Range, error) {
	in := struct {
		Fence int64 `json:"fence"`
		Next  int64 `json:"next"`
	}{fence, next}
	var r leasehold.Range
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/ranges/%d/progress", id), in, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Finish marks range id done with the number of headers it indexed.
func (c *Client) Finish(ctx context.Context, id, fence, headers int64) (*leasehold.Range, error) {
	in := struct {
		Fence   int64 `json:"fence"`
		Headers int64 `json:"headers"`
	}{fence, headers}
	var r leasehold.Range
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/ranges/%d/finish", id), in, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Release gives group back; its range in work goes back to planned at its
// resume point.
func (c *Client) Release(ctx context.Context, group, fence int64) error {
	_, err := c.do(ctx, http.MethodPost, pathf("/api/v1/leases/%d/release", group), fenceBody{fence}, nil)
	return err
}

// ReleaseUnreadable gives group back because its window would not load,
// saying why (windowError, 1 to 4096 bytes): the node quarantines the
// group, leasing it to nobody until an operator keeps the window, drops
// it or restores another. A text over 4096 bytes is cut to fit.
func (c *Client) ReleaseUnreadable(ctx context.Context, group, fence int64, windowError string) error {
	in := struct {
		Fence       int64  `json:"fence"`
		WindowError string `json:"window_error"`
	}{fence, errorText(windowError)}
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
	in := struct {
		Fence int64  `json:"fence"`
		Error string `json:"error"`
		Retry bool   `json:"retry"`
	}{fence, errorText(text), retry}
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

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
