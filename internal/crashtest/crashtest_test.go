package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// leaseholdBinary builds the real node once for the tests of this package.
func leaseholdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "leasehold-crashtest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "leasehold"), "github.com/leasehold/leasehold/cmd/leasehold").CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf("go build: %s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building leasehold: %v", buildErr)
	}
	return filepath.Join(binDir, "leasehold")
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func short(t *testing.T, kills int, fault string) config {
	return config{
		bin: leaseholdBinary(t), dir: t.TempDir(), kills: kills, seed: uint64(time.Now().UnixNano()),
		loadMin: 100 * time.Millisecond, loadMax: 500 * time.Millisecond, fault: fault, quiet: true,
	}
}

// TestCrashRecovery kills the real node three times mid-load: nothing
// acknowledged may be missing, and every check must have run.
func TestCrashRecovery(t *testing.T) {
	cfg := short(t, 3, "")
	s, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.seed, err)
	}
	t.Log(s.summary())
	for _, v := range s.violations {
		t.Errorf("seed %d: %s: %s", cfg.seed, v.kind, v.detail)
	}
	if s.stats.kills != 3 || s.stats.checks != 3 || s.model.acknowledged() == 0 {
		t.Fatalf("seed %d: %d kills, %d checks, %d calls acknowledged; want 3, 3 and some", cfg.seed, s.stats.kills, s.stats.checks, s.model.acknowledged())
	}
}

// TestCheckCatchesFaults shows the check can fail: each fault, done to the
// data between a kill and the restart, must be reported as its kind.
func TestCheckCatchesFaults(t *testing.T) {
	for _, name := range faultNames() {
		t.Run(name, func(t *testing.T) {
			cfg := short(t, 5, name)
			s, err := run(context.Background(), cfg)
			if err != nil {
				t.Fatalf("seed %d: %v", cfg.seed, err)
			}
			if !s.caught(faults[name]) {
				t.Fatalf("seed %d: fault %s not reported as %s; violations: %v", cfg.seed, name, faults[name], s.violations)
			}
		})
	}
}
