package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// builtBinary is the leasehold binary the tests of its process run,
// built once for them (TestMain removes it).
var builtBinary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// leaseholdBinary builds the leasehold binary once and returns its path.
func leaseholdBinary(t *testing.T) string {
	t.Helper()
	builtBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "leasehold-bin-")
		if err != nil {
			builtBinary.err = err
			return
		}
		builtBinary.path = filepath.Join(dir, "leasehold")
		builtBinary.out, builtBinary.err = exec.Command("go", "build", "-o", builtBinary.path, ".").CombinedOutput()
	})
	if builtBinary.err != nil {
		t.Fatalf("build: %v\n%s", builtBinary.err, builtBinary.out)
	}
	return builtBinary.path
}

// procNode is a node run as the built binary's own process (`leasehold
// serve`): it can be killed (SIGKILL), signalled and started again on its
// data. It is the command's tests' one node process, for what only a
// process shows (its exit code, its signals, its lock on the data dir, a
// crash); servedNode runs serve in the test's process.
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

// startProcNode starts the binary's serve on data, with --listen
// 127.0.0.1:0 and args, and returns it once it serves; the test's end
// stops it.
func startProcNode(t *testing.T, name, data string, args ...string) *procNode {
	t.Helper()
	n := &procNode{name: name, data: data, args: append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, args...), bin: leaseholdBinary(t)}
	n.start(t)
	n.waitServing(t)
	return n
}

// startProcFleet starts len(names) leasehold processes clustered over
// NATS on loopback, each with the flags of extra(i) added, and returns
// them once every one is ready; the test's end stops them.
func startProcFleet(t *testing.T, names []string, extra func(i int) []string) []*procNode {
	t.Helper()
	bin := leaseholdBinary(t)
	routes := freePorts(t, len(names))
	nodes := make([]*procNode, len(names))
	for i, name := range names {
		args := append([]string{"serve", "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--name", name,
			"--nats-listen", "127.0.0.1:0"}, routeArgs(routes, i)...)
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
