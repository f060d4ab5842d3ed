package fleet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leasehold/leasehold"
)

// ClusterName is the nats cluster every embedded server of a fleet joins;
// servers only route to peers of the same cluster name.
const ClusterName = "leasehold"

// RouteUser is the user routes between a fleet's servers authenticate as,
// with the fleet's secret as the password.
const RouteUser = "leasehold"

// serverReadyTimeout bounds how long StartServer waits for the embedded
// server to take clients. JetStream recovery of a large store is the slow
// part.
const serverReadyTimeout = 10 * time.Second

// ServerConfig is the embedded nats-server of a node.
type ServerConfig struct {
	// Name is the server's name, the node's fleet name: JetStream clustering
	// needs every server's name to be unique.
	Name string
	// Dir is where JetStream keeps its streams and buckets.
	Dir string
	// Listen is the client address, host:port; port 0 picks a free one.
	Listen string
	// ClusterListen is the route address, host:port; empty runs the
	// server standalone. Port 0 picks one, which only works with Routes:
	// a node others route to needs a port they know.
	ClusterListen string
	// Routes are the other servers' route URLs, nats://host:port.
	Routes []string
	// Secret, if set, is the fleet's shared secret: routes, both ways,
	// present it as the password of user RouteUser, and clients as their
	// token unless ClientToken is set. Empty leaves the route port open to
	// anyone who reaches it (--nats-insecure).
	Secret string
	// ClientToken, if set, is the token clients must present instead of
	// Secret: a node without a fleet secret still closes its client port
	// with a token of its own (LocalSecret). With neither, the client port
	// is open, which only tests do.
	ClientToken string
	// Secrets, if set, is the fleet's secret as it rolls, Secret being
	// the one it presents at start: the server accepts, from clients
	// (unless ClientToken) and routes, any secret it holds, as it holds
	// them at each connection (Fleet.RotateSecret changes them).
	Secrets *Secrets
	// TLS, if set, makes the client port and the routes speak TLS only and
	// ask each peer for a certificate the CA signed.
	TLS *TLS
	// Logger receives the server's warnings and errors.
	Logger *slog.Logger
}

// routePingInterval and routePingsOut bound how long a route to a peer that
// stopped answering stands: about 6 s, well within any claim TTL's lapse
// (ClaimTTLFloor), while a route busy with a large window still answers
// its pings in time.
const (
	routePingInterval = 2 * time.Second
	routePingsOut     = 3
)

// StartServer starts an in-process nats-server with JetStream and waits
// until it takes clients. The caller shuts it down (Shutdown, then
// WaitForShutdown). Errors: KindInvalid for a bad address, route or name;
// KindUnavailable when an address is in use or the server does not come up,
// naming the flag (--nats-listen, --nats-cluster-listen) to change.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	s, _, err := startServer(cfg)
	return s, err
}

// startServer is StartServer, returning also the options the server was
// started with, for a reload (RotateSecret).
func startServer(cfg ServerConfig) (*server.Server, *server.Options, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !leasehold.ValidNodeName(cfg.Name) {
		return nil, nil, leasehold.Errorf(leasehold.KindInvalid, "%q is not a valid node name for the NATS server (A-Za-z0-9._+-, up to 128 bytes)", cfg.Name)
	}
	host, port, err := parseListen("--nats-listen", cfg.Listen)
	if err != nil {
		return nil, nil, err
	}
	routes, err := ParseRoutes(cfg.Routes)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, nil, leasehold.Wrap(leasehold.KindInvalid, err, "NATS store %s is not usable: %v", cfg.Dir, err)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		NoSigs:     true, // the node handles SIGTERM; the server must not exit the process
		NoLog:      true, // logging goes through cfg.Logger, set below
		JetStream:  true,
		StoreDir:   cfg.Dir,
		// Claims and lives carry the fleet's safety: a write is fsynced
		// before it is acknowledged, as the catalog's are, not on the
		// periodic default (2 minutes), which can lose acknowledged writes
		// when a machine loses power.
		SyncAlways: true,
	}
	if err := clusterOptions(opts, cfg, routes); err != nil {
		return nil, nil, err
	}
	if cfg.TLS != nil {
		clientTLS, err := cfg.TLS.serverConfig()
		if err != nil {
			return nil, nil, err
		}
		opts.TLSConfig, opts.TLSVerify = clientTLS, true
		if cfg.ClusterListen != "" {
			if opts.Cluster.TLSConfig, err = cfg.TLS.serverConfig(); err != nil {
				return nil, nil, err
			}
		}
	}
	rollingAuth(opts, cfg)
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, leasehold.Wrap(leasehold.KindInvalid, err, "NATS server options: %v", err)
	}
	log := &serverLogger{log: cfg.Logger.With("component", "nats-server"), fatal: make(chan serverFatal, 1)}
	s.SetLogger(log, false, false)
	go s.Start()
	if err := waitServerReady(s, log.fatal, cfg); err != nil {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, nil, err
	}
	return s, opts, nil
}

