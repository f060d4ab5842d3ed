package fleetfault

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// newNATS is, in the external mode, the NATS server of nn's namespace: a
// natsd on the route network (clients at NATSPort, routes at RoutePort),
// its store and log beside the node's, started again on the same store
// after a kill.
func newNATS(cfg *Config, nn NetNode, routes []string) (*Node, error) {
	name := "nats-" + nn.Name[len(nn.Name)-1:]
	dir := filepath.Join(cfg.Out, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(cfg.Out, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	nn.Name = name
	args := []string{"-name", name, "-dir", dir,
		"-listen", fmt.Sprintf("%s:%d", nn.RouteIP, NATSPort),
		"-cluster", fmt.Sprintf("%s:%d", nn.RouteIP, RoutePort),
		"-routes", strings.Join(routes, ","), "-token-file", cfg.secretFile}
	return &Node{NetNode: nn, Dir: dir, bin: cfg.NATSBin, args: args, log: log}, nil
}

// startNATS starts the external NATS servers together (a JetStream
// cluster needs its quorum to elect its meta leader) and waits until
// each takes connections; nothing in the embedded mode.
func (r *run) startNATS(ctx context.Context) error {
	if len(r.nats) == 0 {
		return nil
	}
	t0 := time.Now()
	for _, n := range r.nats {
		if err := n.Start(); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(r.nats))
	for _, n := range r.nats {
		wg.Go(func() { errs <- r.waitNATS(ctx, n, 30*time.Second) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	r.logf("external NATS: nats-a, nats-b, nats-c take connections %.1fs after their start", time.Since(t0).Seconds())
	return nil
}

// waitNATS waits until n takes TCP connections on its client port, from
// its own namespace (the hub has no address on the route network).
func (r *run) waitNATS(ctx context.Context, n *Node, within time.Duration) error {
	deadline := time.Now().Add(within)
	addr := net.JoinHostPort(n.RouteIP, fmt.Sprint(NATSPort))
	for {
		err := inNS(n.NS, func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		if !n.Running() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("external NATS %s at %s: no connection within %s: %v", n.Name, addr, within, err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// natsFault does to node n's namespace's NATS server what the fault does
// to n; nothing in the embedded mode.
func (r *run) natsFault(n *Node, do func(*Node) error) error {
	if s := r.nats[n.Name]; s != nil {
		return do(s)
	}
	return nil
}

// andNATS names, for the log of a fault, the NATS server it hits too.
func (r *run) andNATS(n *Node) string {
	if s := r.nats[n.Name]; s != nil {
		return " and " + s.Name
	}
	return ""
}
