package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestFleetSecretRotation: the fleet secret of three real nodes is rolled
// while a worker writes at one of them, without a restart: first every
// node, one at a time, is given "old, then new" (presents the old secret,
// accepts both) and a SIGHUP, then "new" alone and a SIGHUP. The worker's
// lease is never lost (no node's claims lapsed: a write refused for
// longer than a claim TTL would have cost it its claim) and its calls
// all end acknowledged; afterwards NATS refuses the old secret and takes
// the new one at every node, and a node restarted with the new secret
// alone rejoins the fleet.
func TestFleetSecretRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node fleet of processes takes a while")
	}
	const (
		oldSecret = "rotate-old-secret-0123456789abcdef"
		newSecret = "rotate-new-secret-fedcba9876543210"
		claimTTL  = 6 * time.Second
	)
	dir := t.TempDir()
	files := make([]string, 3)
	for i := range files {
		files[i] = filepath.Join(dir, fmt.Sprintf("secret-%d", i))
		if err := os.WriteFile(files[i], []byte(oldSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nodes := startProcFleet(t, []string{"rot-a", "rot-b", "rot-c"}, func(i int) []string {
		return []string{"--nats-secret-file", files[i], "--claim-ttl", claimTTL.String(), "--lease-ttl", "4s"}
	})
	a := nodes[0]
	fleet := procMembers(nodes)
	// Ready is each node alone; the worker's writes at rot-a need its
	// peers (the stream's copies) and the roll is of routes up.
	waitFleetFormed(t, formedWithin(claimTTL), fleet)
	ctx := context.Background()
	w, err := a.admin.RegisterNode(ctx, client.NodeSpec{Name: "rot-w"})
	if err != nil {
		t.Fatal(err)
	}
	rs := int64(10)
	const group = "alt.rotate.secret"
	if _, _, err := a.admin.PutGroup(ctx, group, client.GroupSpec{RangeSize: &rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.admin.PlanTail(ctx, group, 1_000_000); err != nil {
		t.Fatal(err)
	}

	// The worker: one lease at rot-a, a range finished after another, each
	// call tried again while unanswered or 503; a 409 is a lease lost.
	wc := client.New(a.url, w.Token)
	var g *client.Grant
	untilFleet(t, stepWithin(claimTTL), "a lease at rot-a", fleet, func() error {
		if g, err = wc.Lease(ctx); err != nil {
			return err
		}
		if g == nil {
			return errors.New("nothing leased yet")
		}
		return nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	var (
		mu       sync.Mutex
		finished int
		werr     error
	)
	written := func() int { mu.Lock(); defer mu.Unlock(); return finished }
	var wg sync.WaitGroup
	wg.Go(func() {
		call := func(fn func(ctx context.Context) error) error {
			for {
				cctx, cancel := context.WithTimeout(wctx, 5*time.Second)
				err := fn(cctx)
				cancel()
				var he *client.HTTPError
				switch {
				case err == nil || wctx.Err() != nil:
					return nil
				case errors.As(err, &he) && he.StatusCode != 503:
					return err
				}
				// A worker's pause before it asks an unavailable node
				// again (load pacing, as client.Worker's back-off): no
				// step of the node's to wait for.
				time.Sleep(100 * time.Millisecond)
			}
		}
		for wctx.Err() == nil {
			var rg *leasehold.Range
			err := call(func(ctx context.Context) error {
				var err error
				rg, err = wc.Next(ctx, g.Group.ID, g.Fence)
				return err
			})
			if err == nil && rg != nil {
				err = call(func(ctx context.Context) error {
					_, err := wc.Finish(ctx, rg.ID, g.Fence, rg.End+1-rg.Next)
					return err
				})
			}
			mu.Lock()
			if err != nil && werr == nil {
				werr = err
			}
			if err == nil && rg != nil {
				finished++
			}
			stop := werr != nil || (err == nil && rg == nil && wctx.Err() == nil)
			mu.Unlock()
			if stop {
				return
			}
		}
	})
	defer func() { stopWorker(); wg.Wait() }()
	// wrote waits for the worker to finish one more range, so each step of
	// the roll happens while it writes.
	wrote := func(what string) {
		t.Helper()
		from := written()
		untilFleet(t, stepWithin(claimTTL), "the worker to write "+what, fleet, func() error {
			mu.Lock()
			defer mu.Unlock()
			if werr != nil {
				t.Fatalf("the worker's call was refused %s: %v\nwhat each node saw:%s", what, werr, fleetSeen(fleet))
			}
			if finished <= from {
				return errors.New("no range finished yet")
			}
			return nil
		})
	}
	wrote("before the roll")

	roll := func(pass, content string) {
		for i, n := range nodes {
			if err := os.WriteFile(files[i], []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			before := strings.Count(n.log.String(), "the fleet secret file reloaded")
			if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			untilFleet(t, stepWithin(claimTTL), n.name+" to reload its secret ("+pass+")", fleet, func() error {
				if strings.Count(n.log.String(), "the fleet secret file reloaded") <= before {
					return errors.New("not reloaded yet")
				}
				return nil
			})
			wrote(fmt.Sprintf("after %s reloaded (%s)", n.name, pass))
		}
	}
	roll("pass 1: old, then new", oldSecret+"\n"+newSecret+"\n")
	roll("pass 2: new", newSecret+"\n")

	for _, n := range nodes {
		url := n.natsURL(t)
		if nc, err := nats.Connect(url, nats.Token(oldSecret), nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Errorf("%s's NATS still takes the old secret after the roll", n.name)
		}
		nc, err := nats.Connect(url, nats.Token(newSecret), nats.MaxReconnects(0))
		if err != nil {
			t.Errorf("%s's NATS refuses the new secret after the roll: %v", n.name, err)
			continue
		}
		nc.Close()
	}

	// A node restarted with the new secret alone routes to its peers with
	// it: it joins, and the fleet serves it.
	c := nodes[2]
	c.restart(t)
	c.waitReady(t, formedWithin(claimTTL))
	waitFleetFormed(t, formedWithin(claimTTL), fleet)
	wrote("after rot-c restarted with the new secret")
	stopWorker()
	wg.Wait()
	if werr != nil {
		t.Fatalf("the worker's call was refused: %v\nwhat each node saw:%s", werr, fleetSeen(fleet))
	}
}

// TestFleetTLSReload: the NATS certificates of three real nodes are
// renewed on disk, each node given a SIGHUP in turn: each node's NATS then
// shows its new certificate to a client, without a restart, and the fleet
// goes on serving (every node ready, a node restarted afterwards joins
// over routes that present the new certificates).
func TestFleetTLSReload(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node fleet of processes takes a while")
	}
	names := []string{"tls-a", "tls-b", "tls-c"}
	certs := natstest.MakeCerts(t, "fleet-ca", "tls-a", "tls-b", "tls-c", "tls-a-renewed", "tls-b-renewed", "tls-c-renewed")
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("tls-reload-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile := func(i int) string { return filepath.Join(dir, names[i]+".pem") }
	keyFile := func(i int) string { return filepath.Join(dir, names[i]+".key") }
	for i, n := range names {
		install(t, certs.Cert[n], certs.Key[n], certFile(i), keyFile(i))
	}
	clientPorts := freePorts(t, 3)
	nodes := startProcFleet(t, names, func(i int) []string {
		return []string{"--nats-secret-file", secret, "--nats-tls-cert", certFile(i), "--nats-tls-key", keyFile(i), "--nats-tls-ca", certs.CA,
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", clientPorts[i])}
	})
	shown := func(i int) string {
		t.Helper()
		pem, err := os.ReadFile(certs.CA)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		pair, err := tls.LoadX509KeyPair(certs.Cert["tls-a"], certs.Key["tls-a"])
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]), nats.Token("tls-reload-secret-0123456789abcdef"), nats.MaxReconnects(0),
			nats.Secure(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}))
		if err != nil {
			t.Fatalf("%s's NATS: %v", names[i], err)
		}
		defer nc.Close()
		st, err := nc.TLSConnectionState()
		if err != nil || len(st.PeerCertificates) == 0 {
			t.Fatalf("%s's NATS showed no certificate: %v", names[i], err)
		}
		return st.PeerCertificates[0].Subject.CommonName
	}
	for i, n := range nodes {
		if got := shown(i); got != names[i] {
			t.Fatalf("%s's NATS shows %q at start", n.name, got)
		}
	}
	for i, n := range nodes {
		install(t, certs.Cert[names[i]+"-renewed"], certs.Key[names[i]+"-renewed"], certFile(i), keyFile(i))
		before := strings.Count(n.log.String(), "the NATS TLS files reloaded")
		if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 30*time.Second, n.name+" to reload its NATS TLS files", func() error {
			if strings.Count(n.log.String(), "the NATS TLS files reloaded") <= before {
				return errors.New("not reloaded yet")
			}
			return nil
		})
		if got := shown(i); got != names[i]+"-renewed" {
			t.Errorf("%s's NATS shows %q after the reload, want its renewed certificate", n.name, got)
		}
	}
	for _, n := range nodes {
		pollReady(t, n.url, 60*time.Second)
	}
	c := nodes[2]
	c.restart(t)
	pollReady(t, c.url, 120*time.Second)
}
