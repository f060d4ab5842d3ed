package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServe runs the real Main on :0, talks to it, and stops it the way
// SIGTERM does (its context ends).
func TestServe(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	m := NewMain(io.Discard, &stderr) // read only after Run returns
	if err := m.ParseFlags([]string{"--data", dir, "--listen", "127.0.0.1:0", "--lease-ttl", "5s"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-done:
		t.Fatalf("Run ended at start: %v", err)
	}
	url := "http://" + m.Addr().String()
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
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(stderr.String(), "catalog flushed and closed") {
		t.Fatalf("no clean shutdown logged:\n%s", stderr.String())
	}
}

// TestCommandLine: bad input is one line and exit code 2; nothing starts.
func TestCommandLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o600)
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
