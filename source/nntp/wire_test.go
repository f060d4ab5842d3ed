package nntp_test

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

// wireGroup makes a fresh group for the tests of this file and posts n
// plain articles into it (dated when dates is not nil), then cancels the
// articles numbered gaps.
func wireGroup(t *testing.T, n int, dates func(i int) time.Time, gaps ...int64) (*usenettest.Server, string) {
	t.Helper()
	s := usenettest.Find(t)
	group := fmt.Sprintf("alt.binaries.lh.wire.t%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.NewGroups(ctx, group); err != nil {
		t.Fatal(err)
	}
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer c.Close()
	var arts []usenettest.Article
	for i := 1; i <= n; i++ {
		a := usenettest.Article{Group: group, From: usenettest.Alice, Subject: fmt.Sprintf("[1/1] - \"wire%03d.bin\" yEnc (1/1)", i), Body: "=ybegin"}
		if dates == nil {
			arts = append(arts, a)
			continue
		}
		if err := c.Post(ctx, a.Dated(dates(i))); err != nil {
			t.Fatalf("posting article %d: %v", i, err)
		}
	}
	if dates == nil {
		if err := usenettest.Post(ctx, c, arts); err != nil {
			t.Fatal(err)
		}
	} else {
		// The server files a dated post a moment after taking it: its
		// group's high mark says when all are there.
		deadline, _ := ctx.Deadline()
		poll.Until(t, time.Until(deadline), fmt.Sprintf("the %d dated articles of %s filed", n, group), func() error {
			reader := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
			defer reader.Close()
			gi, err := reader.Group(ctx, group)
			if err == nil && gi.High < int64(n) {
				err = fmt.Errorf("the server has %+v", gi)
			}
			return err
		})
	}
	if len(gaps) > 0 {
		if err := s.Cancel(ctx, group, gaps...); err != nil {
			t.Fatal(err)
		}
	}
	return s, group
}

// oneByOne reads lo..end in spans of batch with one Overview each, the
// unpipelined way: what a pipelined read must equal.
func oneByOne(t *testing.T, c *nntp.Client, group string, lo, end, batch int64) []nntp.Batch {
	t.Helper()
	var out []nntp.Batch
	for ; lo <= end; lo += batch {
		hi := min(end, lo+batch-1)
		hs, skipped, err := c.Overview(context.Background(), group, lo, hi)
		if err != nil {
			t.Fatalf("OVER %d-%d: %v", lo, hi, err)
		}
		out = append(out, nntp.Batch{Lo: lo, Hi: hi, Headers: hs, Skipped: skipped})
	}
	return out
}

// pipelined collects a pipelined read, failing the test on an error.
func pipelined(t *testing.T, c *nntp.Client, group string, lo, end, batch int64) []nntp.Batch {
	t.Helper()
	var out []nntp.Batch
	for b, err := range c.Overviews(context.Background(), group, lo, end, batch) {
		if err != nil {
			t.Fatalf("pipelined read of %s %d-%d after %d batches: %v", group, lo, end, len(out), err)
		}
		out = append(out, b)
	}
	return out
}

// sameBatches fails unless got and want are the same spans with the same
// headers (an empty span read as no headers either way).
func sameBatches(t *testing.T, what string, got, want []nntp.Batch) {
	t.Helper()
	norm := func(bs []nntp.Batch) []nntp.Batch {
		out := make([]nntp.Batch, len(bs))
		for i, b := range bs {
			out[i] = b
			if len(b.Headers) == 0 {
				out[i].Headers = nil
			}
		}
		return out
	}
	if !reflect.DeepEqual(norm(got), norm(want)) {
		t.Fatalf("%s: %d batches differ from the %d read one by one:\ngot  %+v\nwant %+v", what, len(got), len(want), got, want)
	}
}

