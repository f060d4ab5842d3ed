package fleet

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// serverStart starts an embedded server and shuts it down with the test.
func serverStart(t *testing.T, cfg ServerConfig) *server.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = claimQuiet
	}
	s, err := StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// serverJetStream is a JetStream client of s, closed with the test.
func serverJetStream(t *testing.T, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestServerStandalone: port 0 is a free port (not nats-server's 4222), a
// client connects, JetStream answers and keeps its store under Dir.
func TestServerStandalone(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "nats")
	s := serverStart(t, ServerConfig{Name: "node-1", Dir: dir, Listen: "127.0.0.1:0"})
	port := s.Addr().(*net.TCPAddr).Port
	if port == 0 || port == server.DEFAULT_PORT {
		t.Fatalf("client port %d: want a free port picked for port 0", port)
	}
	if got, want := s.Name(), "node-1"; got != want {
		t.Fatalf("server name %q, want %q", got, want)
	}
	js := serverJetStream(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream account info: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamName, Subjects: []string{SubjectPrefix + ">"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("JetStream store not under Dir: %v", err)
	}
}

// TestServerRefused: an address in use or a malformed one is refused at
// once, with the kind and the flag to change.
func TestServerRefused(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	cases := []struct {
		name string
		cfg  ServerConfig
		kind leasehold.ErrorKind
		msg  string
	}{
		{"ClientAddressInUse", ServerConfig{Listen: busy}, leasehold.KindUnavailable, "--nats-listen " + busy},
		{"ClusterAddressInUse", ServerConfig{Listen: "127.0.0.1:0", ClusterListen: busy}, leasehold.KindUnavailable, "--nats-cluster-listen " + busy},
		{"ClusterAddressInUseWithRoutes", ServerConfig{Listen: "127.0.0.1:0", ClusterListen: busy, Routes: []string{"nats://127.0.0.1:1"}}, leasehold.KindUnavailable, "--nats-cluster-listen " + busy},
		{"SeedOnFreeClusterPort", ServerConfig{Listen: "127.0.0.1:0", ClusterListen: "127.0.0.1:0"}, leasehold.KindInvalid, "--nats-cluster-listen"},
		{"ListenNotHostPort", ServerConfig{Listen: "localhost"}, leasehold.KindInvalid, "--nats-listen"},
		{"ListenBadPort", ServerConfig{Listen: "127.0.0.1:70000"}, leasehold.KindInvalid, "--nats-listen"},
		{"RouteNotURL", ServerConfig{Listen: "127.0.0.1:0", ClusterListen: "127.0.0.1:0", Routes: []string{"10.0.0.2"}}, leasehold.KindInvalid, "--nats-routes"},
		{"RouteWithoutCluster", ServerConfig{Listen: "127.0.0.1:0", Routes: []string{"nats://127.0.0.1:6222"}}, leasehold.KindInvalid, "--nats-cluster-listen"},
		{"BadName", ServerConfig{Name: "no spaces", Listen: "127.0.0.1:0"}, leasehold.KindInvalid, "node name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.Name == "" {
				cfg.Name = "node-1"
			}
			cfg.Dir = t.TempDir()
			cfg.Logger = claimQuiet
			s, err := StartServer(cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("started; want a refusal")
			}
			if got := leasehold.KindOf(err); got != tc.kind {
				t.Fatalf("kind %s, want %s (%v)", got, tc.kind, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not name %q", err, tc.msg)
			}
		})
	}
	// A refused start lets go of its JetStream store, so the node can
	// retry on the same Dir with another address.
	t.Run("DirReusable", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := StartServer(ServerConfig{Name: "node-1", Dir: dir, Listen: busy, Logger: claimQuiet}); err == nil {
			t.Fatal("started on a busy address")
		}
		serverStart(t, ServerConfig{Name: "node-1", Dir: dir, Listen: "127.0.0.1:0"})
	})
}

