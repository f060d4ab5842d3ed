package nntp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config says which server to read and how.
type Config struct {
	// Addr is host:port.
	Addr string
	// TLS connects with TLS from the start (nntps); ServerName is checked
	// against the certificate (the host of Addr when empty).
	TLS bool
	// StartTLS upgrades a plain connection with STARTTLS (RFC 4642)
	// before anything else is asked, AUTHINFO above all; a server that
	// does not offer it or refuses it is an error (ErrStartTLS), never a
	// plaintext session. TLSConfig and ServerName serve both ways.
	StartTLS  bool
	TLSConfig *tls.Config
	// User, when set, logs in with AUTHINFO USER/PASS with Password.
	User     string
	Password string
	// Connections is the most connections open at once (providers cap
	// them); 0 means 4.
	Connections int
	// Timeout bounds dialling and each command's answer; 0 means 60s.
	Timeout time.Duration
	// Attempts is how often a command is tried on a dropped connection;
	// 0 means 3.
	Attempts int
	// NoCompress keeps connections uncompressed. By default a server
	// that lists COMPRESS DEFLATE in its CAPABILITIES (RFC 8054) is
	// asked for it once logged in; a refusal reads uncompressed.
	NoCompress bool
	Logger     *slog.Logger
}

// ParseURL reads nntp://[user@]host[:port] (port 119) or
// nntps://[user@]host[:port] (TLS, port 563) into a Config. A password
// in the URL is refused: it would stand in argument lists and logs.
func ParseURL(s string) (Config, error) {
	var c Config
	u, err := url.Parse(s)
	if err != nil {
		return c, fmt.Errorf("nntp: source %q: not a URL", s)
	}
	port := "119"
	switch u.Scheme {
	case "nntp":
	case "nntps":
		c.TLS, port = true, "563"
	default:
		return c, fmt.Errorf("nntp: source %q: want nntp://[user@]host[:port] or nntps://", u.Redacted())
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			return c, errors.New("nntp: source URL carries a password: give it in a file (--source-password-file) or LEASEHOLD_SOURCE_PASSWORD instead")
		}
		c.User = u.User.Username()
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return c, fmt.Errorf("nntp: source %q: want nntp://[user@]host[:port]", u.Redacted())
	}
	if u.Port() != "" {
		port = u.Port()
	}
	c.Addr = net.JoinHostPort(u.Hostname(), port)
	return c, nil
}

// Client reads one news server over a pool of connections. Its methods
// are safe for concurrent use; each takes a connection for its command
// and gives it back.
type Client struct {
	cfg   Config
	slots chan struct{} // one token a connection that may be open
	idle  chan *conn    // connections open and free
	mu    sync.Mutex
	// useXOVER is set once the server answered OVER 500; overKnown once
	// it answered OVER (or XOVER) at all, so reads may pipeline.
	useXOVER, overKnown bool
	closed              bool
	// compressAnswer is the server's answer to the last COMPRESS
	// DEFLATE, or why it was not asked.
	compressAnswer string
	stats          counters // what Stats returns
}

// New returns a client of the server in cfg; it dials when first used.
func New(cfg Config) *Client {
	if cfg.Connections <= 0 {
		cfg.Connections = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, slots: make(chan struct{}, cfg.Connections), idle: make(chan *conn, cfg.Connections)}
}

// Addr is the server's host:port.
func (c *Client) Addr() string { return c.cfg.Addr }

// Close closes the idle connections; those in use close when given back.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for {
		select {
		case cn := <-c.idle:
			cn.quit()
			<-c.slots
		default:
			return nil
		}
	}
}

// GroupInfo is what GROUP answers: the estimated article count and the
// low and high water marks (an empty group has low = high+1, or 0 0).
type GroupInfo struct {
	Name             string
	Count, Low, High int64
}

// Group selects name and returns its water marks. Errors: a StatusError
// (ErrNoSuchGroup for 411), a network error after the attempts.
func (c *Client) Group(ctx context.Context, name string) (GroupInfo, error) {
	var gi GroupInfo
	err := c.with(ctx, func(cn *conn) error {
		var err error
		gi, err = cn.group(name)
		return err
	})
	return gi, err
}