// numbers is the article numbers of a read.
func numbers(bs []nntp.Batch) []int64 {
	var ns []int64
	for _, b := range bs {
		for _, h := range b.Headers {
			ns = append(ns, h.Number)
		}
	}
	return ns
}

// TestOverviewsPipelinedAgainstINN: a pipelined read of a group with
// gaps (cancelled articles) and past its end gives exactly the batches
// of one OVER at a time, and it is pipelined: a relay that holds the
// first answer back until the client has sent the next OVER sees that
// OVER come (an unpipelined client would wait for the answer first).
func TestOverviewsPipelinedAgainstINN(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 60, nil, 7, 20, 21, 22, 23, 24, 25, 41)
	plain := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, NoCompress: true})
	defer plain.Close()
	want := oneByOne(t, plain, group, 1, 75, 8)
	ns := numbers(want)
	if len(ns) != 52 || ns[6] != 8 || ns[18] != 26 || ns[len(ns)-1] != 60 {
		t.Fatalf("the one-by-one read: articles %v; want 1..60 without 7, 20-25 and 41", ns)
	}
	if len(want) != 10 || len(want[8].Headers) != 0 || len(want[9].Headers) != 0 {
		t.Fatalf("the one-by-one read: %d batches, want 10, the last two past the end empty", len(want))
	}

	// From the second read on, the relay holds the first answer back
	// until the client has sent the next OVER, or for 3 s.
	var mu sync.Mutex
	secondSent := make(chan struct{})
	var once sync.Once
	watching, overs, heldOut := false, 0, false
	p := newProxy(t, s.Addr, func(fromServer bool, line []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		if !watching {
			return line
		}
		switch {
		case !fromServer && bytes.HasPrefix(line, []byte("OVER ")):
			if overs++; overs == 2 {
				once.Do(func() { close(secondSent) })
			}
		case fromServer && bytes.HasPrefix(line, []byte("224 ")) && overs <= 2 && !heldOut:
			mu.Unlock()
			select {
			case <-secondSent:
			case <-time.After(3 * time.Second):
				heldOut = true
			}
			mu.Lock()
		}
		return line
	})
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c.Close()
	// The first read learns that the server answers OVER (one command
	// at a time until then); the second pipelines from its first span.
	sameBatches(t, "pipelined, the first read", pipelined(t, c, group, 1, 75, 8), want)
	mu.Lock()
	watching = true
	mu.Unlock()
	sameBatches(t, "pipelined", pipelined(t, c, group, 1, 75, 8), want)
	mu.Lock()
	if heldOut || overs < 2 {
		t.Errorf("the client waited for an OVER's answer before sending the next (%d OVERs sent): not pipelined", overs)
	}
	mu.Unlock()

	// The same through the compressed connection the client makes by
	// default, and spans of one article.
	z := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer z.Close()
	sameBatches(t, "pipelined and compressed", pipelined(t, z, group, 1, 75, 8), want)
	sameBatches(t, "spans of one article", pipelined(t, z, group, 18, 27, 1), oneByOne(t, plain, group, 18, 27, 1))
}

