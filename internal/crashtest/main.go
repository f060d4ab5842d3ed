// Command crashtest kills a real leasehold node with SIGKILL in the middle
// of a load, again and again, and checks after every restart that the node
// kept its promises: every acknowledged write is in the catalog, PRAGMA
// integrity_check is ok, every group's snapshot file is whole and is the
// one the catalog records (no .part or stray file is taken for it, a
// download serves it), and the node is ready again within a second.
//
// The load is four worker nodes leasing six groups (lease, next, progress,
// finish, heartbeat, snapshot upload and download, release) with the Go
// client, retries off. Every answer goes into a model that applies the
// node's rules (DESIGN.md rules 2-5) to what was acknowledged; after a
// restart the catalog must equal the model exactly, where each call the
// node never answered may have landed or not. A lease TTL of an hour keeps
// every grant a grant of a free group.
//
// scripts/crashtest.sh builds the binary and runs this; --self-test breaks
// the data on purpose between a kill and the restart (a deleted row, a
// flipped byte, a damaged index, ...) and fails unless the check reports
// each one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(mainExit(ctx, os.Args[1:]))
}

func mainExit(ctx context.Context, args []string) (code int) {
	fs := flag.NewFlagSet("crashtest", flag.ContinueOnError)
	cfg := config{}
	fs.StringVar(&cfg.bin, "bin", "", "the leasehold binary to run (required)")
	dir := fs.String("dir", "", "where sessions keep their data (default: a temporary directory)")
	fs.IntVar(&cfg.kills, "kills", 50, "how many times to kill the node")
	seed := fs.Uint64("seed", 0, "random seed (default: from the clock; printed)")
	fs.DurationVar(&cfg.loadMin, "load-min", 100*time.Millisecond, "shortest load before a kill")
	fs.DurationVar(&cfg.loadMax, "load-max", 900*time.Millisecond, "longest load before a kill")
	fs.DurationVar(&cfg.readyWithin, "ready-within", time.Second, "a restart slower than this to /readyz 200 is a violation (0: only report)")
	fs.StringVar(&cfg.fault, "fault", "", "break the data at the first kill, one of "+strings.Join(faultNames(), ", "))
	selfTest := fs.Bool("self-test", false, "run a short session with each fault and fail unless the check catches every one")
	keep := fs.Bool("keep", false, "keep the data directories")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cfg.bin == "" || cfg.kills < 1 || cfg.loadMax < cfg.loadMin {
		fmt.Fprintln(os.Stderr, "crashtest: --bin is required, --kills must be at least 1, --load-max at least --load-min")
		return 2
	}
	if cfg.fault != "" && faults[cfg.fault] == "" {
		fmt.Fprintf(os.Stderr, "crashtest: no fault %q; there are %s\n", cfg.fault, strings.Join(faultNames(), ", "))
		return 2
	}
	cfg.seed = *seed
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	base := *dir
	if base == "" {
		var err error
		if base, err = os.MkdirTemp("", "leasehold-crashtest-"); err != nil {
			fmt.Fprintln(os.Stderr, "crashtest:", err)
			return 1
		}
		defer func() {
			if code == 0 && !*keep {
				os.RemoveAll(base)
			} else {
				fmt.Fprintf(os.Stderr, "crashtest: data dirs and node.log kept in %s\n", base)
			}
		}()
	}
	if *selfTest {
		return selfTestExit(ctx, cfg, base)
	}
	cfg.dir = base
	fmt.Printf("crashtest: seed %d, %d kills, load %s..%s before each\n", cfg.seed, cfg.kills, cfg.loadMin, cfg.loadMax)
	s, err := run(ctx, cfg)
	fmt.Println(s.summary())
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashtest:", err)
		return 1
	}
	if cfg.fault != "" {
		if !s.caught(faults[cfg.fault]) {
			fmt.Fprintf(os.Stderr, "crashtest: fault %s was NOT reported as %s\n", cfg.fault, faults[cfg.fault])
			return 1
		}
		fmt.Printf("crashtest: fault %s reported as %s, as it must be\n", cfg.fault, faults[cfg.fault])
		return 0
	}
	if len(s.violations) > 0 {
		return 1
	}
	return 0
}

// selfTestExit runs one short session per fault; each must be caught.
func selfTestExit(ctx context.Context, cfg config, base string) int {
	code := 0
	for _, name := range faultNames() {
		c := cfg
		c.fault, c.kills, c.quiet = name, min(cfg.kills, 5), true
		c.dir = base + "/" + name
		if err := os.MkdirAll(c.dir, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "crashtest:", err)
			return 1
		}
		s, err := run(ctx, c)
		switch {
		case err != nil:
			fmt.Printf("crashtest: self-test %s: %v\n", name, err)
			code = 1
		case !s.caught(faults[name]):
			fmt.Printf("crashtest: self-test %s: NOT caught (violations: %v)\n", name, s.violations)
			code = 1
		default:
			fmt.Printf("crashtest: self-test %s: caught as %s: %s\n", name, faults[name], s.first(faults[name]))
		}
	}
	return code
}

func (s *session) caught(kind string) bool { return s.first(kind) != "" }

func (s *session) first(kind string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		if v.kind == kind {
			return v.detail
		}
	}
	return ""
}

// summary is the session's figures in one paragraph.
func (s *session) summary() string {
	m := s.model
	m.mu.Lock()
	kinds := make([]string, 0, len(m.acks))
	total := 0
	for k, v := range m.acks {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	m.mu.Unlock()
	sort.Strings(kinds)
	st := s.stats
	r := slices.Clone(st.restarts)
	slices.Sort(r)
	restart := "no restarts"
	if len(r) > 0 {
		restart = fmt.Sprintf("restart to /readyz 200: min %s, median %s, max %s",
			r[0].Round(time.Millisecond), r[len(r)/2].Round(time.Millisecond), r[len(r)-1].Round(time.Millisecond))
	}
	s.mu.Lock()
	nv := len(s.violations)
	s.mu.Unlock()
	return fmt.Sprintf("crashtest: %d kills, %d restarts checked; %d acknowledged calls checked (%s), plus %d tail plans; "+
		"%d full checks of %d range rows and %d snapshot files; %d calls in doubt (%d writes landed, %d did not, the rest heartbeats or downloads); "+
		"%d kills left a .part, %d decoy files planted and swept; %d backups taken under load, %d cut off by a kill and refused by restore, %d restored; %s; %d violations",
		st.kills, len(st.restarts), total, strings.Join(kinds, ", "), st.plans,
		st.checks, st.rangesChecked, st.snapshotsChecked, st.doubts, st.doubtLanded, st.doubtLost,
		st.partsAtKill, st.decoys, st.backups, st.backupsCut, st.backupsRestored, restart, nv)
}
