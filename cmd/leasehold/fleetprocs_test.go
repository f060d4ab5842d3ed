package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// procNode is one node of a fleet of real leasehold processes: it can be
// killed (SIGKILL), signalled and started again on its data.
type procNode struct {
	name   string
	data   string
	args   []string
	bin    string
	cmd    *exec.Cmd
	url    string
	log    *syncbuf.Buffer
	exited chan struct{}
	admin  *client.Client
}

// startProcFleet starts len(names) leasehold processes clustered over
// NATS on loopback, each with the flags of extra(i) added, and returns
// them once every one is ready; the test's end stops them.
func startProcFleet(t *testing.T, names []string, extra func(i int) []string) []*procNode {
	t.Helper()
	bin := frontdoorBinary(t)
	routes := freePorts(t, len(names))
	nodes := make([]*procNode, len(names))
	for i, name := range names {
		var others []string
		for j, p := range routes {
			if j != i {
				others = append(others, fmt.Sprintf("nats://127.0.0.1:%d", p))
			}
		}
		args := []string{"serve", "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--name", name,
			"--nats-listen", "127.0.0.1:0", "--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", routes[i]),
			"--nats-routes", strings.Join(others, ",")}
		n := &procNode{name: name, data: args[2], args: append(args, extra(i)...), bin: bin}
		n.start(t)
		nodes[i] = n
	}
	for _, n := range nodes {
		n.waitServing(t)
	}
	for _, n := range nodes {
		pollReady(t, n.url, 120*time.Second)
	}
	return nodes
}

// start runs the node's process (again) on its data.
func (n *procNode) start(t *testing.T) {
	t.Helper()
	n.cmd = exec.Command(n.bin, n.args...)
	n.log = &syncbuf.Buffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	n.exited = exited
	cmd := n.cmd
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
}

// waitServing waits for the node's URL in its log and reads its admin
// token.
func (n *procNode) waitServing(t *testing.T) {
	t.Helper()
	poll.Until(t, 60*time.Second, n.name+" to serve", func() error {
		select {
		case <-n.exited:
			t.Fatalf("%s exited at start:\n%s", n.name, n.log.String())
		default:
		}
		if m := servingURL.FindStringSubmatch(n.log.String()); m != nil {
			n.url = m[1]
			return nil
		}
		return fmt.Errorf("%s not serving yet", n.name)
	})
	token, err := os.ReadFile(filepath.Join(n.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	n.admin = client.New(n.url, strings.TrimSpace(string(token)))
}

// restart stops the process with SIGTERM, as an operator would, and
// starts it again on its data dir, waiting until it serves.
func (n *procNode) restart(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGTERM)
	<-n.exited
	n.start(t)
	n.waitServing(t)
}

// kill ends the process at once, as a crash would.
func (n *procNode) kill(t *testing.T) {
	t.Helper()
	n.cmd.Process.Kill()
	<-n.exited
}
