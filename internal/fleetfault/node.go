package fleetfault

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is one `leasehold serve` process in its namespace, started again
// on the same data directory after a kill, or on another build (SetBin)
// in the upgrade mode.
type Node struct {
	NetNode
	Dir  string
	bin  string   // the leasehold binary the next Start runs
	args []string // its arguments after `ip netns exec NS BIN`
	log  *os.File

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// URL is the node's HTTP base address.
func (n *Node) URL() string { return "http://" + n.HTTPAddr() }

// AdminToken reads the token the node wrote into its data directory.
func (n *Node) AdminToken() (string, error) {
	b, err := os.ReadFile(filepath.Join(n.Dir, "admin.token"))
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s: admin.token is empty", n.Name)
	}
	return t, nil
}

func newNode(cfg *Config, nw *Net, nn NetNode, routes []string) (*Node, error) {
	dir := filepath.Join(cfg.Out, nn.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(cfg.Out, nn.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	nats := []string{
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", NATSPort),
		"--nats-cluster-listen", fmt.Sprintf("%s:%d", nn.RouteIP, RoutePort),
		"--nats-routes", strings.Join(routes, ","),
	}
	if cfg.NATSBin != "" {
		// Every NATS server of the cluster, over the route network: the
		// node's client goes to another when one is gone.
		var urls []string
		for _, r := range routes {
			urls = append(urls, strings.Replace(r, fmt.Sprintf(":%d", RoutePort), fmt.Sprintf(":%d", NATSPort), 1))
		}
		nats = []string{"--nats", strings.Join(urls, ",")}
	}
	// The upgrade mode starts the fleet on the older build. Every flag
	// here must be one both builds know.
	bin := cfg.Bin
	if cfg.FromBin != "" {
		bin = cfg.FromBin
	}
	args := []string{"serve",
		"--name", nn.Name, "--data", dir,
		"--listen", nn.HTTPAddr()}
	args = append(args, nats...)
	args = append(args,
		"--nats-secret-file", cfg.secretFile,
		"--lease-ttl", cfg.LeaseTTL.String(), "--claim-ttl", cfg.ClaimTTL.String(),
		"--max-attempts", fmt.Sprint(cfg.MaxAttempts),
		"--history-min-free-bytes", "0",
	)
	if cfg.LogLevel != "" {
		args = append(args, "--log-level", cfg.LogLevel)
	}
	return &Node{NetNode: nn, Dir: dir, bin: bin, args: args, log: log}, nil
}

// SetBin makes the next Start run bin, with extra flags after the
// others: the upgrade of a stopped node.
func (n *Node) SetBin(bin string, extra ...string) {
	n.mu.Lock()
	n.bin = bin
	n.args = append(n.args, extra...)
	n.mu.Unlock()
}

// Start runs the node. `ip netns exec` execs the binary in place, so the
// process is the node itself: signals reach it directly.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.log, "--- fleetfault: starting %s (%s) at %s\n", n.Name, n.bin, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.NS, n.bin}, n.args...)...)
	cmd.Stdout, cmd.Stderr = n.log, n.log
	cmd.Env = nodeEnv()
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd, n.exited, n.paused = cmd, make(chan struct{}), false
	exited := n.exited
	go func() { cmd.Wait(); close(exited) }()
	return nil
}

// nodeEnv is the harness's environment without leasehold's own variables:
// the node is configured by its flags only.
func nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *Node) Kill() error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s: still there 10s after SIGKILL", n.Name)
	}
}

// Pause sends SIGSTOP; Resume sends SIGCONT.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP, true) }

// Resume sends SIGCONT.
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT, false) }

func (n *Node) signal(sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s: not running", n.Name)
	}
	n.paused = paused
	return n.cmd.Process.Signal(sig)
}

// Pid is the node's process id while it runs, else 0.
func (n *Node) Pid() int {
	if !n.Running() {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.Process.Pid
}

// Running reports whether the process is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Close ends the node (Stop) and closes its log.
func (n *Node) Close(grace time.Duration) {
	n.Stop(grace)
	n.log.Close()
}

// Stop ends the node as a service manager would: SIGCONT if it is
// paused, SIGTERM, then SIGKILL after grace. It reports whether the node
// exited on the SIGTERM within grace (true too when it was not running).
func (n *Node) Stop(grace time.Duration) bool {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return true
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return true
	case <-time.After(grace):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
	return false
}

// probe answers the status of GET path at the node, -1 for no answer,
// each on a fresh connection with a short timeout.
func probe(ctx context.Context, hc *http.Client, url string) int {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return NoAnswer
	}
	resp, err := hc.Do(req)
	if err != nil {
		return NoAnswer
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitStatus polls GET path at node until it answers 200, for at most
// within. It returns how long that took.
func (n *Node) waitStatus(ctx context.Context, hc *http.Client, path string, within time.Duration) (time.Duration, error) {
	t0 := time.Now()
	deadline := t0.Add(within)
	last := NoAnswer
	for {
		if last = probe(ctx, hc, n.URL()+path); last == http.StatusOK {
			return time.Since(t0), nil
		}
		if !n.Running() {
			return time.Since(t0), fmt.Errorf("%s exited before %s answered 200", n.Name, path)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Since(t0), fmt.Errorf("%s: %s did not answer 200 within %s (last: %d)", n.Name, path, within, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