// Overview returns the overview of articles lo..hi of group, in the
// server's order, and how many lines were not overview lines (skipped).
// A span with no articles (423, or 420 from some servers) is no headers
// and no error. The answer is read whole before it is returned, so a
// connection dropped halfway is tried again from the start.
func (c *Client) Overview(ctx context.Context, group string, lo, hi int64) ([]Header, int, error) {
	var hs []Header
	var skipped int
	err := c.with(ctx, func(cn *conn) error {
		hs, skipped = hs[:0], 0
		if cn.selected != group {
			if _, err := cn.group(group); err != nil {
				return err
			}
		}
		c.mu.Lock()
		cmd := "OVER"
		if c.useXOVER {
			cmd = "XOVER"
		}
		c.mu.Unlock()
		code, text, err := cn.cmd("%s %d-%d", cmd, lo, hi)
		if err == nil && cmd == "OVER" && (code == StatusUnknownCommand || code == StatusNotSupported) {
			c.mu.Lock()
			c.useXOVER = true
			c.mu.Unlock()
			cmd = "XOVER"
			code, text, err = cn.cmd("XOVER %d-%d", lo, hi)
		}
		switch {
		case err != nil:
			return err
		case code == StatusNoArticles || code == StatusNoCurrent:
			c.knowOver()
			return nil
		case code != StatusOverview:
			return &StatusError{Command: cmd, Code: code, Text: text}
		}
		c.knowOver()
		return cn.lines(func(line []byte) {
			h, err := ParseOverview(line)
			if err != nil {
				skipped++
				return
			}
			hs = append(hs, h)
		})
	})
	return hs, skipped, err
}

// knowOver notes that the server answers the overview command in use.
func (c *Client) knowOver() {
	c.mu.Lock()
	c.overKnown = true
	c.mu.Unlock()
}

// Post posts an article (headers, a blank line, the body; lines ending
// in \n or \r\n). It is tried once: a post is not idempotent.
func (c *Client) Post(ctx context.Context, article []byte) error {
	return c.withAttempts(ctx, 1, func(cn *conn) error {
		code, text, err := cn.cmd("POST")
		if err != nil {
			return err
		}
		if code != StatusSendArticle {
			return &StatusError{Command: "POST", Code: code, Text: text}
		}
		w := cn.tp.DotWriter()
		if _, err := w.Write(article); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		code, text, err = cn.status()
		if err != nil {
			return err
		}
		if code != StatusArticlePosted {
			return &StatusError{Command: "POST", Code: code, Text: text}
		}
		return nil
	})
}

// with runs f on a connection, dialling one when none is idle, and tries
// it again on a new connection when the connection fails (not when the
// server answers).
func (c *Client) with(ctx context.Context, f func(*conn) error) error {
	return c.withAttempts(ctx, c.cfg.Attempts, f)
}

func (c *Client) withAttempts(ctx context.Context, attempts int, f func(*conn) error) error {
	var last error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			pause := time.Duration(attempt) * 200 * time.Millisecond
			c.cfg.Logger.Warn("nntp connection failed; trying again", "server", c.cfg.Addr, "attempt", attempt+1, "err", last)
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return context.Cause(ctx)
			case <-t.C:
			}
		}
		cn, err := c.get(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			c.stats.failed()
			var se *StatusError
			if errors.As(err, &se) && se.Code != StatusUnavailable || Permanent(err) {
				return err // the server said no, or its certificate does not verify: asking again will not help
			}
			last = err
			continue
		}
		err = cn.run(ctx, c.cfg.Timeout, f)
		var se *StatusError
		var stopped *stoppedInStep
		if err == nil || errors.As(err, &se) || errors.As(err, &stopped) {
			c.put(cn)
			return err
		}
		c.drop(cn)
		if !errors.Is(err, errStopped) && ctx.Err() == nil {
			c.stats.failed()
		}
		if errors.Is(err, errStopped) {
			// The caller broke off a pipelined read: said before the
			// context, which a stop ends at the same time, so the read
			// knows not to yield again.
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		last = err
		var progress *progressError
		if errors.As(err, &progress) {
			// The read got somewhere before the connection failed: a
			// fresh count of attempts, the next one at once.
			last, attempt = progress.err, -1
		}
	}
	return fmt.Errorf("nntp: %s: %d attempts: %w", c.cfg.Addr, attempts, last)
}

// get takes an idle connection, or dials one when a slot is free, or
// waits for either.
func (c *Client) get(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errors.New("nntp: client closed")
	}
	select {
	case cn := <-c.idle:
		return cn, nil
	default:
	}
	select {
	case cn := <-c.idle:
		return cn, nil
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	cn, err := c.dial(ctx)
	if err != nil {
		<-c.slots
		return nil, err
	}
	return cn, nil
}

// put gives a sound connection back; it never blocks, since idle holds
// as many as there are slots.
func (c *Client) put(cn *conn) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		c.drop(cn)
		return
	}
	c.idle <- cn
}

func (c *Client) drop(cn *conn) {
	cn.nc.Close()
	<-c.slots
}