// TestServerCluster: three servers routed to each other on loopback form
// one JetStream cluster, where a stream of Replicas(routes) = 3 copies can
// be created once the cluster has elected its meta leader.
func TestServerCluster(t *testing.T) {
	t.Parallel()
	var routeAddrs []string
	for range 3 {
		routeAddrs = append(routeAddrs, fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)))
	}
	var servers []*server.Server
	var routes []string
	for i, addr := range routeAddrs {
		routes = nil
		for j, other := range routeAddrs {
			if j != i {
				routes = append(routes, "nats://"+other)
			}
		}
		servers = append(servers, serverStart(t, ServerConfig{
			Name: fmt.Sprintf("node-%d", i+1), Dir: t.TempDir(),
			Listen: "127.0.0.1:0", ClusterListen: addr, Routes: routes,
		}))
	}
	if got, want := Replicas(routes), 3; got != want {
		t.Fatalf("Replicas(%d routes) = %d, want %d", len(routes), got, want)
	}
	if got, want := servers[0].ClusterName(), ClusterName; got != want {
		t.Fatalf("cluster name %q, want %q", got, want)
	}
	js := serverJetStream(t, servers[0])
	var info *jetstream.StreamInfo
	poll.Eventually(t, 30*time.Second, "a stream of 3 replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: StreamName, Subjects: []string{SubjectPrefix + ">"}, Replicas: Replicas(routes),
		})
		if err != nil {
			return false
		}
		info, err = st.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2
	})
	if got, want := info.Cluster.Name, ClusterName; got != want {
		t.Fatalf("stream's cluster %q, want %q", got, want)
	}
	for _, s := range servers {
		if got, want := s.NumRoutes(), 2; got < want {
			t.Errorf("%s has %d routes, want at least %d", s.Name(), got, want)
		}
	}
}

// TestServerSecret: servers given the fleet's secret cluster with each
// other and answer a client presenting it; a client without it, or with
// another, is refused, and a server with another secret never routes in.
func TestServerSecret(t *testing.T) {
	t.Parallel()
	const secret = "fleet-secret-0123456789"
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))}
	a := serverStart(t, ServerConfig{Name: "node-a", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: addrs[0],
		Routes: []string{"nats://" + addrs[1]}, Secret: secret})
	b := serverStart(t, ServerConfig{Name: "node-b", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: addrs[1],
		Routes: []string{"nats://" + addrs[0]}, Secret: secret})
	poll.Eventually(t, 20*time.Second, "the two servers route to each other", func() bool {
		return a.NumRoutes() > 0 && b.NumRoutes() > 0
	})

	wantRefused(t, a.ClientURL(), "the secret", nil, nats.Token("another-secret-0123456789"))
	nc, err := nats.Connect(b.ClientURL(), nats.Token(secret), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("a client with the secret: %v", err)
	}
	nc.Close()

	serverStart(t, ServerConfig{Name: "node-x", Dir: t.TempDir(), Listen: "127.0.0.1:0",
		ClusterListen: fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), Routes: []string{"nats://" + addrs[0]}, Secret: "another-secret-0123456789"})
	strangerKeptOut(t, a, "node-x")
}

// TestServerSeed: the fleet's first node clusters with no routes of its
// own, and a second node routing to it joins: a stream of two replicas
// can be created from the seed.
func TestServerSeed(t *testing.T) {
	t.Parallel()
	seedRoute := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	seed := serverStart(t, ServerConfig{Name: "node-1", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: seedRoute})
	routes := []string{"nats://" + seedRoute}
	serverStart(t, ServerConfig{Name: "node-2", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: "127.0.0.1:0", Routes: routes})
	js := serverJetStream(t, seed)
	poll.Eventually(t, 30*time.Second, "a stream of 2 replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: StreamName, Subjects: []string{SubjectPrefix + ">"}, Replicas: Replicas(routes),
		})
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 1
	})
}

func TestServerReplicas(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{0: 1, 1: 2, 2: 3, 3: 3, 7: 3} {
		if got := Replicas(make([]string, n)); got != want {
			t.Errorf("Replicas(%d routes) = %d, want %d", n, got, want)
		}
	}
}

