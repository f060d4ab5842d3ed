package main

import (
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

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestServeNATSClientFlags: the credentials of an external NATS are taken
// from files, one way at a time, only with an external NATS, and any of
// them is the secret rule's credential; the copies are 0-3.
func TestServeNATSClientFlags(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte("pass-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ext := []string{"--nats", "nats://10.0.0.1:4222,nats://10.0.0.2:4222"}
	for _, tc := range []struct {
		name string
		args []string
		msg  string // "" when the flags are taken
	}{
		{"UserPassword", append(ext, "--nats-user", "leasehold", "--nats-password-file", pw), ""},
		{"Creds", append(ext, "--nats-creds-file", pw, "--nats-replicas", "3"), ""},
		{"CAOnly", append(ext, "--nats-creds-file", pw, "--nats-tls-ca", natstest.MakeCerts(t, "nats-ca").CA), ""},
		{"CAOnlyEmbedded", []string{"--nats-tls-ca", natstest.MakeCerts(t, "nats-ca").CA}, "needs all of"},
		{"NoCredentials", ext, "--nats-secret-file"},
		{"UserWithoutPassword", append(ext, "--nats-user", "leasehold"), "go together"},
		{"TwoWays", append(ext, "--nats-nkey-file", pw, "--nats-creds-file", pw), "give one of"},
		{"MissingFile", append(ext, "--nats-creds-file", filepath.Join(dir, "none")), "--nats-creds-file"},
		{"Embedded", []string{"--nats-creds-file", pw}, "external NATS"},
		{"Replicas", append(ext, "--nats-creds-file", pw, "--nats-replicas", "4"), "--nats-replicas 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMain(io.Discard, io.Discard)
			err := m.ParseFlags(append([]string{"--data", filepath.Join(t.TempDir(), "data")}, tc.args...))
			switch {
			case tc.msg == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)):
				t.Fatalf("ParseFlags = %v; want an error naming %q", err, tc.msg)
			}
		})
	}
}

// TestReadyzHidesNATSURL: a node joining an external NATS it cannot reach
// answers /readyz (no token asked) 503 saying what it waits for, with the
// NATS URL, its address and the password in it cut to "nats://…" (the
// second review's N11); its admin API answers meanwhile.
func TestReadyzHidesNATSURL(t *testing.T) {
	port := natstest.FreePort(t) // nothing listens there
	data := t.TempDir()
	n := serveNodeWith(t, nil, "--data", data, "--name", "rz", "--nats-insecure",
		"--nats", fmt.Sprintf("nats://lhuser:lhpass-0123456789@127.0.0.1:%d", port))
	const want = "joining the fleet as rz: waiting for NATS at nats://…: no routes"
	var body struct{ Status, Reason string }
	poll.Until(t, 20*time.Second, "/readyz to say the node waits for NATS", func() error {
		resp, err := http.Get(n.url + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body.Reason, "NATS at") {
			return fmt.Errorf("%d %s", resp.StatusCode, raw)
		}
		return nil
	})
	if body.Status != "unavailable" || body.Reason != want {
		t.Fatalf("/readyz: %+v, want status unavailable and reason %q", body, want)
	}
	if code, b := adminCall(t, n.url, data, "GET", "/api/v1/nodes", ""); code != http.StatusOK {
		t.Fatalf("the admin API while joining: %d %s", code, b)
	}
	// The log names the NATS it waits for, its credentials hidden: the
	// join's "still waiting" line (every 10 s) printed them whole.
	poll.Until(t, 30*time.Second, "the join's still-waiting line", func() error {
		if !strings.Contains(n.log.String(), "still waiting") {
			return errors.New("not logged yet")
		}
		return nil
	})
	if log := n.log.String(); strings.Contains(log, "lhpass") || strings.Contains(log, "lhuser") || !strings.Contains(log, "nats://***@127.0.0.1:") {
		t.Fatalf("the log shows the NATS URL's credentials (or not the URL hidden):\n%s", log)
	}
}