// dial connects, reads the greeting, upgrades to TLS when StartTLS asks
// for it, switches to reader mode and logs in.
func (c *Client) dial(ctx context.Context) (*conn, error) {
	d := net.Dialer{Timeout: c.cfg.Timeout}
	nc, err := d.DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, err
	}
	nc = wireConn{Conn: nc, n: &c.stats.wire}
	if c.cfg.TLS {
		nc = tls.Client(nc, c.tlsConfig())
	}
	cn := &conn{nc: nc, tp: textproto.NewConn(textReads{nc, &c.stats.text}), text: &c.stats.text}
	err = cn.run(ctx, c.cfg.Timeout, func(cn *conn) error {
		code, text, err := cn.status()
		if err != nil {
			return err
		}
		if code != StatusReadyPosting && code != StatusReadyNoPosting {
			return &StatusError{Command: "greeting", Code: code, Text: text}
		}
		reader := false
		if c.cfg.StartTLS {
			if reader, err = cn.startTLS(c.tlsConfig()); err != nil {
				return err
			}
		}
		if !reader {
			if err := cn.modeReader(); err != nil {
				return err
			}
		}
		if err := c.login(cn); err != nil {
			return err
		}
		if c.cfg.NoCompress {
			return nil
		}
		return c.compress(cn)
	})
	if err != nil {
		cn.nc.Close()
		return nil, err
	}
	c.stats.dialled()
	return cn, nil
}

// tlsConfig is the configured TLS settings with the server name taken
// from Addr when none is set.
func (c *Client) tlsConfig() *tls.Config {
	tc := c.cfg.TLSConfig.Clone()
	if tc == nil {
		tc = &tls.Config{}
	}
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(c.cfg.Addr)
	}
	return tc
}

// login sends AUTHINFO USER/PASS when a user is configured.
func (c *Client) login(cn *conn) error {
	if c.cfg.User == "" {
		return nil
	}
	code, text, err := cn.cmd("AUTHINFO USER %s", c.cfg.User)
	if err != nil {
		return err
	}
	if code == StatusPasswordNeeded {
		// The command is sent without going through cmd's formatting
		// of errors: the password must not reach a message.
		if code, text, err = cn.cmd("AUTHINFO PASS %s", c.cfg.Password); err != nil {
			return errors.New("nntp: AUTHINFO PASS: connection failed")
		}
	}
	if code != StatusAuthAccepted {
		return &StatusError{Command: "AUTHINFO", Code: code, Text: text}
	}
	return nil
}

// modeReader sends MODE READER: servers without it answer 5xx and read
// anyway.
func (cn *conn) modeReader() error {
	code, text, err := cn.cmd("MODE READER")
	if err != nil {
		return err
	}
	if code == StatusUnavailable || code == StatusPermission {
		return &StatusError{Command: "MODE READER", Code: code, Text: text}
	}
	return nil
}

// startTLS upgrades the connection with STARTTLS and reports whether MODE
// READER was sent on the way. A mode-switching server may offer STARTTLS
// in reader mode only (INN: innd answers until MODE READER hands the
// connection to nnrpd, which offers it), so when the first CAPABILITIES
// does not list it, MODE READER is sent and CAPABILITIES asked again.
// Not offered, or refused: ErrStartTLS, which is permanent.
func (cn *conn) startTLS(tc *tls.Config) (reader bool, err error) {
	caps, err := cn.capabilities()
	if err != nil {
		return false, err
	}
	if _, ok := caps["STARTTLS"]; !ok {
		if err := cn.modeReader(); err != nil {
			return false, err
		}
		reader = true
		if caps, err = cn.capabilities(); err != nil {
			return reader, err
		}
		if _, ok := caps["STARTTLS"]; !ok {
			return reader, fmt.Errorf("%w: STARTTLS is not in its CAPABILITIES", ErrStartTLS)
		}
	}
	code, text, err := cn.cmd("STARTTLS")
	if err != nil {
		return reader, err
	}
	if code != StatusContinueTLS {
		return reader, fmt.Errorf("%w: STARTTLS answered %d %s", ErrStartTLS, code, clip(text))
	}
	if cn.tp.R.Buffered() > 0 {
		// Bytes after 382 and before the handshake were not sent over
		// TLS: taking them as answers would let a man in the middle
		// speak for the server (the STARTTLS injection attacks).
		return reader, &protocolError{errors.New("nntp: STARTTLS: the server sent data before the TLS handshake")}
	}
	tlsConn := tls.Client(cn.nc, tc)
	if err := tlsConn.Handshake(); err != nil {
		return reader, fmt.Errorf("nntp: STARTTLS: %w", err)
	}
	// RFC 4642: what was learnt before TLS is forgotten; nothing is kept
	// but the reader mode, which the server keeps.
	cn.nc, cn.tp = tlsConn, textproto.NewConn(textReads{tlsConn, cn.text})
	return reader, nil
}

