package nntp

import (
	"context"
	"errors"
	"iter"
	"time"
)

// PipelineDepth is how many OVER commands a pipelined read keeps sent
// and unanswered on its connection: while the caller handles one batch
// the server is already answering the next (RFC 3977 §3.5 allows a
// client to send commands before their predecessors are answered).
const PipelineDepth = 2

// Batch is one OVER answer of a pipelined read: the span Lo..Hi that was
// asked, the headers in it in the server's order, and how many lines were
// not overview lines, with why (Skips; a source that cannot say why
// leaves it empty).
type Batch struct {
	Lo, Hi  int64
	Headers []Header
	Skipped int
	Skips   []Skip
}

// Overviews reads the overview of articles lo..end of group in spans of
// batch article numbers (the last one shorter), and yields them in
// order, one a span, a span without articles as a batch without headers,
// exactly as Overview would give them one by one. It pipelines: up to
// PipelineDepth OVER commands stand sent on its connection, so the server
// answers the next span while the caller handles one. An answer that is
// not an overview is yielded as a StatusError after every span before it,
// and ends the read. A connection dropped halfway is dialled again and
// the read resumes at the first span not yet yielded; Attempts counts
// failures in a row with no span yielded between them. Stopping early
// (break) drops the connection with its unread answers; once the
// caller has stopped, nothing more is yielded, whatever the connection
// or the context does after.
func (c *Client) Overviews(ctx context.Context, group string, lo, end, batch int64) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		if batch <= 0 {
			batch = 1
		}
		// stopped is the caller's break: yielding again after it would
		// panic the caller's range loop (a context that ended at the same
		// moment must not turn the break into an error to yield).
		stopped := false
		once := func(b Batch, err error) bool {
			if !yield(b, err) {
				stopped = true
				return false
			}
			return true
		}
		next := lo // the first span not yet yielded
		for next <= end {
			err := c.with(ctx, func(cn *conn) error {
				return c.pipeline(ctx, cn, group, &next, end, batch, once)
			})
			switch {
			case stopped || errors.Is(err, errStopped):
				return
			case err != nil:
				yield(Batch{}, err)
				return
			}
		}
	}
}

// errStopped is the caller's break out of a pipelined read: the
// connection, with answers still coming, is dropped and nothing retried.
var errStopped = errors.New("nntp: pipelined read stopped by its caller")

// progressError is a connection that failed after a pipelined read
// yielded something on it: dialling again starts a fresh count of
// attempts.
type progressError struct{ err error }

func (e *progressError) Error() string { return e.err.Error() }
func (e *progressError) Unwrap() error { return e.err }

// pipeline reads spans from *next up to end on cn, advancing *next past
// each span it yields.
func (c *Client) pipeline(ctx context.Context, cn *conn, group string, next *int64, end, batch int64, yield func(Batch, error) bool) error {
	yielded := false
	fail := func(err error) error {
		if yielded {
			return &progressError{err}
		}
		return err
	}
	cn.extend(ctx, c.cfg.Timeout)
	if cn.selected != group {
		if _, err := cn.group(group); err != nil {
			return err
		}
	}
	c.mu.Lock()
	cmd, known := "OVER", c.overKnown
	if c.useXOVER {
		cmd = "XOVER"
	}
	c.mu.Unlock()
	depth := PipelineDepth
	if !known {
		// Until the server has answered OVER once, one command at a
		// time: a server without it answers each pipelined OVER 500.
		depth = 1
	}
	var sent []Batch // asked and not yet answered, in order
	ask := *next
	for *next <= end {
		for len(sent) < depth && ask <= end {
			hi := end
			if end-ask >= batch {
				hi = ask + batch - 1
			}
			if err := cn.tp.PrintfLine("%s %d-%d", cmd, ask, hi); err != nil {
				return fail(err)
			}
			sent = append(sent, Batch{Lo: ask, Hi: hi})
			ask = hi + 1
		}
		b := sent[0]
		sent = sent[1:]
		cn.extend(ctx, c.cfg.Timeout)
		code, text, err := cn.status()
		if err != nil {
			return fail(err)
		}
		if cmd == "OVER" && !known && (code == StatusUnknownCommand || code == StatusNotSupported) {
			// Not pipelined yet (depth 1): nothing else stands sent.
			c.mu.Lock()
			c.useXOVER = true
			c.mu.Unlock()
			cmd, known = "XOVER", true
			ask = b.Lo
			continue
		}
		switch {
		case code == StatusNoArticles || code == StatusNoCurrent:
		case code == StatusOverview:
			err = cn.lines(func(line []byte) {
				h, err := ParseOverview(line)
				if err != nil {
					b.Skipped++
					b.Skips = append(b.Skips, skipOf(line, err))
					return
				}
				b.Headers = append(b.Headers, h)
			})
			if err != nil {
				return fail(err)
			}
		default:
			// Read what stands sent, so the connection stays in step
			// for its next user.
			if err := cn.drain(sent); err != nil {
				return fail(err)
			}
			return &StatusError{Command: cmd, Code: code, Text: text}
		}
		if !known {
			c.mu.Lock()
			c.overKnown = true
			c.mu.Unlock()
			known, depth = true, PipelineDepth
		}
		*next = b.Hi + 1
		yielded = true
		if !yield(b, nil) {
			if len(sent) > 0 {
				return errStopped // with() drops the connection
			}
			return &stoppedInStep{}
		}
	}
	return nil
}

// stoppedInStep is a caller's break with nothing left unanswered: the
// connection goes back to the pool.
type stoppedInStep struct{}

func (*stoppedInStep) Error() string { return errStopped.Error() }
func (*stoppedInStep) Unwrap() error { return errStopped }

// drain reads the answers to the commands in sent and throws them away.
func (cn *conn) drain(sent []Batch) error {
	for range sent {
		code, _, err := cn.status()
		if err != nil {
			return err
		}
		if code == StatusOverview {
			if err := cn.lines(func([]byte) {}); err != nil {
				return err
			}
		}
	}
	return nil
}

// extend moves the connection's deadline timeout past now, for the next
// answer of a long read, unless ctx has ended: then the deadline stays
// in the past where run's watch on ctx put it. The order (set, then
// look at ctx) leaves no moment where an ended ctx goes unseen.
func (cn *conn) extend(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	cn.nc.SetDeadline(deadline)
	if ctx.Err() != nil {
		cn.nc.SetDeadline(time.Unix(1, 0))
	}
}
