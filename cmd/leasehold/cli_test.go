package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestHelpEverywhere asks every command, admin noun and admin verb for -h:
// each prints its usage and exits 0.
func TestHelpEverywhere(t *testing.T) {
	t.Parallel()
	var cases [][]string
	for _, c := range commands {
		cases = append(cases, []string{c.name, "-h"})
		for _, w := range c.words {
			if c.name != "completion" {
				cases = append(cases, []string{c.name, w, "-h"})
			}
		}
	}
	for _, v := range adminVerbs {
		cases = append(cases, []string{"admin", v.noun, "-h"})
		if v.verb != "" {
			cases = append(cases, []string{"admin", v.noun, v.verb, "--help"})
		}
	}
	for _, args := range cases {
		var out bytes.Buffer
		err := run(context.Background(), args, &out, &out)
		if code := exitCode(err, &out); code != 0 || !strings.Contains(out.String(), "Usage") {
			t.Errorf("%q: exit %d, output %q", args, code, out.String())
		}
	}
}

func TestServeHelpNamesEveryVariable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	m := NewMain(&out, &out)
	if err := m.ParseFlags([]string{"-h"}); exitCode(err, &out) != 0 {
		t.Fatalf("serve -h: %v", err)
	}
	for _, v := range []string{"LEASEHOLD_DATA", "LEASEHOLD_LISTEN", "LEASEHOLD_NATS_SECRET_FILE", "LEASEHOLD_CLAIM_TTL", "LEASEHOLD_SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(out.String(), v) {
			t.Errorf("serve -h does not name %s", v)
		}
	}
	if strings.Contains(out.String(), "\nOther:") {
		t.Errorf("serve -h has flags in no group:\n%s", out.String()[strings.Index(out.String(), "\nOther:"):])
	}
}

func TestHealthcheck(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	var out bytes.Buffer
	if err := runHealthcheck(context.Background(), []string{"--url", n.URL}, &out, &out); err != nil {
		t.Fatalf("healthcheck of a ready node: %v", err)
	}
	n.Stop()
	err := runHealthcheck(context.Background(), []string{"--url", n.URL, "--timeout", "2s"}, &out, &out)
	if code := exitCode(err, &out); code == 0 || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("healthcheck of a stopped node: exit %d, %v", code, err)
	}
	t.Setenv("LEASEHOLD_URL", "")
	t.Setenv("LEASEHOLD_LISTEN", "0.0.0.0:9")
	if got := localURL(); got != "http://127.0.0.1:9" {
		t.Errorf("localURL from LEASEHOLD_LISTEN=0.0.0.0:9: %s", got)
	}
}

func TestListenURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"0.0.0.0:8080":   "http://127.0.0.1:8080",
		"[::]:8080":      "http://127.0.0.1:8080",
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"10.1.2.3:80":    "http://10.1.2.3:80",
		"[::1]:8080":     "http://[::1]:8080",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := listenURL(a); got != want {
			t.Errorf("listenURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

func TestOutputFlag(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.out")
	if out := admin(t, n, "groups", "list", "--output", "json"); !strings.HasPrefix(strings.TrimSpace(out), "[") {
		t.Errorf("--output json: %q", out)
	}
	if out := admin(t, n, "--output", "table", "groups", "list"); !strings.HasPrefix(out, "ID") {
		t.Errorf("--output table: %q", out)
	}
	if _, err := operatorRun(t, n, nil, "groups", "list", "--output", "yaml"); !isUsage(err) {
		t.Errorf("--output yaml: %v, want a usage error", err)
	}
}

// TestInterruptExitCode runs the real binary's admin wait and stops it
// with SIGINT, as Ctrl-C does: exit code 130.
func TestInterruptExitCode(t *testing.T) {
	t.Parallel()
	bin := leaseholdBinary(t)
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.wait")
	admin(t, n, "groups", "tail", "alt.wait", "100")
	cmd := exec.Command(bin, "admin", "--url", n.URL, "--token", n.AdminToken, "wait", "--every", "20ms")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if poll.Wait(30*time.Second, poll.Every, func() error {
		if !strings.Contains(stderr.String(), "waiting:") {
			return errors.New("not yet")
		}
		return nil
	}) != nil {
		cmd.Process.Kill()
		t.Fatalf("admin wait never waited: %q", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("admin wait after SIGINT: exit %d (%v), want 130; stderr %q", code, err, stderr.String())
	}
}
