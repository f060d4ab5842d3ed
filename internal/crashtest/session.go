package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// config is one crash-test session.
type config struct {
	bin   string // the leasehold binary
	dir   string // where the session's data dir and log go
	kills int
	seed  uint64
	// loadMin..loadMax is how long the load runs before each kill.
	loadMin, loadMax time.Duration
	// readyWithin makes a slower restart a violation; 0 only reports it.
	readyWithin time.Duration
	// fault, if set, is done to the data between a kill and the restart
	// (the self-test): the check must report a violation of faultKind.
	fault string
	quiet bool
}

// violation is one broken promise.
type violation struct {
	kind, detail string
}

// stats are the session's figures.
type stats struct {
	kills, checks                   int
	restarts                        []time.Duration
	doubts, doubtLanded, doubtLost  int
	rangesChecked, snapshotsChecked int
	partsAtKill, decoys             int
	plans                           int
	backups, backupsCut             int
	backupsRestored                 int
	faultsDone                      int
}

// session runs the node, the load and the checks.
type session struct {
	cfg     config
	node    *nodeProcess
	admin   *client.Client
	model   *model
	clients []*worker
	tr      *http.Transport
	rnd     *rand.Rand
	stats   stats

	mu         sync.Mutex
	violations []violation
}

const (
	groupCount  = 6
	rangeSize   = 100
	groupStart  = 1001
	maxAttempts = 4
	// leaseTTL is longer than any session, so no lease lapses and every
	// grant is of a free group: the model needs no clock.
	leaseTTL = time.Hour
)

func (s *session) violate(kind, format string, args ...any) {
	v := violation{kind: kind, detail: fmt.Sprintf(format, args...)}
	s.mu.Lock()
	s.violations = append(s.violations, v)
	kills := s.stats.kills
	s.mu.Unlock()
	line := fmt.Sprintf("crashtest: VIOLATION after kill %d: %s: %s\n", kills, v.kind, v.detail)
	if !s.cfg.quiet {
		fmt.Fprint(os.Stderr, line)
	}
	if s.node != nil {
		fmt.Fprint(s.node.log, line) // kept with the data when the run fails
	}
}

func (s *session) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.violations) > 0
}

func (s *session) logf(format string, args ...any) {
	if !s.cfg.quiet {
		fmt.Printf("crashtest: "+format+"\n", args...)
	}
}

// run is the whole session: set up, then kill, restart and check
// cfg.kills times.
func run(ctx context.Context, cfg config) (*session, error) {
	s := &session{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))}
	s.model = newModel(s, rules{maxAttempts: maxAttempts})
	s.tr = &http.Transport{MaxIdleConnsPerHost: 16}
	defer s.tr.CloseIdleConnections()
	node, err := newNodeProcess(cfg.bin, filepath.Join(cfg.dir, "data"), leaseTTL, maxAttempts)
	if err != nil {
		return s, err
	}
	s.node = node
	defer node.close()
	if _, err := node.start(ctx); err != nil {
		return s, err
	}
	if err := s.setup(ctx); err != nil {
		return s, fmt.Errorf("setting up: %w", err)
	}
	// A fault waits for a kill that leaves it something to break (a
	// snapshot of some size, a group with no call in doubt); on a loaded
	// machine the short runs' first kills can all come too early, so it
	// is given up to twice as many kills more.
	k := 0
	for ; (k < cfg.kills || cfg.fault != "" && s.stats.faultsDone == 0 && k < 3*cfg.kills) && !s.failed(); k++ {
		if err := s.round(ctx); err != nil {
			return s, err
		}
	}
	if cfg.fault != "" && s.stats.faultsDone == 0 {
		return s, fmt.Errorf("fault %s found nothing to break in %d kills", cfg.fault, k)
	}
	return s, nil
}

// setup registers the worker nodes and makes the groups, half with history.
func (s *session) setup(ctx context.Context) error {
	token, err := s.node.adminToken()
	if err != nil {
		return err
	}
	s.admin = newAPI(s.node.url(), token, s.tr)
	for i, capacity := range []int{2, 2, 1, 1} {
		name := fmt.Sprintf("crash-w%d", i+1)
		n, err := s.admin.RegisterNode(ctx, client.NodeSpec{Name: name})
		if err != nil {
			return err
		}
		s.clients = append(s.clients, &worker{
			s: s, name: name, nodeID: n.ID, capacity: capacity,
			api: newAPI(s.node.url(), n.Token, s.tr), rnd: rand.New(rand.NewPCG(s.cfg.seed, uint64(i+1))),
		})
	}
	for i := range groupCount {
		name := fmt.Sprintf("crash.group.%d", i+1)
		size, start := int64(rangeSize), int64(groupStart)
		g, _, err := s.admin.PutGroup(ctx, name, client.GroupSpec{RangeSize: &size, Start: &start})
		if err != nil {
			return err
		}
		if _, err := s.admin.PlanTail(ctx, name, groupStart-1+30*rangeSize); err != nil {
			return err
		}
		if i%2 == 1 {
			if _, err := s.admin.PlanHistory(ctx, name, 1); err != nil {
				return err
			}
		}
		gs := &groupState{ID: g.ID, Name: name, RangeSize: rangeSize, TailEnd: groupStart - 1 + 30*rangeSize}
		if err := s.learnRanges(ctx, gs); err != nil {
			return err
		}
		s.model.add(gs)
	}
	return nil
}