// clusterOptions sets the route options of opts from cfg: the cluster
// port, the routes (with the fleet's secret), and their pings. Errors:
// invalid config.
func clusterOptions(opts *server.Options, cfg ServerConfig, routes []*url.URL) error {
	if cfg.ClusterListen == "" {
		if len(routes) > 0 {
			return leasehold.Errorf(leasehold.KindInvalid, "--nats-routes needs --nats-cluster-listen: routes join a cluster this server does not listen for")
		}
		return nil
	}
	chost, cport, err := parseListen("--nats-cluster-listen", cfg.ClusterListen)
	if err != nil {
		return err
	}
	// A route to this server itself (the same routes list given to every
	// node) counts in nats-server's expected cluster size, and two nodes
	// of three then never elect a JetStream leader: only the peers'
	// routes are kept.
	routes = peerRoutes(routes, chost, cport)
	if len(routes) == 0 {
		// The fleet's first node has no one to route to, but clustered
		// JetStream refuses to start without a route: a route to itself
		// satisfies it (nats-server recognises and drops it) and the
		// others' routes to this node do the clustering.
		if cport == server.RANDOM_PORT {
			return leasehold.Errorf(leasehold.KindInvalid, "--nats-cluster-listen %s: without --nats-routes the cluster port must be fixed, so that other nodes can route to it", cfg.ClusterListen)
		}
		self := chost
		if self == "" || net.ParseIP(self).IsUnspecified() {
			self = "127.0.0.1"
		}
		routes = []*url.URL{{Scheme: "nats", Host: net.JoinHostPort(self, strconv.Itoa(cport))}}
	}
	opts.Cluster.Name = ClusterName
	opts.Cluster.Host = chost
	opts.Cluster.Port = cport
	// A peer cut off without a FIN (a link down, a machine gone) is
	// noticed by pings: at nats-server's defaults only after a minute
	// or more, and meanwhile its interest stands here, so requests
	// for the fleet's streams and buckets go to it and are never
	// answered, and the connected majority cannot take its groups
	// over. Pinged every routePingInterval, it is dropped within
	// routePingsOut of them.
	opts.Cluster.PingInterval = routePingInterval
	opts.Cluster.MaxPingsOut = routePingsOut
	if cfg.Secret != "" {
		opts.Cluster.Username, opts.Cluster.Password = RouteUser, cfg.Secret
		for i, r := range routes {
			withUser := *r
			withUser.User = url.UserPassword(RouteUser, cfg.Secret)
			routes[i] = &withUser
		}
	}
	opts.Routes = routes
	return nil
}

// waitServerReady waits until s takes clients, or until it reports a fatal
// error: nats-server does not stop polling when a listener fails, so
// without watching its log a port in use would cost the whole timeout.
func waitServerReady(s *server.Server, fatal <-chan serverFatal, cfg ServerConfig) error {
	deadline := time.Now().Add(serverReadyTimeout)
	for {
		select {
		case f := <-fatal:
			return f.leaseholdError(cfg)
		default:
		}
		if s.ReadyForConnections(100 * time.Millisecond) {
			return nil
		}
		if time.Now().After(deadline) {
			return leasehold.Errorf(leasehold.KindUnavailable, "the embedded NATS server (--nats-listen %s) did not take clients within %s", cfg.Listen, serverReadyTimeout)
		}
	}
}

