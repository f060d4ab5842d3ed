package nntp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

// fixture makes fresh groups in the test INN with the fixed article set.
func fixture(t *testing.T) (*usenettest.Server, string) {
	t.Helper()
	s := usenettest.Find(t)
	prefix := fmt.Sprintf("lh.nntp.t%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.NewGroups(ctx, prefix+".a", prefix+".b"); err != nil {
		t.Fatal(err)
	}
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer c.Close()
	if err := usenettest.Post(ctx, c, usenettest.Fixed(prefix)); err != nil {
		t.Fatal(err)
	}
	return s, prefix
}

// TestAgainstINN reads a real INN: GROUP's water marks, OVER of the whole
// group parsed, a span past the end (423) as no headers, a missing group
// as a permanent error.
func TestAgainstINN(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	ctx := context.Background()
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 2})
	defer c.Close()
	gi, err := c.Group(ctx, prefix+".a")
	if err != nil || gi.Low != 1 || gi.High != 15 || gi.Count != 15 {
		t.Fatalf("GROUP: %+v, %v; want 15 articles 1..15", gi, err)
	}
	hs, skipped, err := c.Overview(ctx, prefix+".a", 1, 15)
	if err != nil || skipped != 0 || len(hs) != 15 {
		t.Fatalf("OVER 1-15: %d headers, %d skipped, %v", len(hs), skipped, err)
	}
	var want []string
	for _, a := range usenettest.Fixed(prefix)[:15] {
		want = append(want, a.Subject)
	}
	for i, h := range hs {
		if h.Number != int64(i+1) || h.Subject != want[i] || !strings.HasPrefix(h.MessageID, "<") || h.Bytes <= 0 ||
			!strings.Contains(h.Xref, fmt.Sprintf("%s.a:%d", prefix, i+1)) || h.Date == "" {
			t.Errorf("header %d: %+v, want subject %q", i+1, h, want[i])
		}
	}
	if hs[0].From != usenettest.Alice {
		t.Errorf("From: %q, want %q", hs[0].From, usenettest.Alice)
	}
	hs, _, err = c.Overview(ctx, prefix+".a", 100, 200)
	if err != nil || len(hs) != 0 {
		t.Errorf("OVER past the end: %d headers, %v; want none and no error", len(hs), err)
	}
	// The connection that selected .a now reads .b.
	hs, _, err = c.Overview(ctx, prefix+".b", 1, 3)
	if err != nil || len(hs) != 3 || hs[0].From != usenettest.Frank {
		t.Errorf("OVER of .b: %+v, %v", hs, err)
	}
	_, err = c.Group(ctx, prefix+".missing")
	if !errors.Is(err, nntp.ErrNoSuchGroup) || !nntp.Permanent(err) {
		t.Errorf("GROUP of a missing group: %v, want ErrNoSuchGroup, permanent", err)
	}
	_, _, err = c.Overview(ctx, prefix+".missing", 1, 10)
	if !errors.Is(err, nntp.ErrNoSuchGroup) || !nntp.Permanent(err) {
		t.Errorf("OVER of a missing group: %v, want ErrNoSuchGroup, permanent", err)
	}
}

// TestAuthinfo logs in with AUTHINFO USER/PASS; a wrong password is a
// permanent error that does not carry the password.
func TestAuthinfo(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	ctx := context.Background()
	pw, err := s.Password()
	if err != nil || s.User == "" {
		t.Fatalf("the test login: %q, %v (scripts/inn.sh start makes it)", s.User, err)
	}
	good := nntp.New(nntp.Config{Addr: s.Addr, User: s.User, Password: pw, Connections: 1})
	defer good.Close()
	if gi, err := good.Group(ctx, prefix+".a"); err != nil || gi.High != 15 {
		t.Errorf("logged in: GROUP %+v, %v", gi, err)
	}
	const wrong = "not-the-password-0123456789"
	bad := nntp.New(nntp.Config{Addr: s.Addr, User: s.User, Password: wrong, Connections: 1})
	defer bad.Close()
	_, err = bad.Group(ctx, prefix+".a")
	var se *nntp.StatusError
	if !errors.As(err, &se) || !nntp.Permanent(err) || se.Code != nntp.StatusAuthFailed {
		t.Fatalf("a wrong password: %v, want a permanent 481", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("the error carries the password: %v", err)
	}
}

// TestTLSAgainstINN reads INN over TLS from the first byte (nntps, an
// nnrpd daemon with -S) with a login: the server's certificate checked
// against the test CA. Without that CA (the system's roots only) the
// certificate does not verify, which asking again cannot change
// (Permanent), and nothing is read.
func TestTLSAgainstINN(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	ctx := context.Background()
	if s.TLSAddr == "" || s.CAFile == "" {
		t.Fatal("no nntps address or CA in the environment (scripts/inn.sh start prints them)")
	}
	pw, err := s.Password()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nntp.ParseURL("nntps://" + s.User + "@" + s.TLSAddr)
	if err != nil || !cfg.TLS {
		t.Fatalf("ParseURL: %+v, %v", cfg, err)
	}
	roots := testRoots(t, s.CAFile)
	trusted := cfg
	trusted.Password, trusted.Connections = pw, 1
	trusted.TLSConfig = &tls.Config{RootCAs: roots}
	c := nntp.New(trusted)
	defer c.Close()
	if gi, err := c.Group(ctx, prefix+".a"); err != nil || gi.High != 15 {
		t.Fatalf("GROUP over TLS: %+v, %v", gi, err)
	}
	hs, _, err := c.Overview(ctx, prefix+".a", 1, 15)
	if err != nil || len(hs) != 15 {
		t.Fatalf("OVER over TLS: %d headers, %v; want 15", len(hs), err)
	}

	untrusted := cfg
	untrusted.Password, untrusted.Connections = pw, 1
	u := nntp.New(untrusted)
	defer u.Close()
	_, err = u.Group(ctx, prefix+".a")
	var cert *tls.CertificateVerificationError
	if !errors.As(err, &cert) || !nntp.Permanent(err) {
		t.Fatalf("a certificate no trusted CA signed: %v; want a permanent certificate verification error", err)
	}
}

// proxy is a TCP relay to the INN that can cut connections and counts
// how many are open at once.
type proxy struct {
	ln        net.Listener
	target    string
	open, max atomic.Int64
	// cutAfter, when above 0, cuts the next connection after that many
	// bytes from the server (once).
	cutAfter atomic.Int64
	// rewrite, when set, is given each line the server sends and each
	// line the client sends; what it returns is relayed instead (nil
	// drops the line). A rewriting proxy relays whole lines only, so
	// tests that rewrite do not upgrade to TLS through it, and it takes
	// COMPRESS out of the server's CAPABILITIES unless offerCompress.
	rewrite       func(fromServer bool, line []byte) []byte
	offerCompress atomic.Bool
	// sent is every byte the clients sent, and served every byte the
	// server sent, as they crossed the wire.
	mu     sync.Mutex
	sent   bytes.Buffer
	served bytes.Buffer
	wg     sync.WaitGroup
}

// serverSent is what the server has sent so far, as on the wire.
func (p *proxy) serverSent() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.served.String()
}