// TestCompressAgainstINN: INN offers COMPRESS DEFLATE after MODE
// READER; the client asks for it and INN answers 206. From then on
// nothing crosses the wire as text (no OVER, no 224), and the headers
// read are the uncompressed read's.
func TestCompressAgainstINN(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 40, nil, 13)
	plain := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, NoCompress: true})
	defer plain.Close()
	want := oneByOne(t, plain, group, 1, 45, 10)

	p := newProxy(t, s.Addr, nil)
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c.Close()
	sameBatches(t, "compressed", pipelined(t, c, group, 1, 45, 10), want)
	if a := c.CompressAnswer(); !strings.HasPrefix(a, "206 ") {
		t.Errorf("COMPRESS DEFLATE answered %q, want 206", a)
	}
	sent, served := p.clientSent(), p.serverSent()
	i := strings.Index(sent, "COMPRESS DEFLATE\r\n")
	j := strings.Index(served, "\r\n206 ")
	if i < 0 || j < 0 {
		t.Fatalf("COMPRESS DEFLATE not sent (%q) or 206 not answered (%q)", sent, served)
	}
	// Both directions after COMPRESS are DEFLATE streams: they are not
	// the text, and they inflate into it.
	commands := sent[i+len("COMPRESS DEFLATE\r\n"):]
	wantCommands := "GROUP " + group + "\r\nOVER 1-10\r\nOVER 11-20\r\nOVER 21-30\r\nOVER 31-40\r\nOVER 41-45\r\n"
	if strings.Contains(commands, wantCommands) || inflated(commands) != wantCommands {
		t.Errorf("after COMPRESS the client sent %q, inflating to %q; want %q compressed", commands, inflated(commands), wantCommands)
	}
	answers := served[j+2:]
	answers = answers[strings.Index(answers, "\r\n")+2:]
	if strings.Contains(answers, "224 ") || !strings.Contains(inflated(answers), "\r\n224 ") || !strings.HasPrefix(inflated(answers), "211 ") {
		t.Errorf("after 206 the server's answers crossed the wire in plain text, or do not inflate into GROUP's and OVER's answers")
	}
}

// inflated is what a raw DEFLATE stream cut off anywhere holds.
func inflated(stream string) string {
	out, _ := io.ReadAll(flate.NewReader(strings.NewReader(stream)))
	return string(out)
}

// TestCompressRefused: a server that refuses COMPRESS DEFLATE (INN's
// answer to another algorithm, 503, shown it by a relay) or does not
// list it is read uncompressed, the same headers, with no error.
func TestCompressRefused(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 20, nil)
	plain := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, NoCompress: true})
	defer plain.Close()
	want := oneByOne(t, plain, group, 1, 20, 6)

	refusing := newProxy(t, s.Addr, func(fromServer bool, line []byte) []byte {
		if !fromServer && string(line) == "COMPRESS DEFLATE\r\n" {
			return []byte("COMPRESS LZMA\r\n")
		}
		return line
	})
	refusing.offerCompress.Store(true)
	c := nntp.New(nntp.Config{Addr: refusing.ln.Addr().String(), Connections: 1})
	defer c.Close()
	sameBatches(t, "after a refused COMPRESS", pipelined(t, c, group, 1, 20, 6), want)
	if a := c.CompressAnswer(); !strings.HasPrefix(a, "503 ") {
		t.Errorf("the refused COMPRESS: %q, want INN's 503", a)
	}
	if !strings.Contains(refusing.serverSent(), "\r\n503 ") {
		t.Errorf("the server did not refuse: %q", refusing.serverSent())
	}

	absent := newProxy(t, s.Addr, func(_ bool, line []byte) []byte { return line })
	d := nntp.New(nntp.Config{Addr: absent.ln.Addr().String(), Connections: 1})
	defer d.Close()
	sameBatches(t, "without COMPRESS offered", pipelined(t, d, group, 1, 20, 6), want)
	if a := d.CompressAnswer(); a != "not offered" {
		t.Errorf("COMPRESS not offered: %q", a)
	}
	if strings.Contains(absent.clientSent(), "COMPRESS") {
		t.Errorf("the client asked for COMPRESS that was not offered")
	}
}