// capabilities asks CAPABILITIES and returns the capability labels it
// lists, upper-cased, each with its arguments (upper-cased too); a
// server without the command (RFC 977) lists none.
func (cn *conn) capabilities() (map[string][]string, error) {
	code, _, err := cn.cmd("CAPABILITIES")
	if err != nil {
		return nil, err
	}
	caps := map[string][]string{}
	if code != StatusCapabilities {
		return caps, nil
	}
	err = cn.lines(func(line []byte) {
		if f := strings.Fields(strings.ToUpper(string(line))); len(f) > 0 && len(caps) < maxCapabilities {
			caps[f[0]] = f[1:]
		}
	})
	return caps, err
}

// maxCapabilities bounds what a server's CAPABILITIES may make the
// client keep.
const maxCapabilities = 64

// conn is one connection and the group it has selected. nc is the
// network connection (plain or TLS), which deadlines and Close act on;
// tp reads and writes through the compression when it is on.
type conn struct {
	nc         net.Conn
	tp         *textproto.Conn
	selected   string
	compressed bool
	text       *atomic.Int64 // the client's count of text read (Stats)
}

// run runs f with the connection's deadline set from timeout and ctx, and
// broken off at once when ctx ends.
func (cn *conn) run(ctx context.Context, timeout time.Duration, f func(*conn) error) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	cn.nc.SetDeadline(deadline)
	// The connection as it is now: f may replace cn.nc (STARTTLS), and a
	// TLS connection's deadline is its network connection's anyway.
	nc := cn.nc
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	return f(cn)
}

// cmd sends a command line and reads its status line.
func (cn *conn) cmd(format string, args ...any) (int, string, error) {
	if err := cn.tp.PrintfLine(format, args...); err != nil {
		return 0, "", err
	}
	return cn.status()
}

// status reads one status line.
func (cn *conn) status() (int, string, error) {
	line, err := cn.tp.ReadLine()
	if err != nil {
		return 0, "", err
	}
	code, text, err := ParseStatus(line)
	if err != nil {
		// A line that is not an answer: the connection is out of step.
		return 0, "", &protocolError{err}
	}
	return code, text, nil
}

// protocolError is an answer out of step: the connection is dropped.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

func (cn *conn) group(name string) (GroupInfo, error) {
	cn.selected = ""
	code, text, err := cn.cmd("GROUP %s", name)
	if err != nil {
		return GroupInfo{}, err
	}
	if code != StatusGroupSelected {
		return GroupInfo{}, &StatusError{Command: "GROUP " + name, Code: code, Text: text}
	}
	f := strings.Fields(text)
	if len(f) < 3 {
		return GroupInfo{}, &protocolError{fmt.Errorf("nntp: GROUP %s: malformed answer %q", name, clip(text))}
	}
	gi := GroupInfo{Name: name}
	for i, p := range []*int64{&gi.Count, &gi.Low, &gi.High} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return GroupInfo{}, &protocolError{fmt.Errorf("nntp: GROUP %s: malformed answer %q", name, clip(text))}
		}
		*p = v
	}
	cn.selected = name
	return gi, nil
}

// maxLine bounds one line of a multi-line answer (an overview line is a
// few hundred bytes; a long References header some kilobytes).
const maxLine = 1 << 20

// lines reads a multi-line answer up to its ".", undoing dot-stuffing.
func (cn *conn) lines(f func([]byte)) error {
	r := cn.tp.R
	var long []byte
	for {
		line, isPrefix, err := r.ReadLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if isPrefix || long != nil {
			if len(long)+len(line) > maxLine {
				// A compressed connection makes a huge line cheap to
				// send: it is refused, not held.
				return &protocolError{fmt.Errorf("nntp: a line of an answer is longer than %d bytes", maxLine)}
			}
			long = append(long, line...)
			if isPrefix {
				continue
			}
			line, long = long, nil
		}
		if len(line) == 1 && line[0] == '.' {
			return nil
		}
		if bytes.HasPrefix(line, []byte("..")) {
			line = line[1:]
		}
		f(line)
	}
}

// quit says goodbye and closes.
func (cn *conn) quit() {
	cn.nc.SetDeadline(time.Now().Add(2 * time.Second))
	cn.tp.PrintfLine("QUIT")
	cn.nc.Close()
}
