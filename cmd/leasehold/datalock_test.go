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
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestOneProcessADataDir runs the real binary twice on one data dir (rule
// 14): the second serve and a restore onto it exit 2 with one line naming
// the dir and the first's pid, the first keeps serving writes, and after
// the first is killed with -9 the next serve starts on the dir at once.
func TestOneProcessADataDir(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "leasehold")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(t.TempDir(), "data")
	first := startServe(t, bin, data)

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
	if strings.Contains(line, "\n") || !strings.Contains(line, data) || !strings.Contains(line, fmt.Sprintf("pid %d", first.proc.Pid)) {
		t.Fatalf("second serve said %q, want one line naming %s and pid %d", line, data, first.proc.Pid)
	}

	restore := exec.CommandContext(ctx, bin, "restore", "--data", data, t.TempDir())
	out.Reset()
	restore.Stdout, restore.Stderr = &out, &out
	restore.Run()
	if code := restore.ProcessState.ExitCode(); code != 2 || !strings.Contains(out.String(), fmt.Sprintf("pid %d", first.proc.Pid)) {
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
	first.proc.Signal(syscall.SIGKILL)
	<-first.exited
	if _, err := os.Stat(filepath.Join(data, "leasehold.lock")); err != nil {
		t.Fatalf("the lock file after kill -9: %v", err)
	}
	startServe(t, bin, data)
}

var servingURL = regexp.MustCompile(`url=(http://[0-9.:]+)`)

// served is a serve process started by startServe.
type served struct {
	proc   *os.Process
	url    string
	exited chan struct{}
	log    *syncbuf.Buffer
}

// startServe starts bin serve on data, alone, and returns it once it
// serves; the test's end stops it.
func startServe(t *testing.T, bin, data string) *served {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data", data, "--listen", "127.0.0.1:0", "--nats", "off")
	var log syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
	})
	var url string
	poll.Until(t, 30*time.Second, "serve on "+data+" to start", func() error {
		if m := servingURL.FindStringSubmatch(log.String()); m != nil {
			url = m[1]
			return nil
		}
		select {
		case <-exited:
			t.Fatalf("serve on %s exited at start: %s", data, log.String())
		default:
		}
		return fmt.Errorf("not serving yet: %s", log.String())
	})
	return &served{proc: cmd.Process, url: url, exited: exited, log: &log}
}
