package fleetfault

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The fleet's networks, inside the namespaces the harness makes: the
// hub namespace holds two bridges, one for HTTP (the harness's workers are
// on it at hubHTTP) and one for the NATS routes; each node's namespace has
// a veth to each bridge. A partition takes the hub end of a node's route
// veth down: its routes are cut both ways, its HTTP stays up. Nothing is
// made in the machine's own namespace.
const (
	httpNet  = "10.77.0."
	routeNet = "10.77.1."
	hubHTTP  = httpNet + "1"
	// HTTPPort, NATSPort and RoutePort are every node's ports, on its own
	// addresses (the NATS client port on its namespace's loopback).
	HTTPPort  = 8080
	NATSPort  = 4222
	RoutePort = 6222
)

// NetNode is one node's place in the networks.
type NetNode struct {
	Name    string // node-a
	NS      string // its network namespace
	HTTPIP  string
	RouteIP string
	// routeLink is the hub end of its route veth.
	routeLink string
}

// HTTPAddr is the node's HTTP address.
func (n NetNode) HTTPAddr() string { return fmt.Sprintf("%s:%d", n.HTTPIP, HTTPPort) }

// RouteURL is the node's NATS route URL.
func (n NetNode) RouteURL() string { return fmt.Sprintf("nats://%s:%d", n.RouteIP, RoutePort) }

// Net is the namespaces, veths and bridges of one run.
type Net struct {
	Hub   string
	Nodes []NetNode
	made  []string // namespaces made, to delete
}

// runIP runs ip with args, bounded in time.
func runIP(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Supported says why the harness cannot run here (nil when it can): it
// needs root, ip netns, veth pairs and bridges. It makes a probe
// namespace named prefix+"p" and deletes it.
func Supported(ctx context.Context, prefix string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root: making network namespaces needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command (iproute2)")
	}
	ns := prefix + "p"
	if err := runIP(ctx, "netns", "add", ns); err != nil {
		return fmt.Errorf("ip netns does not work: %v", err)
	}
	defer runIP(context.WithoutCancel(ctx), "netns", "del", ns)
	for _, args := range [][]string{
		{"-n", ns, "link", "add", "ffprobe0", "type", "veth", "peer", "name", "ffprobe1"},
		{"-n", ns, "link", "add", "ffprobebr", "type", "bridge"},
	} {
		if err := runIP(ctx, args...); err != nil {
			return fmt.Errorf("veth pairs or bridges do not work in a namespace: %v", err)
		}
	}
	return nil
}

// SetupNet makes the hub namespace (prefix+"h") with its two bridges, and
// one namespace a node (prefix plus the node's last letter) wired to both.
// On an error it deletes what it made.
func SetupNet(ctx context.Context, prefix string, names []string) (n *Net, err error) {
	n = &Net{Hub: prefix + "h"}
	defer func() {
		if err != nil {
			n.Teardown()
			n = nil
		}
	}()
	if err := runIP(ctx, "netns", "add", n.Hub); err != nil {
		return nil, err
	}
	n.made = append(n.made, n.Hub)
	steps := [][]string{
		{"-n", n.Hub, "link", "set", "lo", "up"},
		{"-n", n.Hub, "link", "add", "brhttp", "type", "bridge"},
		{"-n", n.Hub, "link", "add", "brroute", "type", "bridge"},
		{"-n", n.Hub, "addr", "add", hubHTTP + "/24", "dev", "brhttp"},
		{"-n", n.Hub, "link", "set", "brhttp", "up"},
		{"-n", n.Hub, "link", "set", "brroute", "up"},
	}
	for i, name := range names {
		letter := name[len(name)-1:]
		nn := NetNode{
			Name: name, NS: prefix + letter,
			HTTPIP: fmt.Sprintf("%s%d", httpNet, 11+i), RouteIP: fmt.Sprintf("%s%d", routeNet, 11+i),
			routeLink: "r" + letter,
		}
		if err := runIP(ctx, "netns", "add", nn.NS); err != nil {
			return nil, err
		}
		n.made = append(n.made, nn.NS)
		n.Nodes = append(n.Nodes, nn)
		steps = append(steps,
			[]string{"-n", nn.NS, "link", "set", "lo", "up"},
			[]string{"-n", n.Hub, "link", "add", "h" + letter, "type", "veth", "peer", "name", "http0", "netns", nn.NS},
			[]string{"-n", n.Hub, "link", "add", nn.routeLink, "type", "veth", "peer", "name", "route0", "netns", nn.NS},
			[]string{"-n", n.Hub, "link", "set", "h" + letter, "master", "brhttp", "up"},
			[]string{"-n", n.Hub, "link", "set", nn.routeLink, "master", "brroute", "up"},
			[]string{"-n", nn.NS, "addr", "add", nn.HTTPIP + "/24", "dev", "http0"},
			[]string{"-n", nn.NS, "addr", "add", nn.RouteIP + "/24", "dev", "route0"},
			[]string{"-n", nn.NS, "link", "set", "http0", "up"},
			[]string{"-n", nn.NS, "link", "set", "route0", "up"},
		)
	}
	for _, s := range steps {
		if err := runIP(ctx, s...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Node returns the node named name.
func (n *Net) Node(name string) NetNode {
	for _, nn := range n.Nodes {
		if nn.Name == name {
			return nn
		}
	}
	panic("fleetfault: no node " + name)
}

// Cut takes node's route link down at the hub: its NATS routes to its
// peers are cut both ways; its HTTP and its own NATS client stay up.
func (n *Net) Cut(ctx context.Context, node string) error {
	return runIP(ctx, "-n", n.Hub, "link", "set", n.Node(node).routeLink, "down")
}

// Heal brings node's route link back up.
func (n *Net) Heal(ctx context.Context, node string) error {
	return runIP(ctx, "-n", n.Hub, "link", "set", n.Node(node).routeLink, "up")
}

// Teardown deletes every namespace made (their veths and bridges go with
// them). Processes still in them must be gone first.
func (n *Net) Teardown() error {
	var errs []error
	for i := len(n.made) - 1; i >= 0; i-- {
		if err := runIP(context.Background(), "netns", "del", n.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	n.made = nil
	return errors.Join(errs...)
}

// Command is name with args run in node's namespace.
func (n *Net) Command(node, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Node(node).NS, name}, args...)...)
}

// DialContext dials from the hub namespace: the socket is made on a
// thread moved into it, so the harness reaches the nodes without any
// address in the machine's own namespace.
func (n *Net) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is never unlocked: it ends with this goroutine, and
		// with it the namespace it was moved into.
		runtime.LockOSThread()
		c, err := dialInNS(ctx, nsPath(n.Hub), network, addr)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func nsPath(ns string) string { return "/run/netns/" + ns }

// dialInNS moves the calling (locked) thread into the network namespace
// at path and dials there. A socket stays in the namespace it was made in.
func dialInNS(ctx context.Context, path, network, addr string) (net.Conn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("setns %s: %v", path, err)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// inNS runs fn on a thread moved into namespace ns, and ends that thread
// after. Sockets fn makes stay in ns.
func inNS(ns string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(nsPath(ns))
		if err != nil {
			ch <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("setns %s: %v", ns, err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}
