package fleetfault

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// TestNet makes the namespaces and bridges (root only), reaches a node's
// HTTP address from the hub, cuts the node's route link and heals it, and
// checks that nothing is left after the teardown.
func TestNet(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("lhft%d", os.Getpid()%100000)
	if err := Supported(ctx, prefix); err != nil {
		t.Skipf("network namespaces unavailable: %v", err)
	}
	nw, err := SetupNet(ctx, prefix, nodeNames)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nw.Teardown() })
	a, b := nw.Node("node-a"), nw.Node("node-b")

	// Listeners inside node-a's namespace: its HTTP and route addresses.
	var httpLn, routeLn net.Listener
	if err := inNS(a.NS, func() (err error) {
		if httpLn, err = net.Listen("tcp", a.HTTPAddr()); err != nil {
			return err
		}
		routeLn, err = net.Listen("tcp", net.JoinHostPort(a.RouteIP, fmt.Sprint(RoutePort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer httpLn.Close()
	defer routeLn.Close()
	for _, ln := range []net.Listener{httpLn, routeLn} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	// dialRoute dials node-a's route address from node-b's namespace.
	dialRoute := func() error {
		return inNS(b.NS, func() error {
			d := net.Dialer{Timeout: 500 * time.Millisecond}
			c, err := d.Dial("tcp", net.JoinHostPort(a.RouteIP, fmt.Sprint(RoutePort)))
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	dialHTTP := func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := nw.DialContext(ctx, "tcp", a.HTTPAddr())
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dialHTTP(); err != nil {
		t.Fatalf("node-a's HTTP from the hub: %v", err)
	}
	if err := dialRoute(); err != nil {
		t.Fatalf("node-a's route from node-b: %v", err)
	}
	if err := nw.Cut(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := dialRoute(); err == nil {
		t.Error("node-a's route answered node-b while cut")
	}
	if err := dialHTTP(); err != nil {
		t.Errorf("node-a's HTTP from the hub while its routes are cut: %v", err)
	}
	if err := nw.Heal(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "node-a's route from node-b after the heal", dialRoute)
	if err := nw.Teardown(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), prefix) {
		t.Errorf("namespaces left after the teardown:\n%s", out)
	}
}
