package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// worker is one worker node of the load: it leases groups, works their
// ranges, uploads and reads window snapshots, and logs every answer into
// the shared model. It makes one call at a time; a call the node never
// answered is its doubt, and it stops until the check has settled it.
type worker struct {
	s        *session
	name     string
	nodeID   int64
	capacity int
	api      *client.Client
	rnd      *rand.Rand

	doubt *op // the unanswered call of this round, nil if none
}

// errAnswered marks a call the node answered with an error.
var errAnswered = errors.New("answered")

// run makes calls until the round ends or a call goes unanswered.
func (c *worker) run(ctx context.Context) {
	for ctx.Err() == nil && c.doubt == nil && !c.s.failed() {
		c.step(ctx)
	}
}

// step makes one or a few calls, chosen at random from what the model says
// this worker holds.
func (c *worker) step(ctx context.Context) {
	held := c.s.model.heldBy(c.nodeID)
	if len(held) < c.capacity && (len(held) == 0 || c.rnd.Float64() < 0.15) {
		c.lease(ctx)
		return
	}
	if len(held) == 0 {
		return
	}
	g := held[c.rnd.IntN(len(held))]
	v := c.s.model.view(g)
	if v.work == nil {
		if c.rnd.Float64() < 0.05 {
			c.release(ctx, g, v)
			return
		}
		r, ok := c.next(ctx, g, v)
		if ok && r == nil {
			// Caught up: keep the window and let the group go.
			if c.snapshot(ctx, g, c.s.model.view(g)) {
				c.release(ctx, g, c.s.model.view(g))
			}
		}
		return
	}
	w := v.work
	switch p := c.rnd.Float64(); {
	case p < 0.30 && w.Next <= w.End:
		n := w.Next + 1 + c.rnd.Int64N(w.End-w.Next+1)
		c.call(ctx, &op{kind: "progress", group: g, rangeID: w.ID, arg: n}, func() error {
			r, err := c.api.Progress(ctx, w.ID, v.fence, n)
			if err == nil && r.Next != n {
				c.s.violate("answer", "progress of range %d to %d answered next %d", w.ID, n, r.Next)
			}
			return err
		})
	case p < 0.60:
		h := c.rnd.Int64N(w.End - w.Start + 2) // at most one header an id
		c.call(ctx, &op{kind: "finish", group: g, rangeID: w.ID, arg: h}, func() error {
			r, err := c.api.Finish(ctx, w.ID, v.fence, h)
			if err == nil && (r.Status != leasehold.StatusDone || r.Headers != h) {
				c.s.violate("answer", "finish of range %d answered %+v", w.ID, r)
			}
			return err
		})
	case p < 0.68:
		c.call(ctx, &op{kind: "heartbeat", group: g}, func() error {
			_, err := c.api.Heartbeat(ctx, g, v.fence)
			return err
		})
	case p < 0.80:
		c.snapshot(ctx, g, v)
	case p < 0.85:
		c.download(ctx, g, v)
	case p < 0.88:
		c.release(ctx, g, v)
	default:
		c.next(ctx, g, v)
	}
}

func (c *worker) lease(ctx context.Context) {
	o := &op{kind: "lease"}
	c.call(ctx, o, func() error {
		grant, err := c.api.Lease(ctx)
		if grant == nil && err == nil {
			time.Sleep(2 * time.Millisecond) // every group is held: let the others work
		}
		if err != nil || grant == nil {
			return err
		}
		o.group = grant.Group.ID
		c.s.model.granted(c, o, grant)
		return nil
	})
}

func (c *worker) next(ctx context.Context, g int64, v groupView) (r *leasehold.Range, answered bool) {
	err := c.call(ctx, &op{kind: "next", group: g}, func() error {
		var err error
		r, err = c.api.Next(ctx, g, v.fence)
		if err != nil {
			return err
		}
		want := v.predictNext
		switch {
		case (r == nil) != (want == nil):
			c.s.violate("answer", "next of group %d answered %+v, the model has %+v", g, r, want)
		case r != nil && (r.ID != want.ID || r.Start != want.Start || r.End != want.End || r.Next != want.Next):
			c.s.violate("answer", "next of group %d answered range %d %d..%d next %d, the model has %+v", g, r.ID, r.Start, r.End, r.Next, *want)
		}
		return nil
	})
	return r, err == nil
}

func (c *worker) release(ctx context.Context, g int64, v groupView) {
	c.call(ctx, &op{kind: "release", group: g}, func() error { return c.api.Release(ctx, g, v.fence) })
}