// TestServerLog: the server's notices are debug lines, its warnings and
// errors the node's; debug and trace never reach the log.
func TestServerLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	l := &serverLogger{log: slog.New(h), fatal: make(chan serverFatal, 1)}
	l.Noticef("notice %d", 1)
	l.Warnf("warn %d", 2)
	l.Errorf("error %d", 3)
	l.Debugf("debug %d", 4)
	l.Tracef("trace %d", 5)
	l.Fatalf("fatal %v", os.ErrClosed)
	l.Fatalf("fatal again") // only the first is handed on; must not block
	got := buf.String()
	for _, want := range []string{`level=DEBUG msg="notice 1"`, `level=WARN msg="warn 2"`, `level=ERROR msg="error 3"`, `level=ERROR msg="fatal file already closed"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %s:\n%s", want, got)
		}
	}
	for _, never := range []string{"debug 4", "trace 5"} {
		if strings.Contains(got, never) {
			t.Errorf("log has %q:\n%s", never, got)
		}
	}
	if f := <-l.fatal; f.err != os.ErrClosed {
		t.Errorf("fatal cause %v, want %v", f.err, os.ErrClosed)
	}
}

// TestServerRouteCutOff: a peer that stops answering without closing its
// connection (a link down, a machine gone, a process stopped) is dropped
// from the routes within seconds, so the fleet's requests stop going to a
// server that never answers. node-b routes to node-a through a relay that
// then goes silent, holding both connections open: at nats-server's
// default pings this takes a minute or more.
func TestServerRouteCutOff(t *testing.T) {
	t.Parallel()
	aRoute := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	a := serverStart(t, ServerConfig{Name: "node-a", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: aRoute})
	relay := newSilentRelay(t, aRoute)
	b := serverStart(t, ServerConfig{Name: "node-b", Dir: t.TempDir(), Listen: "127.0.0.1:0",
		ClusterListen: fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), Routes: []string{"nats://" + relay.addr}})
	poll.Eventually(t, 20*time.Second, "node-b routes to node-a through the relay", func() bool {
		return a.NumRoutes() > 0 && b.NumRoutes() > 0
	})
	cut := time.Now()
	relay.silence()
	// Three pings unanswered at routePingInterval: about 6 s, at most 8.
	poll.Eventually(t, 4*routePingInterval*routePingsOut/3+2*time.Second, "node-b drops the silent route", func() bool {
		return b.NumRoutes() == 0
	})
	t.Logf("node-b dropped the silent route %s after the cut", time.Since(cut).Round(100*time.Millisecond))
}

// silentRelay forwards TCP connections to a target until silenced; then it
// forwards nothing more and closes nothing, like a link gone down.
type silentRelay struct {
	addr   string
	mu     sync.Mutex
	silent bool
}

func newSilentRelay(t *testing.T, target string) *silentRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &silentRelay{addr: ln.Addr().String()}
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, in, out)
			connsMu.Unlock()
			go r.pipe(in, out)
			go r.pipe(out, in)
		}
	}()
	return r
}

func (r *silentRelay) silence() {
	r.mu.Lock()
	r.silent = true
	r.mu.Unlock()
}

// pipe copies from src to dst until silenced, then drops what it reads.
func (r *silentRelay) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		silent := r.silent
		r.mu.Unlock()
		if silent {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestServerClusterSelfRoute: the same routes list given to every server,
// each naming itself too, still lets two servers of three elect
// JetStream's meta leader (a route to itself would count it twice in the
// cluster's expected size, and two would never be a majority).
func TestServerClusterSelfRoute(t *testing.T) {
	t.Parallel()
	var addrs, routes []string
	for range 3 {
		addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
		addrs, routes = append(addrs, addr), append(routes, "nats://"+addr)
	}
	if got, want := PeerRoutes(addrs[0], routes), 2; got != want {
		t.Fatalf("PeerRoutes(%s, %v) = %d, want %d", addrs[0], routes, got, want)
	}
	var servers []*server.Server
	for i := range 2 {
		servers = append(servers, serverStart(t, ServerConfig{Name: fmt.Sprintf("node-%d", i+1), Dir: t.TempDir(),
			Listen: "127.0.0.1:0", ClusterListen: addrs[i], Routes: routes}))
	}
	js := serverJetStream(t, servers[0])
	poll.Eventually(t, 30*time.Second, "JetStream with two servers of three", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
}

// TestServerLogRouteUnreached: a peer down is tried several times a
// second; its route errors are said once at warn, then at debug, and
// again at warn a minute later with the count; another peer has its own
// first line.
func TestServerLogRouteUnreached(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := &serverLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), fatal: make(chan serverFatal, 1)}
	const b = "Error trying to connect to route (attempt %d): dial tcp 127.0.0.1:6222: connect: connection refused"
	const c = "Error trying to connect to route (attempt %d): dial tcp 127.0.0.1:6223: connect: connection refused"
	now := time.Now()
	for i := range 40 {
		l.routeUnreached(fmt.Sprintf(b, i), now.Add(time.Duration(i)*250*time.Millisecond))
	}
	l.routeUnreached(fmt.Sprintf(c, 1), now)
	l.routeUnreached(fmt.Sprintf(b, 41), now.Add(refusedLogEvery))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if got, want := len(lines), 3; got != want {
		t.Fatalf("%d lines, want %d:\n%s", got, want, buf.String())
	}
	for i, want := range []string{"route=127.0.0.1:6222 tries=1", "route=127.0.0.1:6223 tries=1", "route=127.0.0.1:6222 tries=40"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "level=WARN") {
			t.Errorf("line %d is %s, want a warning with %s", i, lines[i], want)
		}
	}
}
