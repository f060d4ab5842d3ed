package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// TestUnauthenticatedFloodLocksNoWorkerOut is the front door's lock-out:
// a node capped at 64 connections, 8 an address, is filled by 8 source
// addresses each holding 8 connections that made one unauthenticated
// request (as /healthz probes do) and then sit idle. A worker with a
// valid token that dials afresh is still served, and its own
// keep-alive connection, authenticated before the flood, is never
// closed to make room; a silent connection is closed after the short
// unauthenticated idle timeout while the worker's stays.
func TestUnauthenticatedFloodLocksNoWorkerOut(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	n := serveNode(t, "--data", data, "--nats", "off", "--max-connections", "64", "--max-connections-per-remote", "8",
		"--unauthenticated-idle-timeout", "2s")
	status, body := adminCall(t, n.url, data, "POST", "/api/v1/nodes", `{"name":"w1"}`)
	if status != http.StatusCreated {
		t.Fatalf("register w1: %d %s", status, body)
	}
	var reg struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &reg); err != nil || reg.Token == "" {
		t.Fatalf("register w1: %s (%v)", body, err)
	}
	// The worker's keep-alive connection, from its own address.
	worker := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext}}
	reused := func() (bool, error) {
		var got bool
		req, _ := http.NewRequest("GET", n.url+"/api/v1/watermarks", nil)
		req.Header.Set("Authorization", "Bearer "+reg.Token)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i.Reused }}))
		resp, err := worker.Do(req)
		if err != nil {
			return false, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("GET /watermarks: %d", resp.StatusCode)
		}
		return got, nil
	}
	if _, err := reused(); err != nil {
		t.Fatal(err)
	}

	// The flood: 8 addresses × 8 connections, each served one /healthz
	// (the last few find the node full: the worker holds two places).
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	for a := 2; a < 10; a++ {
		for range 8 {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(a))}}
			c, err := d.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			flood = append(flood, c)
			healthz(c)
		}
	}

	// A worker dialing afresh gets in.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("POST", n.url+"/api/v1/leases", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+reg.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := fresh.Do(req)
	if err != nil {
		t.Fatalf("a worker with a valid token, dialing afresh while the flood holds every connection: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /leases from a fresh connection: %d", resp.StatusCode)
	}
	// The worker's older connection is still its own.
	if again, err := reused(); err != nil || !again {
		t.Fatalf("the worker's authenticated keep-alive connection after the flood: reused %v, %v", again, err)
	}

	// A connection that showed no token and then says nothing is closed
	// by the node (here within 2 s; the test waits at most 60 s, past the
	// 10 s header and 120 s idle bounds an authenticated client has).
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 20)}}
	silent, err := d.Dial("tcp", strings.TrimPrefix(n.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if err := healthz(silent); err != nil {
		t.Fatal(err)
	}
	silent.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("an idle unauthenticated connection: read %v, want it closed by the node", err)
	}
	// ... and the worker's, idle as long, is not.
	if again, err := reused(); err != nil || !again {
		t.Fatalf("the worker's authenticated connection after an unauthenticated one was closed for idling: reused %v, %v", again, err)
	}
	if got := metricValue(t, n.url, `leasehold_connections_refused_total{reason="unauthenticated"}`); got < 1 {
		t.Errorf("unauthenticated connections closed to make room: %v, want at least 1", got)
	}
}

// healthz sends GET /healthz on c, keep-alive, and reads the answer.
func healthz(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: leasehold\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %d", resp.StatusCode)
	}
	return nil
}

// metricValue is one series' value at url's /metrics (a fresh
// connection), -1 when it is not served.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// TestSIGHUPNeverStopsANode: a node serving plain HTTP takes SIGHUP,
// says there is nothing to reload, and goes on serving; SIGTERM still
// stops it cleanly.
func TestSIGHUPNeverStopsANode(t *testing.T) {
	t.Parallel()
	p := startProcNode(t, "sighup", filepath.Join(t.TempDir(), "data"), "--nats", "off")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the node to log the SIGHUP", func() error {
		select {
		case <-p.exited:
			t.Fatalf("SIGHUP stopped the node:\n%s", p.log.String())
		default:
		}
		if !strings.Contains(p.log.String(), "SIGHUP: nothing to reload") {
			return errors.New("no line about the SIGHUP yet")
		}
		return nil
	})
	resp, err := http.Get(p.url + "/healthz")
	if err != nil {
		t.Fatalf("healthz after SIGHUP: %v\n%s", err, p.log.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after SIGHUP: %d", resp.StatusCode)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("SIGTERM did not stop the node within 30 s")
	}
	if !strings.Contains(p.log.String(), "catalog flushed and closed") {
		t.Fatalf("after SIGHUP, SIGTERM did not stop the node cleanly:\n%s", p.log.String())
	}
}

// TestWarnsOfClearTraffic: a node says once at start, as a WARN, that it
// serves plain HTTP on a non-loopback address, or runs fleet routes in
// clear on one; on loopback, or under TLS, it says neither.
func TestWarnsOfClearTraffic(t *testing.T) {
	t.Parallel()
	const plainHTTP, clearNATS = "serving plain HTTP on a non-loopback address", "fleet NATS in clear on a non-loopback address"
	warns := func(n *servedNode, what string) int {
		return strings.Count(n.log.String(), "level=WARN msg=\""+what)
	}
	open := serveNode(t, "--data", filepath.Join(t.TempDir(), "data"), "--nats", "off", "--listen", "0.0.0.0:0")
	if got := warns(open, plainHTTP); got != 1 {
		t.Errorf("plain HTTP on 0.0.0.0: %d warnings, want 1:\n%s", got, open.log.String())
	}
	free, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	cluster := free.Addr().String()
	free.Close()
	fleet := serveNode(t, "--data", filepath.Join(t.TempDir(), "data"), "--name", "clear", "--nats-secret-file", natsSecret(t, "a-fleet-secret-0123456789"),
		"--nats-listen", "127.0.0.1:0", "--nats-cluster-listen", cluster)
	if got := warns(fleet, clearNATS); got != 1 || !strings.Contains(fleet.log.String(), "--nats-cluster-listen "+cluster) {
		t.Errorf("routes in clear on 0.0.0.0: %d warnings, want 1 naming the route address:\n%s", got, fleet.log.String())
	}
	if got := warns(fleet, plainHTTP); got != 0 {
		t.Errorf("plain HTTP on 127.0.0.1: %d warnings, want none:\n%s", got, fleet.log.String())
	}
	quietData := filepath.Join(t.TempDir(), "data")
	quiet := serveNode(t, "--data", quietData, "--nats", "off")
	if status, body := adminCall(t, quiet.url, quietData, "GET", "/api/v1/groups", ""); status != http.StatusOK {
		t.Fatalf("the quiet node does not serve: %d %s", status, body)
	}
	if warns(quiet, plainHTTP)+warns(quiet, clearNATS) != 0 {
		t.Errorf("a node on loopback warned of clear traffic:\n%s", quiet.log.String())
	}
}