// snapshot uploads a window covering ids below a next between the last
// snapshot's and the frontier, so later leases sometimes replan done
// ranges (rule 2). Bodies are gzip, stored as sent, so the client knows
// the sha-256 the node must record; big ones go slowly so that kills land
// mid-upload and leave .part files.
func (c *worker) snapshot(ctx context.Context, g int64, v groupView) bool {
	next := v.frontier
	if v.snap != nil && v.snap.Next >= next {
		next = v.snap.Next
	} else if v.snap != nil && c.rnd.Float64() < 0.3 {
		next = v.snap.Next + c.rnd.Int64N(next-v.snap.Next+1)
	}
	size := 1<<10 + c.rnd.IntN(63<<10)
	if c.rnd.Float64() < 0.25 {
		size = 256<<10 + c.rnd.IntN(3<<20)
	}
	body := windowBody(c.rnd, g, next, size)
	sum := sha256.Sum256(body)
	sent := &snapState{Next: next, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	o := &op{kind: "snapshot", group: g, snap: sent}
	up := client.SnapshotUpload{Gzip: true, Length: int64(len(body))}
	if c.rnd.IntN(2) == 0 {
		up.Digest = sum[:]
	}
	err := c.call(ctx, o, func() error {
		got, err := c.api.PutSnapshot(ctx, g, v.fence, next, &slowReader{r: bytes.NewReader(body)}, up)
		if err == nil && (got.Next != sent.Next || got.Size != sent.Size || got.SHA256 != sent.SHA256) {
			c.s.violate("answer", "snapshot of group %d answered %+v, sent %s", g, got, snapString(sent))
		}
		return err
	})
	return err == nil
}

// download reads the group's window back as its holder: it must be the
// last one the model recorded, byte for byte by sha-256.
func (c *worker) download(ctx context.Context, g int64, v groupView) {
	c.call(ctx, &op{kind: "download", group: g}, func() error {
		rd, err := c.api.GetSnapshot(ctx, g, v.fence, 0)
		if err != nil {
			return err
		}
		if rd == nil {
			if v.snap != nil {
				c.s.violate("download", "group %d has no snapshot; the model has %s", g, snapString(v.snap))
			}
			return nil
		}
		defer rd.Close()
		h := sha256.New()
		n, err := io.Copy(h, rd)
		if err != nil {
			if errors.Is(err, leasehold.ErrInternal) {
				c.s.violate("download", "group %d: %v", g, err)
				return nil
			}
			return err // broken off: the node died
		}
		got := &snapState{Next: rd.Next, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
		if v.snap == nil || *got != *v.snap {
			c.s.violate("download", "group %d served %s; the model has %s", g, snapString(got), snapString(v.snap))
		}
		return nil
	})
}

// call makes one call and logs its answer. An error answer is a violation
// (the load only makes calls the model says are right); no answer at all
// makes the op this client's doubt.
func (c *worker) call(ctx context.Context, o *op, do func() error) error {
	o.client = c
	o.sent = time.Now()
	c.s.model.sending(o)
	err := do()
	var he *client.HTTPError
	switch {
	case err == nil:
		c.s.model.acked(o)
		return nil
	case errors.As(err, &he):
		c.s.violate("answer", "%s %s by %s: %d %v", o.kind, groupName(o.group), c.name, he.StatusCode, err)
		c.s.model.refused(o)
		return errAnswered
	}
	c.s.model.inDoubt(o)
	c.doubt = o
	return err
}

func groupName(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("group %d", id)
}

// windowBody is a gzip window snapshot: a header naming the group and next,
// then incompressible bytes, so the stored size is about size.
func windowBody(rnd *rand.Rand, group, next int64, size int) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	io.WriteString(zw, windowHeader(group, next))
	raw := make([]byte, size)
	for i := 0; i+8 <= len(raw); i += 8 {
		v := rnd.Uint64()
		for k := range 8 {
			raw[i+k] = byte(v >> (8 * k))
		}
	}
	zw.Write(raw)
	zw.Close()
	return b.Bytes()
}

// windowHeader is the first line of a window: its group and next.
func windowHeader(group, next int64) string {
	return fmt.Sprintf("crashtest window of group %d below %d\n", group, next)
}

// slowReader hands out the body in 64 KiB pieces with a pause between
// them, so a big upload takes tens of milliseconds.
type slowReader struct{ r io.Reader }

func (s *slowReader) Read(p []byte) (int, error) {
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	n, err := s.r.Read(p)
	if n == len(p) {
		time.Sleep(time.Millisecond)
	}
	return n, err
}

// newAPI is a client of the node with retries off: the load must see every
// failure as it is.
func newAPI(url, token string, tr *http.Transport) *client.Client {
	c := client.New(url, token)
	c.Retry.Attempts = 1
	c.HTTPClient = &http.Client{Transport: tr}
	return c
}
