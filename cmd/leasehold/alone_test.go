package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// servedNode is a node run in the test's process by Main.Run, as
// `leasehold serve` runs one: its flags parsed, its parts assembled by
// node.Assemble, its end the end of Run's context. It is the command's
// tests' one in-process node: they test serve itself (its flags, its
// start and its shutdown), which nodetest.Start, assembling a node from a
// config, goes around; a test of the built binary's process runs a
// procNode.
type servedNode struct {
	m    *Main
	log  *syncbuf.Buffer
	url  string // http:// (also under TLS: a test that serves TLS asks m.Addr)
	done chan error
	end  context.CancelFunc
}

// serveNode runs Main with args (after --listen 127.0.0.1:0 and
// --log-level debug, which args may override) until the test ends or
// stop, and returns it once it serves.
func serveNode(t *testing.T, args ...string) *servedNode {
	t.Helper()
	return serveNodeWith(t, nil, args...)
}

// serveNodeWith is serveNode with prepare called on Main once its flags
// are parsed, to set what no flag sets (how often it looks at its
// certificate files, say).
func serveNodeWith(t *testing.T, prepare func(*Main), args ...string) *servedNode {
	t.Helper()
	n := &servedNode{log: &syncbuf.Buffer{}, done: make(chan error, 1)}
	n.m = newTestMain(t, io.Discard, n.log)
	if err := n.m.ParseFlags(append([]string{"--listen", "127.0.0.1:0", "--log-level", "debug"}, args...)); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(n.m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.end = cancel
	t.Cleanup(func() {
		if err := n.stop(); err != nil {
			t.Errorf("Run after shutdown: %v\n%s", err, n.log.String())
		}
	})
	go func() { n.done <- n.m.Run(ctx) }()
	select {
	case <-n.m.Ready():
	case err := <-n.done:
		n.done <- nil // the cleanup's stop returns at once
		t.Fatalf("Run ended at start: %v\n%s", err, n.log.String())
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not serve within 60s")
	}
	n.url = "http://" + n.m.Addr().String()
	return n
}

// stop ends the node as SIGTERM does and returns how Run ended; a second
// stop returns nil at once.
func (n *servedNode) stop() error {
	n.end()
	select {
	case err := <-n.done:
		n.done <- nil
		return err
	case <-time.After(60 * time.Second):
		return errors.New("the node did not stop within 60s of its context's end")
	}
}

// ended says whether Run has returned, and with what, without waiting.
func (n *servedNode) ended() (bool, error) {
	select {
	case err := <-n.done:
		n.done <- err
		return true, err
	default:
		return false, nil
	}
}

// adminToken is the admin token the node made in its data dir.
func (n *servedNode) adminToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.m.DataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// natsSecret writes a fleet's NATS secret into a file and returns its path.
func natsSecret(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pairArgs are the flags of one node of a two-node fleet on loopback:
// its data dir and name, the fleet's secret file, its route port and its
// peer's.
func pairArgs(secret, data, name string, own, other int) []string {
	return []string{"--data", data, "--name", name, "--nats-secret-file", secret, "--claim-ttl", "4s", "--nats-listen", "127.0.0.1:0",
		"--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", own), "--nats-routes", fmt.Sprintf("nats://127.0.0.1:%d", other)}
}

// adminCall sends an admin request to the node whose data dir is data and
// returns the status and body.
func adminCall(t *testing.T, url, data, method, path, body string) (int, []byte) {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAloneThenFleet: serve's default is a node alone: no NATS server,
// nothing under <data>/nats, no outbox row per write, peer sync off in
// /api/v1/peers. Restarted with a fleet's flags beside a second node, it
// joins, and its catalog made alone reaches the peer: the peer shows its
// group as node-a's, with its ranges.
func TestAloneThenFleet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a two-node fleet takes a while")
	}
	dataA, dataB := t.TempDir(), t.TempDir()
	a := serveNode(t, "--data", dataA, "--name", "node-a")
	if code, body := adminCall(t, a.url, dataA, "PUT", "/api/v1/groups/made-alone", `{"range_size":10,"start":1}`); code != 201 {
		t.Fatalf("create group: %d %s", code, body)
	}
	if code, body := adminCall(t, a.url, dataA, "POST", "/api/v1/groups/made-alone/tail", `{"high":100}`); code != 200 {
		t.Fatalf("plan tail: %d %s", code, body)
	}
	code, body := adminCall(t, a.url, dataA, "GET", "/api/v1/peers", "")
	var status leasehold.FleetStatus
	if code != 200 || json.Unmarshal(body, &status) != nil || status.Enabled {
		t.Fatalf("peers of a node started with defaults: %d %s; want peer sync off", code, body)
	}
	if _, err := os.Stat(filepath.Join(dataA, "nats")); !os.IsNotExist(err) {
		t.Fatalf("a node alone made <data>/nats (stat: %v): it ran NATS", err)
	}
	a.stop()
	if !strings.Contains(a.log.String(), "nats=off") {
		t.Fatalf("the serving line of a node alone does not say nats=off:\n%s", a.log.String())
	}

	secret := natsSecret(t, "alone-then-fleet-secret-0123456789")
	routes := freePorts(t, 2)
	b := serveNode(t, pairArgs(secret, dataB, "node-b", routes[1], routes[0])...)
	a = serveNode(t, pairArgs(secret, dataA, "node-a", routes[0], routes[1])...)
	pollReady(t, a.url, 90*time.Second)
	pollReady(t, b.url, 90*time.Second)

	if err := poll.Wait(60*time.Second, 100*time.Millisecond, func() error {
		code, body := adminCall(t, b.url, dataB, "GET", "/api/v1/groups/made-alone", "")
		var g leasehold.GroupDetail
		if code == 200 && json.Unmarshal(body, &g) == nil && g.Peer != nil && g.Peer.Owner == "node-a" && g.Ranges["planned"] == 10 {
			return nil
		}
		return fmt.Errorf("%d %s", code, body)
	}); err != nil {
		t.Fatalf("node-b never showed node-a's group made alone: last %v\nnode-a's log:\n%s", err, a.log.String())
	}
}

// TestSettleNATS: which flags make serve run peer sync. None runs the node
// alone; any flag that only makes sense for a fleet runs the embedded
// server (on 127.0.0.1:4222 unless --nats-listen says otherwise); --nats
// off and external URLs are kept as given.
func TestSettleNATS(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "nats.secret")
	if err := os.WriteFile(secret, []byte("settle-nats-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		args         []string
		nats, listen string
	}{
		{"Defaults", nil, "off", ""},
		{"Off", []string{"--nats", "off"}, "off", ""},
		{"Listen", []string{"--nats-listen", "127.0.0.1:0"}, "", "127.0.0.1:0"},
		{"Secret", []string{"--nats-secret-file", secret}, "", defaultNATSListen},
		{"Routes", []string{"--nats-secret-file", secret, "--nats-cluster-listen", "127.0.0.1:6222", "--nats-routes", "nats://127.0.0.1:6223"}, "", defaultNATSListen},
		{"External", []string{"--nats", "nats://10.0.0.2:4222", "--nats-secret-file", secret}, "nats://10.0.0.2:4222", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewMain(io.Discard, io.Discard)
			if err := m.ParseFlags(append([]string{"--data", t.TempDir()}, c.args...)); err != nil {
				t.Fatal(err)
			}
			if m.NATS != c.nats || m.NATSListen != c.listen {
				t.Fatalf("--nats %q, --nats-listen %q; want %q, %q", m.NATS, m.NATSListen, c.nats, c.listen)
			}
		})
	}
}
