package web

import (
	"net"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection caps: a node answers a bounded number of connections at
// once, and one remote address a bounded share of them, so no client can
// take the file descriptors the catalog, the windows and the other
// clients need (accept4: too many open files).

// DefaultMaxConnectionsPerRemote is how many connections one remote
// address may hold open at once by default.
const DefaultMaxConnectionsPerRemote = 256

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

// LimitConnections wraps ln so that it hands out at most total
// connections at once and at most perRemote from one remote IP address.
// A connection over either cap is closed at once, counted in
// leasehold_connections_refused_total by reason, and Accept waits for
// the next; a refused client sees its connection closed, not a stalled
// accept queue. Wrap the plain TCP listener, inside TLS.
func LimitConnections(ln net.Listener, total, perRemote int, m *Metrics) net.Listener {
	return &limitListener{Listener: ln, total: total, perRemote: perRemote, m: m, remotes: map[string]int{}}
}

type limitListener struct {
	net.Listener
	total, perRemote int
	m                *Metrics

	mu      sync.Mutex
	open    int
	remotes map[string]int // open connections by remote IP
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		remote := remoteIP(c.RemoteAddr())
		if reason := l.admit(remote); reason != "" {
			l.m.connRefused.WithLabelValues(reason).Inc()
			c.Close()
			continue
		}
		l.m.connOpen.Inc()
		return &limitedConn{Conn: c, l: l, remote: remote}, nil
	}
}

// admit counts a new connection from remote in, or says why not: "total"
// or "per_remote".
func (l *limitListener) admit(remote string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.total:
		return "total"
	case l.remotes[remote] >= l.perRemote:
		return "per_remote"
	}
	l.open++
	l.remotes[remote]++
	return ""
}

func (l *limitListener) release(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.remotes[remote]--; l.remotes[remote] <= 0 {
		delete(l.remotes, remote)
	}
	l.m.connOpen.Dec()
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
	once   sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.remote) })
	return err
}

// newConnectionMetrics are the listener's: connections open, and refused by
// reason.
func newConnectionMetrics() (*prometheus.CounterVec, prometheus.Gauge) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_connections_refused_total", Help: "HTTP connections closed as soon as accepted, by reason: total (--max-connections open already) or per_remote (--max-connections-per-remote open from the address already).",
	}, []string{"reason"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_connections_open", Help: "HTTP connections open under the connection cap.",
	})
	refused.WithLabelValues("total")
	refused.WithLabelValues("per_remote")
	return refused, open
}
