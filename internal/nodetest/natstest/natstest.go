// Package natstest starts embedded nats-servers with JetStream for tests,
// as nats-server's own tests do: on loopback, the client port picked by the
// server (port -1), the store under t.TempDir(). It is apart from nodetest
// so that tests of a node alone do not link nats-server.
package natstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options are an embedded server's options: loopback, port -1, no logs or
// signal handlers, JetStream under a temporary directory.
func Options(t testing.TB) *server.Options {
	return &server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
	}
}

// Start starts a server and waits until it takes clients. The caller shuts
// it down (a test may restart it on the same options).
func Start(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}

// Server is one standalone server, shut down with the test.
func Server(t testing.TB) *server.Server {
	s := Start(t, Options(t))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// FreePort is a loopback port nothing listens on, for a server that must
// come back on the same port after a restart, or that is named in another
// server's routes before it starts. It is taken from below the kernel's
// ephemeral range: a port the kernel handed out for :0 is free only until
// the next outgoing connection, and the servers' own route dials take such
// ports by the dozen between the check and the bind. Ports are not
// repeated within the test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	if ports.next == 0 {
		ports.low, ports.high = portRange()
		ports.next = ports.low + rand.IntN(ports.high-ports.low)
	}
	for range ports.high - ports.low {
		p := ports.next
		if ports.next++; ports.next >= ports.high {
			ports.next = ports.low
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatalf("no free loopback port in %d-%d", ports.low, ports.high)
	return 0
}

var ports struct {
	sync.Mutex
	low, high, next int
}

// portRange is the stretch of ports below the ephemeral range (Linux's
// ip_local_port_range; 32768 when it cannot be read) that tests pick from.
func portRange() (low, high int) {
	high = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 12000 {
			high = lo
		}
	}
	return high - 10000, high
}

// Cluster is n clustered servers (s1, s2, …) on fixed loopback ports, shut
// down with the test; the options are returned so a server can be
// restarted as it was.
func Cluster(t testing.TB, n int) ([]*server.Server, []*server.Options) {
	t.Helper()
	var routes []*url.URL
	var all []*server.Options
	for i := range n {
		o := Options(t)
		o.Port = FreePort(t)
		o.ServerName = fmt.Sprintf("s%d", i+1)
		o.Cluster.Name = "natstest"
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = FreePort(t)
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", o.Cluster.Port)})
		all = append(all, o)
	}
	var servers []*server.Server
	for _, o := range all {
		o.Routes = routes
		servers = append(servers, Start(t, o))
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
	})
	return servers, all
}

// Connect is a JetStream client of the server at url only (no failover to
// servers it learns of), reconnecting to it forever, closed with the test.
func Connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.IgnoreDiscoveredServers(), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.Timeout(time.Second))
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
