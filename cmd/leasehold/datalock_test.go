package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestOneProcessADataDir runs the real binary twice on one data dir (rule
// 14): the second serve and a restore onto it exit 2 with one line naming
// the dir and the first's pid, the first keeps serving writes, and after
// the first is killed with -9 the next serve starts on the dir at once.
func TestOneProcessADataDir(t *testing.T) {
	t.Parallel()
	bin := leaseholdBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	first := startProcNode(t, "first", data, "--nats", "off")

	// A second node that did start is stopped after a while: its exit is
	// then not 2.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, bin, "serve", "--data", data, "--listen", "127.0.0.1:0", "--nats", "off")
	var out bytes.Buffer
	second.Stdout, second.Stderr = &out, &out
	err := second.Run()
	if code := second.ProcessState.ExitCode(); code != 2 {
		t.Fatalf("second serve on %s: exit %d (%v), want 2; output %q", data, code, err, out.String())
	}
	line := strings.TrimSpace(out.String())
	if strings.Contains(line, "\n") || !strings.Contains(line, data) || !strings.Contains(line, fmt.Sprintf("pid %d", first.cmd.Process.Pid)) {
		t.Fatalf("second serve said %q, want one line naming %s and pid %d", line, data, first.cmd.Process.Pid)
	}

	restore := exec.CommandContext(ctx, bin, "restore", "--data", data, t.TempDir())
	out.Reset()
	restore.Stdout, restore.Stderr = &out, &out
	restore.Run()
	if code := restore.ProcessState.ExitCode(); code != 2 || !strings.Contains(out.String(), fmt.Sprintf("pid %d", first.cmd.Process.Pid)) {
		t.Fatalf("restore onto a served dir: exit %d, output %q; want 2 naming the holder", code, out.String())
	}

	// The first node is whole: it still takes writes.
	token, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, first.url+"/api/v1/groups/alt.lock", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("a write to the first node after the second was refused: %d", resp.StatusCode)
	}

	// kill -9 leaves the lock file; the kernel's lock went with the process.
	first.kill(t)
	if _, err := os.Stat(filepath.Join(data, "leasehold.lock")); err != nil {
		t.Fatalf("the lock file after kill -9: %v", err)
	}
	startProcNode(t, "next", data, "--nats", "off")
}

// servingURL finds a node's URL in its serving line.
var servingURL = regexp.MustCompile(`url=(http://[0-9.:]+)`)
