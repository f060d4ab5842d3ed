package web

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection caps: a node answers a bounded number of connections at
// once, and one remote address a bounded share of them, so no client can
// take the file descriptors the catalog, the windows and the other
// clients need (accept4: too many open files). Connections that have not
// yet carried an authenticated request have a budget of their own, so
// that a flood of them from many addresses cannot keep out the workers
// and operators that hold a token.

// DefaultMaxConnectionsPerRemote is how many connections one remote
// address may hold open at once by default.
const DefaultMaxConnectionsPerRemote = 256

// DefaultUnauthenticatedIdle is how long, by default, a connection that
// has not yet carried an authenticated request may wait for its next
// byte: a request's headers, its body, or the next request.
const DefaultUnauthenticatedIdle = 10 * time.Second

// DefaultMaxConnections is the cap on open connections for the process's
// file descriptor limit: half of it, between 64 and 4096, leaving the
// rest for the catalog, snapshots, backups and peer sync.
func DefaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(max(lim.Cur/2, 64), 4096))
}

// DefaultMaxUnauthenticated is the default budget of unauthenticated
// connections under a cap of total: half of it, so the other half is
// kept for clients that have shown a token.
func DefaultMaxUnauthenticated(total int) int { return max(total/2, 1) }

// ConnectionLimits are the caps of LimitConnectionsBudget.
type ConnectionLimits struct {
	// Total is how many connections may be open at once.
	Total int
	// PerRemote is how many of them one remote IP address may hold.
	PerRemote int
	// Unauthenticated is how many connections that have not yet carried
	// an authenticated request may be open at once; 0 gives them no
	// budget of their own (every cap then refuses the newcomer).
	Unauthenticated int
	// UnauthenticatedIdle bounds every read of such a connection: a
	// client that says nothing for this long is closed.
	UnauthenticatedIdle time.Duration
}

// LimitConnections wraps ln so that it hands out at most total
// connections at once and at most perRemote from one remote IP address.
// A connection over either cap is closed at once, counted in
// leasehold_connections_refused_total by reason, and Accept waits for
// the next; a refused client sees its connection closed, not a stalled
// accept queue. Wrap the plain TCP listener, inside TLS.
func LimitConnections(ln net.Listener, total, perRemote int, m *Metrics) net.Listener {
	return LimitConnectionsBudget(ln, ConnectionLimits{Total: total, PerRemote: perRemote}, m)
}

// LimitConnectionsBudget is LimitConnections with a budget for the
// connections not yet authenticated (lim.Unauthenticated > 0). A
// connection counts as unauthenticated from its accept until a request
// on it passes a token or session check (Server marks it); until then
// each of its reads waits at most lim.UnauthenticatedIdle. When a new
// connection would go over the unauthenticated budget, the total or its
// address's cap, the oldest unauthenticated connection (of that address,
// for its cap) is closed to make room, counted with reason
// "unauthenticated"; the newcomer is refused only when no such
// connection is left to close. A worker's connection carries its token
// in its first request, a moment after it is accepted, so a flood has to
// open the whole budget's worth of connections within that moment to
// push it out; the connections that already showed a token are never
// closed to make room.
func LimitConnectionsBudget(ln net.Listener, lim ConnectionLimits, m *Metrics) net.Listener {
	return &limitListener{Listener: ln, lim: lim, m: m, remotes: map[string]*remoteConns{}, unauth: list.New()}
}

type limitListener struct {
	net.Listener
	lim ConnectionLimits
	m   *Metrics

	mu      sync.Mutex
	open    int
	remotes map[string]*remoteConns // open connections by remote IP
	unauth  *list.List              // *limitedConn not yet authenticated, oldest first
}

// remoteConns are one address's open connections.
type remoteConns struct {
	open   int
	unauth *list.List // its *limitedConn not yet authenticated, oldest first
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, remote: remoteIP(c.RemoteAddr())}
		reason, evicted := l.admit(lc)
		for _, v := range evicted {
			l.m.connRefused.WithLabelValues("unauthenticated").Inc()
			v.Conn.Close()
		}
		if reason != "" {
			l.m.connRefused.WithLabelValues(reason).Inc()
			c.Close()
			continue
		}
		l.m.connOpen.Inc()
		if l.lim.Unauthenticated > 0 && l.lim.UnauthenticatedIdle > 0 {
			lc.SetReadDeadline(time.Time{}) // bounded until authenticated
		}
		return lc, nil
	}
}

