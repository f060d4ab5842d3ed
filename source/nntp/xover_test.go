package nntp_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/source/nntp"
)

// TestXOVERAgainstINN reads the overview with XOVER (INN answers both)
// and gets what OVER gives, header for header.
func TestXOVERAgainstINN(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	ctx := context.Background()
	over := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer over.Close()
	want, _, err := over.Overview(ctx, prefix+".a", 1, 15)
	if err != nil || len(want) != 15 {
		t.Fatalf("OVER: %d headers, %v", len(want), err)
	}
	p := newProxy(t, s.Addr, nil)
	xover := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer xover.Close()
	xover.UseXOVER()
	got, skipped, err := xover.Overview(ctx, prefix+".a", 1, 15)
	if err != nil || skipped != 0 {
		t.Fatalf("XOVER: %d headers, %d skipped, %v", len(got), skipped, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("XOVER 1-15:\n%+v\nOVER 1-15:\n%+v", got, want)
	}
	if sent := p.clientSent(); !strings.Contains(sent, "XOVER 1-15\r\n") || strings.Contains(strings.ReplaceAll(sent, "XOVER", ""), "OVER") {
		t.Errorf("the client sent:\n%q\nwant XOVER and never OVER", sent)
	}
}

// withoutOVER is a relay's rewrite that makes INN a server without OVER:
// it is shown "OVEX" for each OVER, and answers 500.
func withoutOVER(fromServer bool, line []byte) []byte {
	if !fromServer && bytes.HasPrefix(line, []byte("OVER ")) {
		return append([]byte("OVEX "), line[len("OVER "):]...)
	}
	return line
}

// TestXOVERFallback is the decision: a server that answers OVER with 500
// (the real INN, shown "OVEX" for each OVER by a relay) is read with
// XOVER, the whole batch, and later batches go to XOVER straight away.
func TestXOVERFallback(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	ctx := context.Background()
	p := newProxy(t, s.Addr, withoutOVER)
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c.Close()
	for _, span := range [][2]int64{{1, 8}, {9, 15}} {
		hs, _, err := c.Overview(ctx, prefix+".a", span[0], span[1])
		if err != nil || int64(len(hs)) != span[1]-span[0]+1 {
			t.Fatalf("overview %d-%d through a server without OVER: %d headers, %v", span[0], span[1], len(hs), err)
		}
		for i, h := range hs {
			if h.Number != span[0]+int64(i) || !strings.HasPrefix(h.MessageID, "<") {
				t.Errorf("header %d: %+v", span[0]+int64(i), h)
			}
		}
	}
	if !c.UsesXOVER() {
		t.Error("the client did not fall back to XOVER")
	}
	sent := p.clientSent()
	if n := strings.Count(sent, "\nOVER "); n != 1 {
		t.Errorf("OVER sent %d times, want once (then XOVER only):\n%q", n, sent)
	}
	if !strings.Contains(sent, "XOVER 1-8\r\n") || !strings.Contains(sent, "XOVER 9-15\r\n") {
		t.Errorf("the client sent:\n%q\nwant XOVER 1-8 and XOVER 9-15", sent)
	}
}

// TestOverviewsStoppedAsContextEnds: a caller that ends its context and
// breaks out of a pipelined read (a worker told to stop) gets nothing
// more: the read neither yields the context's error after the break (a
// panic in the caller's range loop) nor asks again, compressed or not.
func TestOverviewsStoppedAsContextEnds(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	for _, compress := range []bool{false, true} {
		c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, NoCompress: !compress})
		ctx, cancel := context.WithCancel(context.Background())
		batches := 0
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("compress %v: the read went on after the break: %v", compress, p)
				}
			}()
			for _, err := range c.Overviews(ctx, prefix+".a", 1, 15, 2) {
				if err != nil {
					t.Errorf("compress %v: %v", compress, err)
					return
				}
				batches++
				if batches == 2 {
					cancel() // the stop, and then the loop's break
					break
				}
			}
		}()
		if batches != 2 {
			t.Errorf("compress %v: %d batches read, want 2", compress, batches)
		}
		cancel()
		c.Close()
	}
}

// TestParseOverviewReasons: a line ending after :bytes is read (lines
// 0); lines that cannot be read say why.
func TestParseOverviewReasons(t *testing.T) {
	t.Parallel()
	h, err := nntp.ParseOverview([]byte("7\tsubj\tfrom\tdate\t<id@x>\t\t123"))
	if err != nil || h.Number != 7 || h.Bytes != 123 || h.MessageID != "<id@x>" {
		t.Errorf("a line without :lines: %+v, %v", h, err)
	}
	for line, reason := range map[string]string{
		"7\tsubj\tfrom\tdate\t<id@x>\t":          nntp.SkipFields,
		"x\tsubj\tfrom\tdate\t<id@x>\t\t123\t4":  nntp.SkipNumber,
		"-3\tsubj\tfrom\tdate\t<id@x>\t\t123\t4": nntp.SkipNumber,
	} {
		_, err := nntp.ParseOverview([]byte(line))
		var oe *nntp.OverviewError
		if !errors.As(err, &oe) || oe.Reason != reason {
			t.Errorf("%q: %v, want reason %s", line, err, reason)
		}
	}
}