// serverWriter records what the server sent.
type serverWriter struct{ p *proxy }

func (w serverWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.served.Write(b)
}

// clientSent is what the clients have sent so far, as on the wire.
func (p *proxy) clientSent() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent.String()
}

// Write records what a client sent.
func (p *proxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent.Write(b)
}

// copyLines relays src to dst line by line through the rewrite.
func (p *proxy) copyLines(dst io.Writer, src io.Reader, fromServer bool) {
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadBytes('\n')
		if fromServer && !p.offerCompress.Load() && bytes.HasPrefix(bytes.ToUpper(line), []byte("COMPRESS ")) {
			continue
		}
		if len(line) > 0 {
			if fromServer {
				serverWriter{p}.Write(line)
			}
			if out := p.rewrite(fromServer, line); out != nil {
				if _, werr := dst.Write(out); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// newProxy relays to target; rewrite, when not nil, rewrites the lines
// (see proxy.rewrite).
func newProxy(t *testing.T, target string, rewrite func(fromServer bool, line []byte) []byte) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, rewrite: rewrite}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Go(func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.relay(cn) })
		}
	})
	return p
}

func (p *proxy) relay(cn net.Conn) {
	defer cn.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	n := p.open.Add(1)
	defer p.open.Add(-1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
	cut := p.cutAfter.Swap(0)
	done := make(chan struct{}, 2)
	go func() {
		if p.rewrite != nil {
			p.copyLines(up, io.TeeReader(cn, p), false)
		} else {
			io.Copy(up, io.TeeReader(cn, p))
		}
		done <- struct{}{}
	}()
	go func() {
		if p.rewrite != nil {
			p.copyLines(cn, up, true)
		} else if cut > 0 {
			io.CopyN(cn, io.TeeReader(up, serverWriter{p}), cut)
		} else {
			io.Copy(cn, io.TeeReader(up, serverWriter{p}))
		}
		done <- struct{}{}
	}()
	<-done
}

// TestReconnect: a connection cut in the middle of an OVER answer is
// dropped and the batch read whole again on a new one.
func TestReconnect(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	p := newProxy(t, s.Addr, nil)
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Group(ctx, prefix+".a"); err != nil {
		t.Fatal(err)
	}
	// The open connection goes on; the next one dialled is cut after
	// its greeting and a little of an answer.
	p.cutAfter.Store(400)
	c2 := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 1})
	defer c2.Close()
	hs, _, err := c2.Overview(ctx, prefix+".a", 1, 15)
	if err != nil || len(hs) != 15 {
		t.Fatalf("OVER through a cut connection: %d headers, %v; want 15", len(hs), err)
	}
	for i, h := range hs {
		if h.Number != int64(i+1) {
			t.Fatalf("header %d is article %d", i, h.Number)
		}
	}
}

// TestConnectionCap: however many callers, at most Connections are open.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	p := newProxy(t, s.Addr, nil)
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), Connections: 2})
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			hs, _, err := c.Overview(context.Background(), prefix+".a", 1, 15)
			if err == nil && len(hs) != 15 {
				err = fmt.Errorf("%d headers", len(hs))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := p.max.Load(); m < 1 || m > 2 {
		t.Errorf("%d connections open at once, want 1 or 2", m)
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, addr, user string
		tls, bad       bool
	}{
		{"nntp://news.example.com", "news.example.com:119", "", false, false},
		{"nntps://me@news.example.com", "news.example.com:563", "me", true, false},
		{"nntp://127.0.0.1:11119", "127.0.0.1:11119", "", false, false},
		{"nntp://me:secret@news.example.com", "", "", false, true},
		{"http://news.example.com", "", "", false, true},
		{"nntp://news.example.com/alt.test", "", "", false, true},
	} {
		got, err := nntp.ParseURL(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("%s: %+v, want an error", c.in, got)
			} else if strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: the error carries the password: %v", c.in, err)
			}
			continue
		}
		if err != nil || got.Addr != c.addr || got.User != c.user || got.TLS != c.tls {
			t.Errorf("%s: %+v, %v", c.in, got, err)
		}
	}
}
