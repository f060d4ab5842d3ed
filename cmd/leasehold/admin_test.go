package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// operatorRun runs one operator command against node n with the admin
// token and returns its stdout.
func operatorRun(t *testing.T, n *nodetest.Node, cmd func(context.Context, []string, io.Writer, io.Writer) error, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--url", n.URL, "--token", n.AdminToken}, args...)
	if cmd == nil {
		cmd = runAdmin
	}
	err := cmd(context.Background(), args, &stdout, &stderr)
	if err != nil {
		t.Logf("stderr: %s", stderr.String())
	}
	return stdout.String(), err
}

// admin runs `leasehold admin args…` and fails the test on an error.
func admin(t *testing.T, n *nodetest.Node, args ...string) string {
	t.Helper()
	out, err := operatorRun(t, n, nil, args...)
	if err != nil {
		t.Fatalf("admin %q: %v", args, err)
	}
	return out
}

func isUsage(err error) bool {
	var u errUsage
	return errors.As(err, &u)
}

func TestAdmin(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	if out := admin(t, n, "groups", "create", "alt.test", "--range-size", "100", "--start", "1001"); !strings.Contains(out, "group alt.test created") {
		t.Errorf("create: got %q", out)
	}
	if out := admin(t, n, "groups", "update", "alt.test", "--priority", "2"); !strings.Contains(out, "updated") {
		t.Errorf("update: got %q", out)
	}
	if out := admin(t, n, "groups", "tail", "alt.test", "1500"); !strings.Contains(out, "5 tail ranges planned") {
		t.Errorf("tail: got %q", out)
	}
	if out := admin(t, n, "--json", "groups", "history", "alt.test", "801"); strings.TrimSpace(out) != "{\n  \"planned\": 2\n}" {
		t.Errorf("history --json: got %q", out)
	}
	out := admin(t, n, "groups", "list")
	if !strings.Contains(out, "alt.test") || !strings.HasPrefix(out, "ID") {
		t.Errorf("list: got %q", out)
	}
	if out := admin(t, n, "groups", "show", "alt.test"); !strings.Contains(out, "planned 7, leased 0, done 0") || !strings.Contains(out, "801..1500") {
		t.Errorf("show: got %q", out)
	}
	var rs []leasehold.Range
	if err := json.Unmarshal([]byte(admin(t, n, "groups", "ranges", "alt.test", "--status", "planned", "--json")), &rs); err != nil || len(rs) != 7 {
		t.Errorf("ranges --json: got %d ranges, %v", len(rs), err)
	}

	token := strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "--capacity", "3", "-q"))
	if !strings.HasPrefix(token, "lhn_") || strings.Contains(token, " ") {
		t.Errorf("register -q: got %q, want just the token", token)
	}
	var ns []leasehold.Node
	if err := json.Unmarshal([]byte(admin(t, n, "nodes", "list", "--json")), &ns); err != nil || len(ns) != 1 || ns[0].Capacity != 3 {
		t.Errorf("nodes list --json: got %+v, %v", ns, err)
	}
	if out := admin(t, n, "nodes", "pause", "w1", "--by", "alice"); out != "node w1 paused\n" {
		t.Errorf("pause: got %q", out)
	}
	if out := admin(t, n, "nodes", "list"); !strings.Contains(out, "by alice") {
		t.Errorf("nodes list: got %q, want the pause shown", out)
	}
	if out := admin(t, n, "nodes", "resume", "1"); out != "node w1 resumed\n" {
		t.Errorf("resume: got %q", out)
	}

	rules := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(rules, []byte(`{"filters":["spam"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := admin(t, n, "rules", "put", rules); !strings.Contains(out, "rules version 1 stored") {
		t.Errorf("rules put: got %q", out)
	}
	if out := admin(t, n, "rules", "show"); !strings.Contains(out, `"spam"`) {
		t.Errorf("rules show: got %q", out)
	}
	if out := admin(t, n, "findings"); !strings.Contains(out, "backlog: 7 planned ranges waiting") {
		t.Errorf("findings: got %q", out)
	}
	if _, err := operatorRun(t, n, nil, "ranges", "retry", "1"); !errors.Is(err, leasehold.ErrConflict) {
		t.Errorf("retry of a planned range: got %v, want conflict", err)
	}
	if out := admin(t, n, "nodes", "delete", "w1"); !strings.Contains(out, "deleted") {
		t.Errorf("delete: got %q", out)
	}

	t.Run("TokenFromData", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		t.Setenv("LEASEHOLD_ADMIN_TOKEN", "")
		if err := runAdmin(context.Background(), []string{"groups", "list", "--url", n.URL, "--data", n.DataDir}, &stdout, &stderr); err != nil {
			t.Fatalf("got %v (%s)", err, stderr.String())
		}
		if !strings.Contains(stdout.String(), "alt.test") {
			t.Errorf("got %q", stdout.String())
		}
	})
	t.Run("TokenFromEnv", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		t.Setenv("LEASEHOLD_ADMIN_TOKEN", n.AdminToken)
		t.Setenv("LEASEHOLD_URL", n.URL)
		if err := runAdmin(context.Background(), []string{"groups", "list", "--data", t.TempDir()}, &stdout, &stderr); err != nil {
			t.Fatalf("got %v (%s)", err, stderr.String())
		}
	})
	t.Run("WrongToken", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		err := runAdmin(context.Background(), []string{"--url", n.URL, "--token", "nope", "groups", "list"}, &stdout, &stderr)
		if !errors.Is(err, leasehold.ErrUnauthorized) || isUsage(err) {
			t.Errorf("got %v, want unauthorized (exit 1)", err)
		}
	})
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"NoCommand", nil},
		{"UnknownVerb", []string{"groups", "explode"}},
		{"MissingArg", []string{"groups", "tail", "alt.test"}},
		{"NotANumber", []string{"groups", "tail", "alt.test", "many"}},
		{"BadFlag", []string{"groups", "list", "--nope"}},
		{"NoToken", []string{"--data", "/nonexistent", "groups", "list"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("LEASEHOLD_ADMIN_TOKEN", "")
			var stdout, stderr bytes.Buffer
			if err := runAdmin(context.Background(), tt.args, &stdout, &stderr); !isUsage(err) {
				t.Errorf("got %v, want a usage error", err)
			}
		})
	}
}
