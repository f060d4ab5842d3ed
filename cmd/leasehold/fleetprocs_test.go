package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
// them once every one is ready; the test's end stops them. The route
// ports are free a moment before the nodes bind them, and on a loaded
// machine another test may take one meanwhile: a node that exits at start
// because its address is in use stops the fleet, which starts again on
// new ports (three tries).
func startProcFleet(t *testing.T, names []string, extra func(i int) []string) []*procNode {
	t.Helper()
	bin := leaseholdBinary(t)
	for try := 1; ; try++ {
		routes := freePorts(t, len(names))
		nodes := make([]*procNode, len(names))
		for i, name := range names {
			args := append([]string{"serve", "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--name", name,
				"--nats-listen", "127.0.0.1:0"}, routeArgs(routes, i)...)
			n := &procNode{name: name, data: args[2], args: append(args, extra(i)...), bin: bin}
			n.start(t)
			nodes[i] = n
		}
		if lost := portTaken(nodes); lost != nil && try < 3 {
			t.Logf("%s could not bind its address, the fleet starts again on new ports:\n%s", lost.name, lost.log.String())
			for _, n := range nodes {
				n.kill(t)
			}
			continue
		}
		for _, n := range nodes {
			n.waitServing(t)
		}
		for _, n := range nodes {
			n.waitReady(t, 120*time.Second)
		}
		return nodes
	}
}

// portTaken waits until every node of a fleet just started is ready or
// one has exited, and returns the one that exited because an address it
// was given is in use; nil if none did.
func portTaken(nodes []*procNode) *procNode {
	var lost *procNode
	_ = poll.Wait(120*time.Second, poll.Every, func() error {
		for _, n := range nodes {
			select {
			case <-n.exited:
				if strings.Contains(n.log.String(), "address already in use") {
					lost = n
				}
				return nil
			default:
			}
		}
		for _, n := range nodes {
			m := servingURL.FindStringSubmatch(n.log.String())
			if m == nil {
				return errors.New("not serving yet")
			}
			if err := readyz(m[1]); err != nil {
				return err
			}
		}
		return nil
	})
	return lost
}

// natsURL is the client URL of the node's embedded NATS, as its log says
// once it has joined its fleet.
func (n *procNode) natsURL(t *testing.T) string {
	t.Helper()
	var url string
	poll.Until(t, 60*time.Second, n.name+" to say its NATS URL", func() error {
		m := joinedNATS.FindStringSubmatch(n.log.String())
		if m == nil {
			return errors.New("not joined yet")
		}
		url = m[1]
		return nil
	})
	return url
}

// joinedNATS finds a node's NATS client URL in its log line that it
// joined its fleet.
var joinedNATS = regexp.MustCompile(`peers: joined the fleet.* nats=(nats://[0-9.:]+)`)

// waitReady polls the node's /readyz until it answers 200, failing t
// after d with the node's log, and at once (with its log) if its process
// has exited: a node that dies after it serves is refused connections
// from then on, which says nothing of why.
func (n *procNode) waitReady(t *testing.T, d time.Duration) {
	t.Helper()
	if err := poll.Wait(d, poll.Every, func() error {
		select {
		case <-n.exited:
			t.Fatalf("%s exited before it was ready:\n%s", n.name, n.log.String())
		default:
		}
		return readyz(n.url)
	}); err != nil {
		t.Fatalf("waited %s for %s's readyz to answer 200: %v\n%s", d, n.name, err, n.log.String())
	}
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
