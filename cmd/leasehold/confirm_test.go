package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// openTerminal opens a pseudo-terminal: ours is the side a person types
// into and reads from, theirs the terminal a command runs on.
func openTerminal(t *testing.T) (ours, theirs *os.File) {
	t.Helper()
	ours, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ours.Close() })
	raw, err := ours.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// The ioctls go through the raw descriptor so ours stays in the
	// poller: closing it ends a read in progress.
	var n int
	if err := raw.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	theirs, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the terminal's side: %v", err)
	}
	t.Cleanup(func() { theirs.Close() })
	return ours, theirs
}

// onTerminal runs `leasehold args…` (this test binary as main) in a
// session of its own whose stdin and stderr are a new terminal, as an
// operator runs it; stdout is a pipe. It waits for the terminal to show
// prompt, types answer, and returns what the terminal showed, stdout and
// the exit code.
func onTerminal(t *testing.T, prompt, answer string, args ...string) (screen, stdout string, code int) {
	t.Helper()
	ours, theirs := openTerminal(t)
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LEASEHOLD_TEST_MAIN_ARGS="+string(b))
	var out syncbuf.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = theirs, &out, theirs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close() // the command holds the terminal now
	var shown syncbuf.Buffer
	read := make(chan struct{})
	go func() {
		io.Copy(&shown, ours) // ends with EIO once the command exits
		close(read)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for !strings.Contains(shown.String(), prompt) {
		select {
		case err := <-exited:
			<-read
			t.Fatalf("leasehold %q exited (%v) without asking %q; the terminal showed %q, stdout %q", args, err, prompt, shown.String(), out.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("leasehold %q asked nothing in 60s; the terminal showed %q", args, shown.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := ours.Write([]byte(answer)); err != nil {
		t.Fatalf("typing %q: %v", answer, err)
	}
	select {
	case <-exited:
	case <-deadline:
		cmd.Process.Kill()
		t.Fatalf("leasehold %q did not exit after the answer %q; the terminal showed %q", args, answer, shown.String())
	}
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatalf("the terminal did not close after the command exited; it showed %q", shown.String())
	}
	return shown.String(), out.String(), cmd.ProcessState.ExitCode()
}

// TestNodesDeleteAsksOnTerminal: `admin nodes delete` of a node that
// holds a group, run on a real terminal, asks a question that names the
// node, what it holds and what the delete does to it; "y" deletes it and
// frees its group for another worker; "n", Enter alone and end of input
// (Ctrl-D) leave the node and its lease as they were.
func TestNodesDeleteAsksOnTerminal(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		deleted      bool
	}{
		{"Yes", "y\n", true},
		{"No", "n\n", false},
		{"Enter", "\n", false},
		{"EOF", "\x04", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, w, g := leasedByW1(t)
			ctx := context.Background()

			const question = "Delete it anyway? [y/N] "
			screen, stdout, code := onTerminal(t, question, c.answer,
				"admin", "--url", n.URL, "--token", n.AdminToken, "nodes", "delete", "w1")
			if want := "node w1 holds 1 group(s); deleting it releases them from under its worker"; !strings.Contains(screen, want+": force the delete to do it\r\n"+question) {
				t.Errorf("the terminal showed %q, want the question %q after %q", screen, question, want)
			}
			names := func() string {
				t.Helper()
				ns, err := client.New(n.URL, n.AdminToken).Nodes(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var s []string
				for _, n := range ns {
					s = append(s, n.Name)
				}
				return strings.Join(s, " ")
			}
			if c.deleted {
				if code != 0 || stdout != "node w1 deleted; what it held is released\n" {
					t.Errorf("after %q: exit %d, stdout %q, want 0 and the delete said", c.answer, code, stdout)
				}
				if got := names(); got != "" {
					t.Errorf("nodes after %q: %q, want none", c.answer, got)
				}
				w2 := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w2", "-q")))
				if g2, err := w2.Lease(ctx); err != nil || g2 == nil || g2.Group.Name != "alt.x" {
					t.Errorf("w2's lease after w1 was deleted: %+v, %v, want alt.x, released", g2, err)
				}
				return
			}
			if code != 1 || stdout != "" || !strings.Contains(screen, "\r\nleasehold: ") || !strings.Contains(screen, "(run it again with --force)") {
				t.Errorf("after %q: exit %d, stdout %q, terminal %q; want exit 1, nothing done, the refusal on a line of its own with --force", c.answer, code, stdout, screen)
			}
			if got := names(); got != "w1" {
				t.Errorf("nodes after %q: %q, want w1 kept", c.answer, got)
			}
			if _, err := w.Heartbeat(ctx, g.Group.ID, g.Fence); err != nil {
				t.Errorf("w1's lease after %q: %v, want it still held", c.answer, err)
			}
		})
	}
}

// TestSnapshotPutAsksOnTerminal: `snapshot put` of a window that would
// make a done range be indexed again, run on a real terminal, asks a
// question naming how many done ranges and that they would be indexed
// again; "y" stores the window, from which the next lease plans the
// range again; "n" stores nothing and the range stays done.
func TestSnapshotPutAsksOnTerminal(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		stored       bool
	}{
		{"Yes", "y\n", true},
		{"No", "n\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, w, g := leasedByW1(t)
			ctx := context.Background()
			r, err := w.Next(ctx, g.Group.ID, g.Fence)
			if err != nil || r == nil {
				t.Fatalf("next: %v, %v", r, err)
			}
			if _, err := w.Finish(ctx, r.ID, g.Fence, 3); err != nil {
				t.Fatal(err)
			}
			if err := w.Release(ctx, g.Group.ID, g.Fence); err != nil {
				t.Fatal(err)
			}
			window := filepath.Join(t.TempDir(), "w.gz")
			if err := os.WriteFile(window, gzipped(t, []byte("a window")), 0o600); err != nil {
				t.Fatal(err)
			}

			const question = "Store it anyway? [y/N] "
			screen, stdout, code := onTerminal(t, question, c.answer,
				"snapshot", "put", "--url", n.URL, "--token", n.AdminToken, "--next", "1", "alt.x", window)
			if want := "makes 1 done range(s) of group " + fmt.Sprint(g.Group.ID) + " be indexed again (rule 2); force the upload to do it\r\n" + question; !strings.Contains(screen, want) {
				t.Errorf("the terminal showed %q, want the question %q", screen, want)
			}
			// Rule 2 plans the done range again when the group is next
			// taken with the window stored.
			if g, err = w.Lease(ctx); err != nil || g == nil {
				t.Fatalf("lease after the answer: %v, %v", g, err)
			}
			done, err := client.New(n.URL, n.AdminToken).AllRanges(ctx, "alt.x", "done")
			if err != nil {
				t.Fatal(err)
			}
			d, err := client.New(n.URL, n.AdminToken).Group(ctx, "alt.x")
			if err != nil {
				t.Fatal(err)
			}
			if c.stored {
				if code != 0 || !strings.HasPrefix(stdout, "snapshot of alt.x stored: next 1,") {
					t.Errorf("after %q: exit %d, stdout %q, want 0 and the window stored", c.answer, code, stdout)
				}
				if len(done) != 0 || d.Snapshot == nil || d.Snapshot.Next != 1 {
					t.Errorf("after %q: done ranges %v, snapshot %+v; want the range planned again from the window at 1", c.answer, done, d.Snapshot)
				}
				return
			}
			if code != 1 || stdout != "" || !strings.Contains(screen, "\r\nleasehold: ") || !strings.Contains(screen, "(run it again with --force)") {
				t.Errorf("after %q: exit %d, stdout %q, terminal %q; want exit 1, nothing stored, the refusal with --force", c.answer, code, stdout, screen)
			}
			if len(done) != 1 || d.Snapshot != nil {
				t.Errorf("after %q: done ranges %v, snapshot %+v; want the range kept done and no window", c.answer, done, d.Snapshot)
			}
		})
	}
}

// leasedByW1 starts a node with group alt.x planned to 300 in ranges of
// 100 and leased by worker w1.
func leasedByW1(t *testing.T) (*nodetest.Node, *client.Client, *client.Grant) {
	t.Helper()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.x", "--range-size", "100")
	admin(t, n, "groups", "tail", "alt.x", "300")
	w := client.New(n.URL, strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q")))
	g, err := w.Lease(context.Background())
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	return n, w, g
}