// TestOverviewsErrorInOrder: when the server answers the third of a
// pipelined read's OVERs with an error, the read yields the two batches
// before it, then that error, and the connection stays in step: the next
// read on it (the only one) is right.
func TestOverviewsErrorInOrder(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 30, nil)
	var mu sync.Mutex
	answers, dropping := 0, false
	p := newProxy(t, s.Addr, func(fromServer bool, line []byte) []byte {
		if !fromServer {
			return line
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case dropping:
			dropping = string(line) != ".\r\n"
			return nil
		case bytes.HasPrefix(line, []byte("224 ")):
			answers++
			if answers == 3 {
				dropping = true
				return []byte("503 overview unavailable\r\n")
			}
		}
		return line
	})
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c.Close()
	// The client knows the server answers OVER: the read pipelines.
	if _, _, err := c.Overview(context.Background(), group, 1, 1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	answers = 0
	mu.Unlock()
	var got []nntp.Batch
	var gotErr error
	for b, err := range c.Overviews(context.Background(), group, 1, 30, 5) {
		if err != nil {
			gotErr = err
			break
		}
		got = append(got, b)
	}
	var se *nntp.StatusError
	if len(got) != 2 || got[1].Hi != 10 || len(got[1].Headers) != 5 || !errors.As(gotErr, &se) || se.Code != 503 {
		t.Fatalf("read: %d batches, then %v; want 1-5 and 6-10, then the 503", len(got), gotErr)
	}
	hs, _, err := c.Overview(context.Background(), group, 26, 30)
	if err != nil || len(hs) != 5 || hs[0].Number != 26 || hs[4].Number != 30 {
		t.Fatalf("the next OVER on the connection: %d headers, %v; want 26..30", len(hs), err)
	}
	if n := p.max.Load(); n != 1 {
		t.Errorf("%d connections, want the one kept in step", n)
	}
}

// TestOverviewsResume: a connection cut in the middle of a pipelined
// read is dialled again and the read resumes at the first batch not
// yet yielded: every article once, in order.
func TestOverviewsResume(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 60, nil)
	plain := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, NoCompress: true})
	defer plain.Close()
	want := oneByOne(t, plain, group, 1, 60, 7)
	for _, compress := range []bool{false, true} {
		p := newProxy(t, s.Addr, nil)
		p.cutAfter.Store(map[bool]int64{false: 4000, true: 1500}[compress])
		c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1, NoCompress: !compress})
		sameBatches(t, fmt.Sprintf("resumed (compressed %v)", compress), pipelined(t, c, group, 1, 60, 7), want)
		c.Close()
	}
}

// TestOverviewsXOVERFallback: a pipelined read from a server that
// answers OVER with 500 (INN shown "OVEX" by a relay) asks OVER once,
// alone, then reads everything with XOVER, pipelined.
func TestOverviewsXOVERFallback(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 15, nil)
	p := newProxy(t, s.Addr, withoutOVER)
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c.Close()
	got := pipelined(t, c, group, 1, 15, 4)
	if ns := numbers(got); len(ns) != 15 || ns[0] != 1 || ns[14] != 15 || len(got) != 4 {
		t.Fatalf("read through a server without OVER: %d batches, articles %v", len(got), ns)
	}
	sent := p.clientSent()
	if n := strings.Count(sent, "\nOVER "); n != 1 || !c.UsesXOVER() {
		t.Errorf("OVER sent %d times, want once, then XOVER:\n%q", n, sent)
	}
	for _, span := range []string{"1-4", "5-8", "9-12", "13-15"} {
		if !strings.Contains(sent, "XOVER "+span+"\r\n") {
			t.Errorf("XOVER %s not sent:\n%q", span, sent)
		}
	}
}

// TestOverviewLineBounded: an answer line longer than 1 MiB (cheap for a
// server to send compressed) is refused as out of step, not held: the
// read fails after its attempts instead of growing without end.
func TestOverviewLineBounded(t *testing.T) {
	t.Parallel()
	s, group := wireGroup(t, 3, nil)
	huge := append(bytes.Repeat([]byte("x"), 2<<20), '\r', '\n')
	p := newProxy(t, s.Addr, func(fromServer bool, line []byte) []byte {
		if fromServer && bytes.HasPrefix(line, []byte("2\t")) {
			return huge
		}
		return line
	})
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1, Attempts: 2})
	defer c.Close()
	hs, _, err := c.Overview(context.Background(), group, 1, 3)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an overview line of 2 MiB: %d headers, %v; want refused", len(hs), err)
	}
}
