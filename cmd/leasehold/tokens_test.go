package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestServeAdminTokenRefused: an admin token under 16 bytes, however it
// is given, stops serve at the start with one line and exit 2; so do
// both --admin-token and --admin-token-file, a file that is not there,
// and a file in a directory another user owns or every user can write.
func TestServeAdminTokenRefused(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("lha_tooshort\n"), 0o600)
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("lha_long_enough_for_an_admin\n"), 0o600)
	// A token file in a directory another user owns, or every user can
	// write (the second review's N4): that user could have put a token
	// of their choosing there.
	tokenIn := func(mode os.FileMode, uid int) string {
		d := filepath.Join(t.TempDir(), "tokens")
		os.Mkdir(d, mode)
		os.Chmod(d, mode) // past the umask
		f := filepath.Join(d, "admin.token")
		os.WriteFile(f, []byte("lha_long_enough_for_an_admin\n"), 0o600)
		if err := os.Chown(d, uid, -1); err != nil && uid != os.Geteuid() {
			return "" // giving a directory away needs root: the case is skipped
		}
		return f
	}
	othersDir, openDir := tokenIn(0o700, 65534), tokenIn(0o777, os.Geteuid())
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		msg  string
	}{
		{"FlagOneByte", []string{"--admin-token", "x"}, nil, "at least 16"},
		{"EnvShort", nil, map[string]string{"LEASEHOLD_ADMIN_TOKEN": "lha_tooshort"}, "at least 16"},
		{"FileShort", []string{"--admin-token-file", short}, nil, "at least 16"},
		{"FileMissing", []string{"--admin-token-file", filepath.Join(dir, "none")}, nil, "--admin-token-file"},
		{"Both", []string{"--admin-token-file", good, "--admin-token", "lha_long_enough_for_an_admin"}, nil, "not both"},
		{"FileInDirOfAnother", []string{"--admin-token-file", othersDir}, nil, "owned by uid 65534"},
		{"FileInDirOpenToAll", []string{"--admin-token-file", openDir}, nil, "can be written by other users"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if slices.Contains(c.args, "") {
				t.Skip("needs root, to give a directory to another user")
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--nats", "off"}, c.args...)
			var stdout, stderr bytes.Buffer
			// A node that took the token would serve until stopped: give
			// it a while, then stop it (exit 0, and the test fails).
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := exitCode(run(ctx, args, &stdout, &stderr), &stderr)
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.msg) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line naming %q", code, stderr.String(), c.msg)
			}
		})
	}
}

// TestAdminRotateToken: `admin nodes rotate-token NAME` and `admin
// rotate-token` print the new tokens; the old ones are refused at once.
func TestAdminRotateToken(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	old := strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q"))
	fresh := strings.TrimSpace(admin(t, n, "nodes", "rotate-token", "w1", "-q"))
	if !strings.HasPrefix(fresh, "lhn_") || fresh == old {
		t.Fatalf("rotate-token -q printed %q", fresh)
	}
	if out := admin(t, n, "nodes", "rotate-token", "w1"); !strings.Contains(out, "refused from now on") || !strings.Contains(out, "token: lhn_") {
		t.Errorf("rotate-token: %q", out)
	}
	newAdmin := strings.TrimSpace(admin(t, n, "rotate-token", "-q"))
	if !strings.HasPrefix(newAdmin, "lha_") {
		t.Fatalf("admin rotate-token -q printed %q", newAdmin)
	}
	if _, err := operatorRun(t, n, nil, "nodes", "list"); err == nil {
		t.Errorf("the old admin token still lists nodes")
	}
	b, _ := os.ReadFile(filepath.Join(n.DataDir, "admin.token"))
	if strings.TrimSpace(string(b)) != newAdmin {
		t.Errorf("admin.token holds %q, want the new token", b)
	}
	var stdout, stderr bytes.Buffer
	if err := runAdmin(context.Background(), []string{"--url", n.URL, "--data", n.DataDir, "nodes", "list"}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "w1") {
		t.Errorf("nodes list with the token from the data dir: %v, %q", err, stdout.String())
	}
}

// TestServeAdminTokenOnCommandLine: serve given --admin-token on its
// command line (which ps shows every user) says so in a WARN at start,
// naming the flag and what to use instead, never the token; given the
// same token by LEASEHOLD_ADMIN_TOKEN or --admin-token-file it does not.
// Either way the token is the node's, and in no line of its log.
func TestServeAdminTokenOnCommandLine(t *testing.T) {
	const token = "lha_given_on_the_command_line_0001"
	file := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  string
		warn bool
	}{
		{"Flag", []string{"--admin-token", token}, "", true},
		{"FlagWithEquals", []string{"-admin-token=" + token}, "", true},
		{"Env", nil, token, false},
		{"File", []string{"--admin-token-file", file}, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("LEASEHOLD_ADMIN_TOKEN", c.env)
			}
			n := serveNodeWith(t, nil, append([]string{"--data", t.TempDir(), "--nats", "off"}, c.args...)...)
			req, _ := http.NewRequest("GET", n.url+"/api/v1/nodes", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the token given: %s, want 200", resp.Status)
			}
			var warned bool
			for _, line := range strings.Split(n.log.String(), "\n") {
				if strings.Contains(line, token) {
					t.Errorf("the admin token is in the log: %s", line)
				}
				warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, "command line") &&
					strings.Contains(line, "flag=--admin-token") && strings.Contains(line, "--admin-token-file")
			}
			if warned != c.warn {
				t.Fatalf("a WARN naming --admin-token on the command line: %v, want %v\n%s", warned, c.warn, n.log.String())
			}
		})
	}
}