// learnRanges adds the group's ranges the model does not know yet, as the
// node listed them; they must be freshly planned.
func (s *session) learnRanges(ctx context.Context, g *groupState) error {
	all, err := s.admin.AllRanges(ctx, g.Name, "")
	if err != nil {
		return err
	}
	for _, r := range all {
		if g.rangeByID(r.ID) != nil {
			continue
		}
		if r.Status != leasehold.StatusPlanned || r.Next != r.Start || r.Attempts != 0 {
			s.violate("answer", "group %d: new range %d is %+v, not freshly planned", g.ID, r.ID, r)
		}
		g.Ranges = append(g.Ranges, rangeState{ID: r.ID, Start: r.Start, End: r.End, Next: r.Next, Status: r.Status, Priority: r.Priority})
	}
	slices.SortFunc(g.Ranges, func(a, b rangeState) int { return int(a.ID - b.ID) })
	return nil
}

// round runs the load for a random while, kills the node, restarts it and
// checks what it kept.
func (s *session) round(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range s.clients {
		c.doubt = nil
		wg.Add(1)
		go func() { defer wg.Done(); c.run(rctx) }()
	}
	bk := s.startBackups(rctx)
	span := s.cfg.loadMax - s.cfg.loadMin
	time.Sleep(s.cfg.loadMin + time.Duration(s.rnd.Int64N(int64(span)+1)))
	s.node.kill()
	s.mu.Lock()
	s.stats.kills++
	s.mu.Unlock()
	cancel()
	wg.Wait()

	parts := s.leftovers(".part")
	if parts > 0 {
		s.stats.partsAtKill++
	}
	s.plantDecoys()
	if s.cfg.fault != "" && s.stats.faultsDone == 0 {
		if err := s.injectFault(ctx); err != nil {
			return err
		}
	}
	// The pooled connections are the dead node's.
	s.tr.CloseIdleConnections()
	d, err := s.node.start(ctx)
	if err != nil {
		s.violate("restart", "%v", err)
		return nil
	}
	s.stats.restarts = append(s.stats.restarts, d)
	if s.cfg.readyWithin > 0 && d > s.cfg.readyWithin {
		s.violate("restart", "/readyz answered 200 %s after the restart, over %s", d, s.cfg.readyWithin)
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	bk.check(ctx)
	s.logf("kill %d: %d calls acknowledged so far, %d in doubt this round, %d .part left by the kill, ready in %s",
		s.stats.kills, s.model.acknowledged(), s.doubtsThisRound(), parts, d.Round(time.Millisecond))
	return s.topUp(ctx)
}

func (s *session) doubtsThisRound() int {
	n := 0
	for _, c := range s.clients {
		if c.doubt != nil {
			n++
		}
	}
	return n
}

// leftovers counts the files of a kind in the snapshot directory.
func (s *session) leftovers(ext string) int {
	entries, _ := os.ReadDir(filepath.Join(s.node.dir, "snapshots"))
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ext) {
			n++
		}
	}
	return n
}

// plantDecoys leaves what a crash mid-upload leaves, newer than the
// recorded snapshot of a group: a .part and a renamed .gz the catalog
// never recorded. The restarted node must serve the recorded one and sweep
// both away.
func (s *session) plantDecoys() {
	var with []*groupState
	for _, id := range s.model.order {
		if g := s.model.groups[id]; g.Snap != nil {
			with = append(with, g)
		}
	}
	if len(with) == 0 {
		return
	}
	g := with[s.rnd.IntN(len(with))]
	seq := time.Now().UnixNano()
	dir := filepath.Join(s.node.dir, "snapshots")
	body := windowBody(s.rnd, g.ID, g.frontier()+1, 4<<10)
	for i, ext := range []string{".part", ".gz"} {
		path := filepath.Join(dir, fmt.Sprintf("%d-%d%s", g.ID, seq+int64(i), ext))
		if err := os.WriteFile(path, body, 0o600); err == nil {
			s.stats.decoys++
		}
	}
}

// topUp plans more tail for groups running out of open work, so the load
// lasts any number of kills.
func (s *session) topUp(ctx context.Context) error {
	for _, id := range s.model.order {
		s.model.mu.Lock()
		g := s.model.groups[id]
		open := 0
		for _, r := range g.Ranges {
			if r.Status == leasehold.StatusPlanned || r.Status == leasehold.StatusLeased {
				open++
			}
		}
		s.model.mu.Unlock()
		if open >= 8 {
			continue
		}
		high := g.TailEnd + 20*g.RangeSize
		if _, err := s.admin.PlanTail(ctx, g.Name, high); err != nil {
			s.violate("answer", "planning the tail of %s: %v", g.Name, err)
			return nil
		}
		s.stats.plans++
		s.model.mu.Lock()
		g.TailEnd = high
		err := s.learnRanges(ctx, g)
		s.model.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}