// Replicas is how many copies of the fleet's streams and buckets a node
// asks for: one on each server it knows of, at most three (a JetStream
// quorum of three survives one loss; more only costs writes).
func Replicas(routes []string) int {
	return min(3, 1+len(routes))
}

// peerRoutes drops from routes those to this server's own cluster port
// (chost:cport): the port and an address of this machine, or the host
// the cluster port listens on.
func peerRoutes(routes []*url.URL, chost string, cport int) []*url.URL {
	if cport <= 0 {
		return routes
	}
	var local []net.IP
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				local = append(local, n.IP)
			}
		}
	}
	hostname, _ := os.Hostname()
	self := func(u *url.URL) bool {
		if u.Port() != strconv.Itoa(cport) {
			return false
		}
		h := u.Hostname()
		if h == chost || strings.EqualFold(h, "localhost") || (hostname != "" && strings.EqualFold(h, hostname)) {
			return true
		}
		ip := net.ParseIP(h)
		if ip == nil {
			return false
		}
		if ip.IsLoopback() {
			return true
		}
		for _, l := range local {
			if l.Equal(ip) {
				return true
			}
		}
		return false
	}
	out := routes[:0:0]
	for _, u := range routes {
		if !self(u) {
			out = append(out, u)
		}
	}
	return out
}

// PeerRoutes is how many of routes lead to other servers than the one
// listening for routes on clusterListen (host:port): the fleet's routes
// list may name every node, this one too.
func PeerRoutes(clusterListen string, routes []string) int {
	parsed, err := ParseRoutes(routes)
	if err != nil {
		return len(routes)
	}
	host, p, err := net.SplitHostPort(clusterListen)
	if err != nil {
		return len(routes)
	}
	port, _ := strconv.Atoi(p)
	return len(peerRoutes(parsed, host, port))
}

// ParseRoutes parses route URLs, nats://host:port. Errors: KindInvalid,
// naming --nats-routes.
func ParseRoutes(routes []string) ([]*url.URL, error) {
	var out []*url.URL
	for _, r := range routes {
		u, err := url.Parse(strings.TrimSpace(r))
		if err != nil || u.Scheme != "nats" || u.Port() == "" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
			return nil, leasehold.Errorf(leasehold.KindInvalid, "--nats-routes: %q is not a route URL like nats://10.0.0.2:6222", r)
		}
		if _, err := strconv.ParseUint(u.Port(), 10, 16); err != nil {
			return nil, leasehold.Errorf(leasehold.KindInvalid, "--nats-routes: %q has no valid port", r)
		}
		out = append(out, u)
	}
	return out, nil
}

// parseListen splits a host:port for nats-server, where port 0 means the
// default 4222 and -1 a free one: leasehold's port 0 means a free one, as
// for net.Listen.
func parseListen(flag, addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, leasehold.Errorf(leasehold.KindInvalid, "%s %q is not host:port", flag, addr)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, leasehold.Errorf(leasehold.KindInvalid, "%s %q: the port must be 0–65535", flag, addr)
	}
	if port == 0 {
		return host, server.RANDOM_PORT, nil
	}
	return host, int(port), nil
}

// serverFatal is a fatal error the server logged while starting: after one
// it does not listen, so StartServer gives up.
type serverFatal struct {
	format string
	msg    string
	err    error // the cause among the log call's arguments, if any
}

func (f serverFatal) leaseholdError(cfg ServerConfig) error {
	flag, addr := "", ""
	switch {
	case strings.Contains(f.format, "router port"):
		flag, addr = "--nats-cluster-listen", cfg.ClusterListen
	case strings.Contains(f.format, "listening on port"):
		flag, addr = "--nats-listen", cfg.Listen
	}
	if flag == "" {
		return leasehold.Wrap(leasehold.KindUnavailable, f.err, "the embedded NATS server did not start: %s", f.msg)
	}
	if errors.Is(f.err, syscall.EADDRINUSE) || strings.Contains(f.msg, "address already in use") {
		return leasehold.Wrap(leasehold.KindUnavailable, f.err, "%s %s: the address is in use (another node or NATS server?); pick another with %s", flag, addr, flag)
	}
	return leasehold.Wrap(leasehold.KindUnavailable, f.err, "%s %s: cannot listen: %s", flag, addr, f.msg)
}

