package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// freePorts returns n loopback ports free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// routeArgs are the flags that make node i of a fleet on loopback listen
// for routes on routes[i] and route to the others.
func routeArgs(routes []int, i int) []string {
	var others []string
	for j, p := range routes {
		if j != i {
			others = append(others, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	return []string{"--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", routes[i]), "--nats-routes", strings.Join(others, ",")}
}

// TestRollingStart: a fleet of three clustered nodes started one at a
// time, as service managers do, comes up. The first node answers
// /healthz at once and /readyz 503 with what it waits for, keeps trying
// to join (it does not exit) while its peers are not up, and says so in
// its log; once the others are started, each waiting for the previous
// one's /healthz, all three are ready.
func TestRollingStart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a three-node fleet takes a while")
	}
	secret := natsSecret(t, "rolling-start-secret-0123456789")
	// Every port a node listens on is taken from one call: node-b's NATS
	// client port, left to the system, was once handed the port node-b's
	// routes were to listen on (closed 20 s before, while node-a waited
	// alone), and node-b exited.
	ports := freePorts(t, 9)
	routes, clients, https := ports[:3], ports[3:6], ports[6:]
	names := []string{"node-a", "node-b", "node-c"}
	start := func(i int) *servedNode {
		return serveNode(t, append([]string{"--data", t.TempDir(), "--name", names[i],
			"--listen", fmt.Sprintf("127.0.0.1:%d", https[i]), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", clients[i]),
			"--nats-secret-file", secret, "--claim-ttl", "4s"}, routeArgs(routes, i)...)...)
	}
	status := func(n *servedNode, path string) (int, string) {
		resp, err := http.Get(n.url + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	a := start(0)
	if code, body := status(a, "/healthz"); code != 200 {
		t.Fatalf("a's healthz at start = %d %s, want 200", code, body)
	}
	// Alone of three, a cannot form its cluster: it keeps joining, not
	// ready, says what it waits for, and does not exit.
	if code, body := status(a, "/readyz"); code != 503 || !strings.Contains(body, "joining the fleet") {
		t.Fatalf("a's readyz with no peers up = %d %s, want 503 naming the join", code, body)
	}
	// Twice (20 s): a node that gave up on its fleet after a while would
	// be gone by then.
	poll.Until(t, 45*time.Second, "a's log to say what it waits for", func() error {
		if ended, err := a.ended(); ended {
			t.Fatalf("a exited while its peers were not up: %v\n%s", err, a.log.String())
		}
		if strings.Count(a.log.String(), "joining the fleet: still waiting") < 2 {
			return fmt.Errorf("the log so far:\n%s", a.log.String())
		}
		return nil
	})
	b := start(1)
	c := start(2)
	for _, n := range []*servedNode{a, b, c} {
		poll.Until(t, 90*time.Second, "a node ready after the fleet was started", func() error {
			code, body := status(n, "/readyz")
			if code == 200 {
				return nil
			}
			if ended, err := n.ended(); ended {
				t.Fatalf("a node exited while joining: %v\n%s", err, n.log.String())
			}
			return fmt.Errorf("%d %s\n%s", code, body, n.log.String())
		})
	}
}
