package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// nodeProcess is the real leasehold binary serving one data directory on
// one port, started again on both after every kill.
type nodeProcess struct {
	bin, dir, addr string
	ttl            time.Duration
	maxAttempts    int64
	log            *os.File
	cmd            *exec.Cmd
	exited         chan struct{}
}

func newNodeProcess(bin, dir string, ttl time.Duration, maxAttempts int64) (*nodeProcess, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	log, err := os.OpenFile(filepath.Join(filepath.Dir(dir), "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &nodeProcess{bin: bin, dir: dir, addr: addr, ttl: ttl, maxAttempts: maxAttempts, log: log}, nil
}

func (n *nodeProcess) url() string { return "http://" + n.addr }

// start runs `leasehold serve` and waits until /readyz answers 200. It
// returns how long that took from the exec: the restart time.
func (n *nodeProcess) start(ctx context.Context) (time.Duration, error) {
	fmt.Fprintf(n.log, "--- crashtest: starting the node at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(n.bin, "serve", "--nats", "off", "--data", n.dir, "--listen", n.addr,
		"--lease-ttl", n.ttl.String(), "--max-attempts", fmt.Sprint(n.maxAttempts),
		"--history-min-free-bytes", "0", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = n.log, n.log
	// Each probe on a fresh connection: a pooled one may be the dead node's.
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n.cmd = cmd
	n.exited = make(chan struct{})
	go func() { cmd.Wait(); close(n.exited) }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		resp, err := probe.Get(n.url() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(t0), nil
			}
		}
		select {
		case <-n.exited:
			return 0, fmt.Errorf("the node exited at start (%v); see %s", cmd.ProcessState, n.log.Name())
		case <-deadline.C:
			return 0, fmt.Errorf("the node was not ready within 30s; see %s", n.log.Name())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits until the process is gone, so nothing it
// had in flight can land afterwards.
func (n *nodeProcess) kill() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd = nil
}

func (n *nodeProcess) adminToken() (string, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "admin.token"))
	return strings.TrimSpace(string(b)), err
}

func (n *nodeProcess) close() {
	n.kill()
	n.log.Close()
}