// serverLogger is the nats-server's log in the node's slog: its notices are
// chatty startup lines (debug), its warnings and errors are the node's.
// Debug and trace are never switched on.
type serverLogger struct {
	log   *slog.Logger
	once  sync.Once
	fatal chan serverFatal

	// refused is, by remote host, when a refused client or route was last
	// logged and how many were refused since: one line a remote a
	// minute, so that knocking on the port cannot fill the log.
	mu      sync.Mutex
	refused map[string]*refusals
	// unreached is, by route address, the failed tries to reach a peer's
	// route since its last line: a peer down is tried several times a
	// second, and its errors would drown the node's log.
	unreached map[string]*refusals
}

// refusals are the lines of one remote (or route) not logged since its
// last logged one.
type refusals struct {
	logged time.Time
	since  int
}

// refusedLogEvery is how often a remote's refused connections are logged.
const refusedLogEvery = time.Minute

// refusedRemotes bounds the remotes remembered; past it, those not logged
// within refusedLogEvery are forgotten, and if still too many knock at
// once the rest share one line.
const refusedRemotes = 4096

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "authentication error") || strings.Contains(msg, "Authorization Violation") {
		l.refusedConn(msg, time.Now())
		return
	}
	if strings.HasPrefix(msg, "Error trying to connect to route") {
		l.routeUnreached(msg, time.Now())
		return
	}
	l.log.Error(msg)
}

// routeUnreached logs a failed try to reach a peer's route: the first
// for each address at warn, then one line a refusedLogEvery with the
// count since, and the others at debug.
func (l *serverLogger) routeUnreached(msg string, now time.Time) {
	addr := msg
	if _, after, ok := strings.Cut(msg, "dial tcp "); ok {
		addr, _, _ = strings.Cut(after, ": ")
	}
	n, ok := l.due(&l.unreached, addr, now)
	if !ok {
		l.log.Debug(msg)
		return
	}
	l.log.Warn("a peer's route cannot be reached; trying again, said again in a minute if it still fails", "route", addr, "tries", n, "detail", msg)
}

// refusedConn logs a connection NATS refused (nats-server's line, the
// token in it redacted by the server), at most once a refusedLogEvery
// for each remote host, with the count refused since the last line.
func (l *serverLogger) refusedConn(msg string, now time.Time) {
	remote, _, _ := strings.Cut(msg, " ")
	if host, _, err := net.SplitHostPort(remote); err == nil {
		remote = host
	}
	n, ok := l.due(&l.refused, remote, now)
	if !ok {
		return
	}
	l.log.Warn("NATS refused a connection without valid credentials", "remote", remote, "refused", n, "detail", msg)
}

// due counts one more of key's lines in set and reports whether one is
// to be logged now (key's first, or none for refusedLogEvery), with the
// count since the last. Past refusedRemotes keys, those not logged within
// refusedLogEvery are forgotten, and if still too many the rest share
// one key.
func (l *serverLogger) due(set *map[string]*refusals, key string, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if *set == nil {
		*set = map[string]*refusals{}
	}
	m := *set
	r := m[key]
	if r == nil {
		if len(m) >= refusedRemotes {
			for k, o := range m {
				if now.Sub(o.logged) >= refusedLogEvery {
					delete(m, k)
				}
			}
		}
		if len(m) >= refusedRemotes {
			key = "others"
		}
		if r = m[key]; r == nil {
			r = &refusals{}
			m[key] = r
		}
	}
	r.since++
	if !r.logged.IsZero() && now.Sub(r.logged) < refusedLogEvery {
		return 0, false
	}
	n := r.since
	r.logged, r.since = now, 0
	return n, true
}
func (l *serverLogger) Debugf(format string, v ...any) {}
func (l *serverLogger) Tracef(format string, v ...any) {}

// Fatalf logs at error and hands the first fatal error to StartServer; it
// never exits the process as nats-server's own logger does.
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	f := serverFatal{format: format, msg: msg}
	for _, a := range v {
		if err, ok := a.(error); ok {
			f.err = err
			break
		}
	}
	l.once.Do(func() { l.fatal <- f })
}
