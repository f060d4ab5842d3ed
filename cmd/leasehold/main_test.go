package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
)

// newTestMain is NewMain for a test that serves: its API answers are
// recorded, to be checked against web/openapi.json as Start's are.
func newTestMain(t *testing.T, stdout, stderr io.Writer) *Main {
	m := NewMain(stdout, stderr)
	m.wrapHTTP = nodetest.Recording(t)
	return m
}

// TestServe runs the real Main on :0, talks to it, and stops it the way
// SIGTERM does (its context ends).
func TestServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := serveNode(t, "--data", dir, "--lease-ttl", "5s", "--nats", "off")
	url := n.url
	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", url+"/api/v1/groups/g", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create group: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := n.stop(); err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}
	if !strings.Contains(n.log.String(), "catalog flushed and closed") {
		t.Fatalf("no clean shutdown logged:\n%s", n.log.String())
	}
}

// TestServeFleet runs Main with the embedded NATS server on a free port,
// asking the fleet's secret of its clients: it serves, answers that it
// runs in a fleet, and leaves the fleet and stops cleanly when its context
// ends.
func TestServeFleet(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "nats.secret")
	if err := os.WriteFile(secret, []byte("  fleet-secret-0123456789\nsecond line ignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := serveNode(t, "--data", dir, "--name", "node-a", "--nats-listen", "127.0.0.1:0", "--claim-ttl", "2s", "--nats-secret-file", secret)
	url := n.url
	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	// The fleet is joined in the background; until then the node is not
	// ready (503) and says what it waits for.
	pollReady(t, url, 90*time.Second)
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", url+"/api/v1/peers", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("peers: %v %v", resp, err)
	}
	var fleet leasehold.FleetStatus
	err = json.NewDecoder(resp.Body).Decode(&fleet)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !fleet.Enabled || fleet.Name != "node-a" {
		t.Fatalf("peers answered %+v; want peer sync enabled as node-a", fleet)
	}
	resp, err = http.Get(url + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "leasehold_peer_connected 1") {
		t.Fatalf("metrics lack the fleet's leasehold_peer_connected 1:\n%s", body)
	}
	if _, err := os.Stat(filepath.Join(dir, "nats", "jetstream")); err != nil {
		t.Fatalf("JetStream not kept under <data>/nats: %v", err)
	}
	if err := n.stop(); err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}
	log := n.log.String()
	natsURL := regexp.MustCompile(`nats=nats://127\.0\.0\.1:(\d+)`).FindStringSubmatch(log)
	if natsURL == nil || natsURL[1] == "4222" || natsURL[1] == "0" {
		t.Fatalf("serving line does not name the NATS server on a free port:\n%s", log)
	}
	for _, want := range []string{"catalog flushed and closed", "nats-server"} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestCommandLine: bad input is one line and exit code 2; nothing starts.
func TestCommandLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o600)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{"NoCommand", nil, nil, 2, "no command"},
		{"UnknownCommand", []string{"frobnicate"}, nil, 2, "unknown command"},
		{"BadFlag", []string{"serve", "--lease-ttl", "soon"}, nil, 2, "lease-ttl"},
		{"UnknownFlag", []string{"serve", "--colour"}, nil, 2, "colour"},
		{"BadEnv", []string{"serve"}, map[string]string{"LEASEHOLD_MAX_ATTEMPTS": "many"}, 2, "LEASEHOLD_MAX_ATTEMPTS"},
		{"BadSize", []string{"serve", "--snapshot-max-bytes", "lots"}, nil, 2, "snapshot-max-bytes"},
		{"DataDirIsAFile", []string{"serve", "--data", file, "--listen", "127.0.0.1:0"}, nil, 2, "not usable"},
		{"BadListen", []string{"serve", "--data", t.TempDir(), "--listen", "nowhere:-1"}, nil, 2, "listen"},
		{"RoutesWithoutCluster", []string{"serve", "--nats-routes", "nats://127.0.0.1:6222"}, nil, 2, "--nats-cluster-listen"},
		{"BadRoute", []string{"serve", "--nats-cluster-listen", "127.0.0.1:0", "--nats-routes", "10.0.0.2"}, nil, 2, "--nats-routes"},
		{"BadName", []string{"serve", "--name", "not a name"}, nil, 2, "--name"},
		{"BadEnvName", []string{"serve"}, map[string]string{"LEASEHOLD_NAME": "-x"}, 2, "--name"},
		{"ClaimTTLZero", []string{"serve", "--claim-ttl", "0"}, nil, 2, "--claim-ttl"},
		{"BadNATS", []string{"serve", "--nats", "localhost:4222"}, nil, 2, "--nats"},
		{"ClusterWithExternalNATS", []string{"serve", "--nats", "nats://10.0.0.2:4222", "--nats-cluster-listen", "127.0.0.1:6222"}, nil, 2, "--nats-cluster-listen"},
		{"NATSListenInUse", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", busy}, nil, 2, "--nats-listen " + busy},
		{"SecretAlone", []string{"serve", "--nats", "off", "--nats-secret-file", file}, nil, 2, "--nats-secret-file"},
		{"SecretMissing", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
			"--nats-secret-file", filepath.Join(t.TempDir(), "none")}, nil, 2, "--nats-secret-file"},
		{"SecretShort", []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
			"--nats-secret-file", file}, nil, 2, "at least 16"},
		// NATS reachable beyond this host is never open by default.
		{"ClusterWithoutSecret", []string{"serve", "--nats-cluster-listen", "127.0.0.1:0"}, nil, 2, "needs --nats-secret-file"},
		{"RoutesWithoutSecret", []string{"serve", "--nats-cluster-listen", "127.0.0.1:0", "--nats-routes", "nats://127.0.0.1:6222"}, nil, 2, "needs --nats-secret-file"},
		{"OpenListenWithoutSecret", []string{"serve", "--nats-listen", "0.0.0.0:4222"}, nil, 2, "needs --nats-secret-file"},
		{"OpenListenFromEnv", []string{"serve"}, map[string]string{"LEASEHOLD_NATS_LISTEN": "0.0.0.0:4222"}, 2, "needs --nats-secret-file"},
		{"ExternalWithoutSecret", []string{"serve", "--nats", "nats://10.0.0.2:4222"}, nil, 2, "needs --nats-secret-file"},
		// Opted out, the check passes and the next one (the data dir) speaks.
		{"InsecureOptOut", []string{"serve", "--nats-insecure", "--nats-cluster-listen", "127.0.0.1:0", "--data", file}, nil, 2, "not usable"},
		{"BadLogFormat", []string{"serve", "--log-format", "yaml"}, nil, 2, "--log-format"},
		{"BadEnvLogFormat", []string{"serve"}, map[string]string{"LEASEHOLD_LOG_FORMAT": "logfmt"}, 2, "--log-format"},
		{"Version", []string{"version"}, nil, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := exitCode(run(context.Background(), tc.args, &stdout, &stderr), &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, stderr.String())
			}
			last := strings.TrimSpace(stderr.String())
			if i := strings.LastIndex(last, "\n"); i >= 0 {
				last = last[i+1:]
			}
			if tc.msg != "" && !strings.Contains(last, tc.msg) {
				t.Fatalf("last line %q does not mention %q", last, tc.msg)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "64GiB": 64 << 30, "512MiB": 512 << 20, "1GB": 1e9, "2K": 2048} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1.5GiB", "99999999999TiB"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) accepted", bad)
		}
	}
}

// pollReady polls url's /readyz until it answers 200, failing t after d.
func pollReady(t *testing.T, url string, d time.Duration) {
	t.Helper()
	poll.Until(t, d, "readyz to answer 200", func() error { return readyz(url) })
}

// readyz asks url's /readyz once: nil when it answers 200, else why not.
func readyz(url string) error {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("readyz %d: %s", resp.StatusCode, body)
	}
	return nil
}
