package fleetfault

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// TestMain makes the test binary a CPU burner when startBurners runs it
// (it runs its own binary), as the harness's command does.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == BurnArg {
		d, err := time.ParseDuration(os.Args[2])
		if err != nil {
			os.Exit(2)
		}
		Burn(d)
		return
	}
	os.Exit(m.Run())
}

// TestBurners: the burners run at the nice value asked, are listed in the
// pid file, outlive the ends of other locked threads (Pdeathsig follows
// the thread that started them), and stop kills them, counts their CPU
// and removes the file; a burner gone before stop is reported.
func TestBurners(t *testing.T) {
	self, err := niceOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	nice := min(self+1, 19) // raising it needs no privilege
	pidFile := filepath.Join(t.TempDir(), BurnersPIDFile)
	b, err := startBurners(2, time.Minute, nice, pidFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.stop() })
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(raw)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %q: %v", raw, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("pid file lists %v, want 2 burners", pids)
	}
	for _, pid := range pids {
		if got, err := niceOf(pid); err != nil || got != nice {
			t.Errorf("burner %d at nice %d (%v), want %d", pid, got, err, nice)
		}
	}
	// Threads ended as the harness's dials into the namespaces end them:
	// goroutines locked to their threads returning.
	// In rounds, so that the idle threads (the one that started the
	// burners among them) are taken up again and again.
	for range 64 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				runtime.LockOSThread()
				time.Sleep(time.Millisecond)
			})
		}
		wg.Wait()
	}
	// A burner killed here is the one stop reports gone; the other must
	// have lived through the threads' ends, and burned.
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatalf("killing burner 2 (pid %d): %v: it was gone with a thread", pids[1], err)
	}
	poll.Eventually(t, 10*time.Second, "the burner killed gone", func() bool { return b.gone() == 1 })
	p, early := b.stop()
	if len(early) != 1 || !strings.Contains(early[0], "CPU burner 2 (pid "+strconv.Itoa(pids[1])+")") {
		t.Errorf("burners gone early %q, want burner 2 alone", early)
	}
	if p.Burners != 2 || p.Nice != nice || p.CPU <= 0 || p.Ran <= 0 || p.LoadSamples < 1 {
		t.Errorf("pressure %+v: want 2 burners at nice %d with CPU and a load sample", p, nice)
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("pid file after stop: %v, want it gone", err)
	}
	if err := syscall.Kill(pids[0], 0); err == nil && !zombie(pids[0]) {
		t.Errorf("burner %d still runs after stop", pids[0])
	}
}

// zombie reports whether pid has exited and awaits its reaping.
func zombie(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(s[i+1:], " Z")
}