// admit counts c in, or says why not: "total" or "per_remote". With a
// budget for unauthenticated connections it closes (returns, released
// already) the oldest of them where a cap is reached.
func (l *limitListener) admit(c *limitedConn) (reason string, evicted []*limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rc := l.remotes[c.remote]
	if rc == nil {
		rc = &remoteConns{unauth: list.New()}
	}
	budget := l.lim.Unauthenticated > 0
	if rc.open >= l.lim.PerRemote {
		if !budget || rc.unauth.Len() == 0 {
			return "per_remote", nil
		}
		evicted = append(evicted, l.evictLocked(rc.unauth.Front().Value.(*limitedConn)))
	}
	if budget && l.unauth.Len() >= l.lim.Unauthenticated {
		evicted = append(evicted, l.evictLocked(l.unauth.Front().Value.(*limitedConn)))
	}
	if l.open >= l.lim.Total {
		if !budget || l.unauth.Len() == 0 {
			return "total", evicted
		}
		evicted = append(evicted, l.evictLocked(l.unauth.Front().Value.(*limitedConn)))
	}
	l.open++
	rc.open++
	l.remotes[c.remote] = rc
	if budget {
		c.all = l.unauth.PushBack(c)
		c.own = rc.unauth.PushBack(c)
	}
	return "", evicted
}

// evictLocked releases c's place, for the caller to close it. l.mu is
// held.
func (l *limitListener) evictLocked(c *limitedConn) *limitedConn {
	l.releaseLocked(c)
	return c
}

func (l *limitListener) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(c)
}

// releaseLocked gives c's place back, once however often it is called.
// l.mu is held.
func (l *limitListener) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	l.open--
	rc := l.remotes[c.remote]
	l.forgetLocked(c, rc)
	if rc.open--; rc.open <= 0 {
		delete(l.remotes, c.remote)
	}
	l.m.connOpen.Dec()
}

// forgetLocked takes c off the unauthenticated lists. l.mu is held.
func (l *limitListener) forgetLocked(c *limitedConn, rc *remoteConns) {
	if c.all != nil {
		l.unauth.Remove(c.all)
		rc.unauth.Remove(c.own)
		c.all, c.own = nil, nil
	}
}

// authenticated takes c out of the unauthenticated budget, for good,
// and gives it back the read deadline last asked of it.
func (l *limitListener) authenticated(c *limitedConn) {
	l.mu.Lock()
	was := c.all != nil
	if rc := l.remotes[c.remote]; rc != nil && was {
		l.forgetLocked(c, rc)
	}
	c.trusted = true
	asked := c.asked
	l.mu.Unlock()
	if was && l.lim.UnauthenticatedIdle > 0 {
		c.Conn.SetReadDeadline(asked)
	}
}

func remoteIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn gives its place back once, however often it is closed.
type limitedConn struct {
	net.Conn
	l      *limitListener
	remote string

	// Under l.mu: its places in the unauthenticated lists (nil once
	// authenticated or released), whether it has authenticated, the read
	// deadline the server last asked for, and whether its place is given
	// back (closed, or closed to make room).
	all, own *list.Element
	trusted  bool
	asked    time.Time
	released bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// SetReadDeadline is the server's deadline, but no later than the
// unauthenticated idle bound while the connection has not authenticated.
func (c *limitedConn) SetReadDeadline(t time.Time) error {
	c.l.mu.Lock()
	c.asked = t
	trusted := c.trusted
	c.l.mu.Unlock()
	if idle := c.l.lim.UnauthenticatedIdle; !trusted && c.l.lim.Unauthenticated > 0 && idle > 0 {
		if bound := time.Now().Add(idle); t.IsZero() || t.After(bound) {
			t = bound
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the write deadline as asked and the read deadline as
// SetReadDeadline does.
func (c *limitedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// connKey is the request context's key to its connection (withConn).
type connKey struct{}

// withConn is the server's ConnContext: a request can tell its
// connection that it authenticated (markAuthenticated).
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// markAuthenticated takes r's connection out of the unauthenticated
// budget: a request on it showed a token or a session.
func markAuthenticated(r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		lc.l.authenticated(lc)
	}
}

// newConnectionMetrics are the listener's: connections open, and refused by
// reason.
func newConnectionMetrics() (*prometheus.CounterVec, prometheus.Gauge) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_connections_refused_total", Help: "HTTP connections closed by a cap, by reason: total (--max-connections open already) or per_remote (--max-connections-per-remote open from the address already): the new one, closed as soon as accepted; unauthenticated: the oldest connection that had shown no token yet, closed to make room for a new one.",
	}, []string{"reason"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_connections_open", Help: "HTTP connections open under the connection cap.",
	})
	refused.WithLabelValues("total")
	refused.WithLabelValues("per_remote")
	refused.WithLabelValues("unauthenticated")
	return refused, open
}
