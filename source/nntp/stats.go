package nntp

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Stats are what a Client counted since it was made, for a worker's
// metrics: cheap counters kept as connections are dialled, fail and are
// read, never a command of their own.
type Stats struct {
	// Dials are the connections opened and logged in.
	Dials int64
	// Redials are the dials that replaced a connection that failed.
	Redials int64
	// ConnErrors are the connections that failed: a dial, greeting or
	// login that did not succeed, or a connection that broke under a
	// command (not a server's refusal of a command).
	ConnErrors int64
	// WireBytes are the bytes read off the network (TLS and DEFLATE as
	// they came); TextBytes the answers' bytes once decrypted and
	// inflated. TextBytes/WireBytes is the compression ratio.
	WireBytes, TextBytes int64
}

// counters are a Client's Stats as they are counted.
type counters struct {
	dials, redials, connErrors atomic.Int64
	wire, text                 atomic.Int64

	mu   sync.Mutex
	lost int64 // connections failed and not yet replaced by a dial
}

// Stats returns the client's counts so far.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{Dials: s.dials.Load(), Redials: s.redials.Load(), ConnErrors: s.connErrors.Load(),
		WireBytes: s.wire.Load(), TextBytes: s.text.Load()}
}

// failed counts a connection that failed; the next dial replaces it.
func (s *counters) failed() {
	s.connErrors.Add(1)
	s.mu.Lock()
	s.lost++
	s.mu.Unlock()
}

// dialled counts a connection opened, and a redial when it replaces one
// that failed.
func (s *counters) dialled() {
	s.dials.Add(1)
	s.mu.Lock()
	redial := s.lost > 0
	if redial {
		s.lost--
	}
	s.mu.Unlock()
	if redial {
		s.redials.Add(1)
	}
}

// wireConn counts what is read off a network connection.
type wireConn struct {
	net.Conn
	n *atomic.Int64
}

func (c wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// textReads counts what the text protocol reads of a connection's
// stream (after TLS and DEFLATE).
type textReads struct {
	io.ReadWriteCloser
	n *atomic.Int64
}

func (t textReads) Read(p []byte) (int, error) {
	n, err := t.ReadWriteCloser.Read(p)
	t.n.Add(int64(n))
	return n, err
}
