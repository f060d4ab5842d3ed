package fleetfault

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/fleet"
)

// Config is one run's settings.
type Config struct {
	// Bin is the leasehold binary; Out the directory for the nodes' data
	// and logs, the secret and the history.
	Bin, Out string
	// Prefix starts the names of the namespaces made (at most 10 bytes).
	Prefix string
	// Start is "serial" (each node after the previous one's /healthz) or
	// "together".
	Start string

	Kills, Pauses, Partitions int

	Groups         int
	RangeSize      int64
	Ranges0        int           // ranges planned per group before the load
	PlanEvery      time.Duration // how often the planner looks at each group
	PlanAhead      int           // ranges planned beyond the highest finish acknowledged
	WorkersPerNode int
	Work           time.Duration // per range: half, progress, half, finish
	ReleaseAfter   int           // a worker releases its group after this many ranges
	Heartbeat      time.Duration
	CallTimeout    time.Duration // one attempt's bound
	RetryFor       time.Duration // how long a call is tried again with the same fence
	RetryEvery     time.Duration

	LeaseTTL, ClaimTTL time.Duration
	MaxAttempts        int
	// LogLevel is the nodes' --log-level (default info); debug adds the
	// embedded NATS servers' notices (leader elections, routes) to the
	// node logs, for a post-mortem of a fault's timeline.
	LogLevel string
	// NATSBin, when set, is the external mode: the fleet's NATS is a
	// cluster of its own, one natsd (internal/fleetfault/cmd/natsd, this
	// binary) in each node's namespace beside the node, which the nodes
	// reach over the route network (--nats URLs); every fault hits the
	// namespace's NATS server as it hits the node.
	NATSBin string
	// RequireTakeover makes a fault longer than the claim TTL + 5 s whose
	// node's groups in work were not all granted or owned elsewhere within
	// that a violation (it is reported either way).
	RequireTakeover bool
	// FromBin, when set, is the upgrade mode (upgrade.go): the fleet
	// starts on this build, and after the settle each node in turn is
	// stopped, started on Bin with its data and waited for; the faults,
	// if any, come after, on the new build. Replace is how a node is
	// stopped (ReplaceTerm, SIGKILL after StopGrace; or ReplaceKill).
	FromBin   string
	Replace   string
	StopGrace time.Duration

	Settle      time.Duration // load before the first fault
	Gap         time.Duration // after each fault is healed
	Down        time.Duration // a killed node stays down this long
	PauseFor    time.Duration // SIGSTOP to SIGCONT
	CutFor      time.Duration // a partition's length
	ReadyWithin time.Duration // fleet start: every /readyz 200 within this
	Drain       time.Duration // after the faults: every range done and agreed within this
	Converge    time.Duration // after the workers stop: agreement within this

	// Removals are faults of a member killed, removed from the fleet at
	// another, and approved again and restarted after Down (remove.go).
	Removals int

	// Burners are CPU burners (busy-loop processes) run beside the load
	// until the faults are over: the fleet's view under CPU pressure.
	Burners int

	secretFile string
}

// ShortConfig is the short run: one fault of each kind, a serial start,
// under three minutes.
func ShortConfig() Config {
	return Config{
		Start: "serial", Kills: 1, Pauses: 1, Partitions: 1,
		Groups: 20, RangeSize: 50, Ranges0: 4, PlanEvery: time.Second, PlanAhead: 4,
		WorkersPerNode: 7, Work: 800 * time.Millisecond, ReleaseAfter: 6, Heartbeat: 500 * time.Millisecond,
		CallTimeout: 5 * time.Second, RetryFor: 30 * time.Second, RetryEvery: 500 * time.Millisecond,
		LeaseTTL: 2 * time.Second, ClaimTTL: 4 * time.Second, MaxAttempts: 1000,
		Settle: 8 * time.Second, Gap: 6 * time.Second, Down: 10 * time.Second,
		PauseFor: 10 * time.Second, CutFor: 12 * time.Second,
		ReadyWithin: 60 * time.Second, Drain: 70 * time.Second, Converge: 10 * time.Second,
	}
}

// LongConfig is the long run: twenty faults of each kind.
func LongConfig() Config {
	c := ShortConfig()
	c.Kills, c.Pauses, c.Partitions = 20, 20, 20
	c.Settle, c.Gap = 15*time.Second, 10*time.Second
	c.Drain, c.Converge = 180*time.Second, 60*time.Second
	return c
}

// run is one run in progress.
type run struct {
	cfg    *Config
	out    io.Writer
	net    *Net
	nodes  []*Node
	hist   *History
	t0     time.Time
	tr     *http.Transport
	probe  *http.Client
	admin  map[string]*client.Client // one try a call; callers bound their loops
	tokens map[string]string         // workers' node tokens, by worker
	// held counts the leases each node's workers hold now.
	heldMu sync.Mutex
	held   map[string]int
	// finished is each group's highest id acknowledged finished.
	finished map[string]int64
	// draining is set once the faults are over: workers keep their groups
	// until caught up, so the drain is not slowed by voluntary releases.
	draining atomic.Bool
	other    []string

	// nats is, in the external mode, the NATS server in each node's
	// namespace, by node name.
	nats map[string]*Node
	// replaced are the upgrade mode's replacements done.
	replaced []Replacement
	// pressure is what the CPU burners did, once they are stopped.
	pressure *Pressure
}

func (r *run) since() time.Duration { return time.Since(r.t0) }

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "fleetfault: %6.1fs "+format+"\n", append([]any{r.since().Seconds()}, args...)...)
}

// violation records a problem found outside the history.
func (r *run) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.other = append(r.other, s)
	r.logf("VIOLATION: %s", s)
}

var nodeNames = []string{"node-a", "node-b", "node-c"}

// Run makes the namespaces, starts the fleet, loads it, makes the faults,
// drains, reads the final state and checks the history. Everything it made
// is gone when it returns. The error is for a run that could not be
// carried out; violations are in the report.
func Run(ctx context.Context, cfg Config, out io.Writer) (rep *Report, err error) {
	r := &run{cfg: &cfg, out: out, nats: map[string]*Node{}, hist: &History{}, t0: time.Now(), admin: map[string]*client.Client{}, held: map[string]int{}, finished: map[string]int64{}}
	if cfg.Out, err = filepath.Abs(cfg.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o700); err != nil {
		return nil, err
	}
	r.logf("making namespaces %sh (hub: bridges brhttp %s0/24, brroute %s0/24) and %sa, %sb, %sc", cfg.Prefix, httpNet, routeNet, cfg.Prefix, cfg.Prefix, cfg.Prefix)
	if r.net, err = SetupNet(ctx, cfg.Prefix, nodeNames); err != nil {
		return nil, err
	}
	defer func() {
		if terr := r.net.Teardown(); terr != nil && err == nil {
			err = terr
		}
	}()
	r.tr = &http.Transport{DialContext: r.net.DialContext, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	defer r.tr.CloseIdleConnections()
	r.probe = &http.Client{Transport: &http.Transport{DialContext: r.net.DialContext, DisableKeepAlives: true}}

	cfg.secretFile = filepath.Join(cfg.Out, "nats.secret")
	if err := writeSecret(cfg.secretFile); err != nil {
		return nil, err
	}
	var routes []string
	for _, nn := range r.net.Nodes {
		routes = append(routes, nn.RouteURL())
	}
	for _, nn := range r.net.Nodes {
		n, err := newNode(&cfg, r.net, nn, routes)
		if err != nil {
			return nil, err
		}
		r.nodes = append(r.nodes, n)
		if cfg.NATSBin != "" {
			if r.nats[nn.Name], err = newNATS(&cfg, nn, routes); err != nil {
				return nil, err
			}
		}
	}
	defer func() {
		var wg sync.WaitGroup
		for _, n := range r.nodes {
			wg.Go(func() { n.Close(10 * time.Second) })
		}
		wg.Wait()
		// The NATS servers after the nodes, which would log their loss.
		for _, n := range r.nats {
			wg.Go(func() { n.Close(10 * time.Second) })
		}
		wg.Wait()
	}()

	if err := r.startFleet(ctx); err != nil {
		r.violation("%v", err)
		return r.result(nil), nil
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}

	// The load.
	r.t0 = time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	planCtx, stopPlan := context.WithCancel(loadCtx)
	defer stopPlan()
	var workers, planners sync.WaitGroup
	for _, n := range r.nodes {
		for i := 1; i <= cfg.WorkersPerNode; i++ {
			w := &worker{run: r, node: n, name: fmt.Sprintf("w%s%d", n.Name[len(n.Name)-1:], i)}
			w.c = r.client(n, r.tokens[w.name])
			workers.Go(func() { w.loop(loadCtx) })
		}
	}
	for g := range cfg.Groups {
		planners.Go(func() { r.plan(planCtx, g) })
	}
	r.logf("load: %d workers a node, %d groups, ranges of %d ids, the tail kept %d ranges ahead of the work", cfg.WorkersPerNode, cfg.Groups, cfg.RangeSize, cfg.PlanAhead)
	stopBurners := func() {}
	if cfg.Burners > 0 {
		// Bounded by the run's longest faulted time (a restart waits up
		// to ReadyWithin), and killed once the faults are over (or with
		// the harness, or by the script's trap).
		bound := cfg.Settle + time.Duration(cfg.Kills+cfg.Pauses+cfg.Partitions+cfg.Removals)*(cfg.Gap+max(cfg.Down, cfg.PauseFor, cfg.CutFor)+cfg.ClaimTTL+cfg.ReadyWithin+30*time.Second)
		if cfg.FromBin != "" {
			// Each replacement: the stop, the wait for its /readyz and
			// the fleet's settle, each bounded.
			bound += time.Duration(len(r.nodes)) * (cfg.StopGrace + 2*cfg.ReadyWithin + cfg.Gap)
		}
		nice := r.nodesNice()
		b, err := startBurners(cfg.Burners, bound, nice, filepath.Join(cfg.Out, BurnersPIDFile))
		if err != nil {
			r.violation("CPU burners could not be started: %v", err)
		} else {
			stopBurners = func() {
				p, early := b.stop()
				if r.pressure == nil {
					r.pressure = &p
					for _, e := range early {
						r.violation("%s", e)
					}
				}
			}
			r.logf("load: %d CPU burners (busy loops) at nice %d (the nodes') for at most %s", cfg.Burners, nice, bound)
		}
	}
	defer stopBurners()

	if sleepCtx(ctx, cfg.Settle) == nil {
		if cfg.FromBin != "" {
			r.upgrade(ctx)
		}
		r.faults(ctx)
	}
	stopBurners()
	stopPlan()
	planners.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}

	r.draining.Store(true)
	r.logf("faults over; draining: every range done and every node agreeing, within %s", cfg.Drain)
	drainStart := time.Now()
	final, ok := r.converge(ctx, cfg.Drain, false)
	if ok {
		r.logf("drained after %.1fs", time.Since(drainStart).Seconds())
	} else {
		// Not a violation by itself: the final state is judged below.
		left := append(unconverged(final), final.Unsettled...)
		r.logf("not drained within %s: %d disagreement(s), ranges not done or changes not seen, e.g. %s", cfg.Drain, len(left), first(left))
	}
	stopLoad()
	workers.Wait()
	r.logf("workers stopped; reading the final state")
	final, ok = r.converge(ctx, cfg.Converge, true)
	if !ok {
		r.logf("the final state did not converge within %s", cfg.Converge)
	}
	return r.result(final), nil
}

// result writes the history and checks it.
func (r *run) result(final *Final) *Report {
	if f, err := os.Create(filepath.Join(r.cfg.Out, "history.jsonl")); err == nil {
		r.hist.WriteJSON(f)
		f.Close()
	}
	calls, faults := r.hist.Snapshot()
	if final != nil {
		final.Adoptions = r.adoptions()
	}
	rep := Check(calls, faults, final)
	rep.CheckTakeovers(r.cfg.ClaimTTL+5*time.Second, r.cfg.RequireTakeover)
	if r.cfg.FromBin == "" && !r.t0.IsZero() {
		// An upgrade's replacements stop nodes for good reasons of
		// their own; its downs are not judged.
		downs, lapsed := r.downs()
		rep.CheckDowns(downs, faults, lapsed, r.cfg.ClaimTTL)
	}
	rep.Pressure = r.pressure
	rep.Other = append(rep.Other, r.other...)
	if r.cfg.FromBin != "" {
		ctx := context.Background()
		rep.Upgrade = upgradeFigures(buildName(ctx, r.cfg.FromBin), buildName(ctx, r.cfg.Bin), r.replaced, calls, rep)
	}
	return rep
}

// adoptions reads the groups each node took over from a peer out of its
// log (fleet.LogGroupTakenOver lines, text format), in the load's time.
func (r *run) adoptions() []Adoption {
	var out []Adoption
	for _, n := range r.nodes {
		b, err := os.ReadFile(filepath.Join(r.cfg.Out, n.Name+".log"))
		if err != nil {
			r.violation("reading %s's log for ownership changes: %v", n.Name, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, `msg="`+fleet.LogGroupTakenOver+`"`) {
				continue
			}
			at, group := logField(line, "time"), logField(line, "group")
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil || group == "" {
				continue
			}
			out = append(out, Adoption{Node: n.Name, Group: group, At: t.Sub(r.t0)})
		}
	}
	return out
}

// logField is the value of key in a text log line ("" when absent).
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func first(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return ss[0]
}

func writeSecret(path string) error {
	b := make([]byte, 24)
	rand.Read(b)
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)+"\n"), 0o600)
}

// client is a client of node with token that tries each call once.
func (r *run) client(n *Node, token string) *client.Client {
	c := client.New(n.URL(), token)
	c.HTTPClient = &http.Client{Transport: r.tr}
	c.Retry = client.Backoff{Min: 100 * time.Millisecond, Max: time.Second, Attempts: 1}
	return c
}

// startFleet starts the three nodes, serially (each once the previous one
// answers /healthz: a rolling start) or together, and then waits for
// /readyz 200 at all three.
func (r *run) startFleet(ctx context.Context) error {
	cfg := r.cfg
	t0 := time.Now()
	if err := r.startNATS(ctx); err != nil {
		return err
	}
	for i, n := range r.nodes {
		if err := n.Start(); err != nil {
			return err
		}
		if cfg.Start != "serial" {
			continue
		}
		took, err := n.waitStatus(ctx, r.probe, "/healthz", cfg.ReadyWithin)
		if err != nil {
			return fmt.Errorf("rolling start: %v", err)
		}
		ready := probe(ctx, r.probe, n.URL()+"/readyz")
		r.logf("rolling start: %s /healthz 200 after %.1fs; its /readyz says %d with %d of 3 nodes started", n.Name, took.Seconds(), ready, i+1)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(r.nodes))
	for i, n := range r.nodes {
		wg.Go(func() {
			var took time.Duration
			if _, errs[i] = n.waitStatus(ctx, r.probe, "/readyz", cfg.ReadyWithin); errs[i] == nil {
				took = time.Since(t0)
				r.logf("%s start: %s /readyz 200 %.1fs after the first node started", cfg.Start, n.Name, took.Seconds())
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("%s start: the fleet did not come up: %v", cfg.Start, err)
		}
	}
	return nil
}

// setup creates the groups (spread over the nodes, each planned
// Ranges0 ranges) and registers the workers at their nodes.
func (r *run) setup(ctx context.Context) error {
	cfg := r.cfg
	for _, n := range r.nodes {
		tok, err := n.AdminToken()
		if err != nil {
			return err
		}
		r.admin[n.Name] = r.client(n, tok)
	}
	r.tokens = map[string]string{}
	deadline := time.Now().Add(90 * time.Second)
	try := func(what string, fn func(ctx context.Context) error) error {
		for {
			cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
			err := fn(cctx)
			cancel()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("setup: %s: %v", what, err)
			}
			sleepCtx(ctx, 300*time.Millisecond)
		}
	}
	rs, start := cfg.RangeSize, int64(1)
	for g := range cfg.Groups {
		name := groupName(g)
		a := r.admin[r.nodes[g%len(r.nodes)].Name]
		if err := try("create "+name, func(ctx context.Context) error {
			_, _, err := a.PutGroup(ctx, name, client.GroupSpec{RangeSize: &rs, Start: &start})
			return err
		}); err != nil {
			return err
		}
		if err := try("plan "+name, func(ctx context.Context) error {
			_, err := a.PlanTail(ctx, name, int64(cfg.Ranges0)*rs)
			return err
		}); err != nil {
			return err
		}
	}
	one := int64(1)
	for _, n := range r.nodes {
		for i := 1; i <= cfg.WorkersPerNode; i++ {
			name := fmt.Sprintf("w%s%d", n.Name[len(n.Name)-1:], i)
			if err := try("register "+name, func(ctx context.Context) error {
				nd, err := r.admin[n.Name].RegisterNode(ctx, client.NodeSpec{Name: name, Capacity: &one})
				if err == nil {
					r.tokens[name] = nd.Token
				}
				return err
			}); err != nil {
				return err
			}
		}
	}
	r.logf("setup: %d groups created and planned %d ranges each, %d workers registered", cfg.Groups, cfg.Ranges0, len(r.tokens))
	return nil
}

func groupName(g int) string { return fmt.Sprintf("ff.g%02d", g) }

// finish notes an acknowledged finish of group up to end.
func (r *run) finish(group string, end int64) {
	r.heldMu.Lock()
	r.finished[group] = max(r.finished[group], end)
	r.heldMu.Unlock()
}

// plan keeps group g's tail PlanAhead ranges beyond its highest finish
// acknowledged, as a source growing with the work would: workers holding
// it always have work, and the backlog left to drain stays small. It asks
// the nodes in turn until one answers (admin writes are carried to the
// group's owner).
func (r *run) plan(ctx context.Context, g int) {
	cfg := r.cfg
	name := groupName(g)
	rs := cfg.RangeSize
	high := int64(cfg.Ranges0) * rs
	t := time.NewTicker(cfg.PlanEvery)
	defer t.Stop()
	for turn := g; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.heldMu.Lock()
		want := r.finished[name] + int64(cfg.PlanAhead)*rs
		r.heldMu.Unlock()
		if want <= high {
			continue
		}
		// high moves only once a node has taken the plan: a plan every
		// node refused (503 while the streams elect) is asked again on
		// the next tick, or the group's work would end with its plan and
		// the run fault a fleet with less and less to do.
		for range r.nodes {
			n := r.nodes[turn%len(r.nodes)]
			turn++
			c := Call{Node: n.Name, Worker: "planner", Group: name, Kind: KindPlan, Next: want}
			cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
			c.Sent = r.since()
			_, err := r.admin[n.Name].PlanTail(cctx, name, want)
			c.Recv = r.since()
			cancel()
			c.Status = http.StatusOK
			if err != nil {
				c.Status, c.Err = statusOf(err), shortErr(err)
			}
			r.hist.Add(c)
			if err == nil {
				high = want
			}
			if err == nil || ctx.Err() != nil {
				break
			}
		}
	}
}

// hold counts a lease of node's workers taken (+1) or ended (-1).
func (r *run) hold(node string, d int) {
	r.heldMu.Lock()
	r.held[node] += d
	r.heldMu.Unlock()
}

// victim picks the node for the i-th fault: the nodes in turn from node-b
// on, skipping nodes whose workers hold nothing now (a fault there tests
// little) unless none holds anything.
func (r *run) victim(i int) *Node {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	for k := range r.nodes {
		n := r.nodes[(i+1+k)%len(r.nodes)]
		if r.held[n.Name] > 0 {
			return n
		}
	}
	return r.nodes[(i+1)%len(r.nodes)]
}

// faults makes the faults one at a time, a gap after each, the victims
// in turn from node-b on (see victim).
func (r *run) faults(ctx context.Context) {
	cfg := r.cfg
	var kinds []string
	for i := 0; i < max(cfg.Kills, cfg.Pauses, cfg.Partitions, cfg.Removals); i++ {
		if i < cfg.Kills {
			kinds = append(kinds, "kill")
		}
		if i < cfg.Pauses {
			kinds = append(kinds, "pause")
		}
		if i < cfg.Partitions {
			kinds = append(kinds, "partition")
		}
		if i < cfg.Removals {
			kinds = append(kinds, "remove")
		}
	}
	for i, kind := range kinds {
		if ctx.Err() != nil {
			return
		}
		n := r.victim(i)
		f := Fault{Kind: kind, Node: n.Name, Start: r.since()}
		var err error
		switch kind {
		case "kill":
			if err = n.Kill(); err == nil {
				err = r.natsFault(n, (*Node).Kill)
				r.logf("fault %d/%d: SIGKILL %s%s", i+1, len(kinds), n.Name, r.andNATS(n))
				sleepCtx(ctx, cfg.Down)
				f.End = r.since()
				if nerr := r.natsFault(n, (*Node).Start); err == nil {
					err = nerr
				}
				if err == nil {
					err = r.startAgain(ctx, n, "restarted on its data")
				}
			}
		case "pause":
			if err = n.Pause(); err == nil {
				err = r.natsFault(n, (*Node).Pause)
				r.logf("fault %d/%d: SIGSTOP %s%s for %s", i+1, len(kinds), n.Name, r.andNATS(n), cfg.PauseFor)
				sleepCtx(ctx, cfg.PauseFor)
				err = errors.Join(err, r.natsFault(n, (*Node).Resume), n.Resume())
				f.End = r.since()
				r.logf("  SIGCONT %s", n.Name)
			}
		case "remove":
			err = r.remove(ctx, n, i, len(kinds))
			f.End = r.since()
		case "partition":
			if err = r.net.Cut(ctx, n.Name); err == nil {
				r.logf("fault %d/%d: partition: %s's route link down for %s (its HTTP stays up)%s", i+1, len(kinds), n.Name, cfg.CutFor, r.andNATS(n))
				sleepCtx(ctx, cfg.CutFor)
				err = r.net.Heal(context.WithoutCancel(ctx), n.Name)
				f.End = r.since()
				r.logf("  %s's route link up", n.Name)
			}
		}
		if f.End == 0 {
			f.End = r.since()
		}
		r.hist.AddFault(f)
		if err != nil {
			r.violation("fault %s of %s: %v", kind, n.Name, err)
		}
		sleepCtx(ctx, cfg.Gap)
	}
}

// converge polls the nodes' catalogs until they agree and every range is
// done, for at most within; with windows it reads the final windows too.
func (r *run) converge(ctx context.Context, within time.Duration, windows bool) (*Final, bool) {
	deadline := time.Now().Add(within)
	// What it waits for, said every 15 s: a slow drain names its cause
	// even when it ends in time.
	said := time.Now()
	for {
		final := r.read(ctx)
		if ok := len(unconverged(final)) == 0 && len(final.Unsettled) == 0; ok || time.Now().After(deadline) || ctx.Err() != nil {
			if windows {
				r.readWindows(ctx, final)
			}
			return final, ok
		}
		if time.Since(said) >= 15*time.Second {
			left := append(unconverged(final), final.Unsettled...)
			r.logf("  still waiting for %d: e.g. %s", len(left), first(left))
			said = time.Now()
		}
		sleepCtx(ctx, time.Second)
	}
}

// read reads every node's catalog.
func (r *run) read(ctx context.Context) *Final {
	final := &Final{Nodes: slices.Clone(nodeNames), Catalogs: map[string]map[string]GroupView{}, Windows: map[string]*Window{}, WindowErrs: map[string]string{}}
	// The fleet's outboxes before and after the catalogs: settled at both,
	// with nothing published between, means the catalogs read hold every
	// change.
	before, atBefore := r.unsettled(ctx)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Go(func() {
			cat, err := r.catalog(ctx, n)
			if err != nil {
				return
			}
			mu.Lock()
			final.Catalogs[n.Name] = cat
			mu.Unlock()
		})
	}
	wg.Wait()
	after, atAfter := r.unsettled(ctx)
	final.Unsettled = append(before, after...)
	if !maps.Equal(atBefore, atAfter) {
		final.Unsettled = append(final.Unsettled, fmt.Sprintf("changes published while the catalogs were read: %v, then %v", atBefore, atAfter))
	}
	return final
}

// unsettled says what keeps the fleet from having seen every change (see
// Final.Unsettled): it asks each node for its outbox and how far it has
// folded each peer's events. It returns too each node's published
// position.
func (r *run) unsettled(ctx context.Context) ([]string, map[string]uint64) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out []string
	sts := map[string]*leasehold.FleetStatus{}
	for _, n := range r.nodes {
		st, err := r.admin[n.Name].Peers(ctx)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: its fleet status not read: %v", n.Name, err))
			continue
		}
		sts[n.Name] = st
		if st.Unpublished > 0 {
			out = append(out, fmt.Sprintf("%s: %d event(s) of its not yet acknowledged by the stream", n.Name, st.Unpublished))
		}
	}
	published := map[string]uint64{}
	for n, st := range sts {
		published[n] = st.Published
	}
	for _, m := range slices.Sorted(maps.Keys(sts)) {
		folded := map[string]uint64{}
		for _, p := range sts[m].Peers {
			folded[p.Name] = p.Folded
		}
		for _, n := range slices.Sorted(maps.Keys(sts)) {
			if n != m && folded[n] < sts[n].Published {
				out = append(out, fmt.Sprintf("%s: %s's events folded to stream position %d of %d", m, n, folded[n], sts[n].Published))
			}
		}
	}
	return out, published
}

// catalog reads node's view of every group: the owner it names and the
// ranges.
func (r *run) catalog(ctx context.Context, n *Node) (map[string]GroupView, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	a := r.admin[n.Name]
	groups, err := a.AllGroups(ctx)
	if err != nil {
		return nil, err
	}
	cat := map[string]GroupView{}
	for _, g := range groups {
		d, err := a.Group(ctx, g.Name)
		if err != nil {
			return nil, err
		}
		v := GroupView{Owner: n.Name}
		if d.Peer != nil {
			v.Owner = d.Peer.Owner
		}
		rs, err := a.AllRanges(ctx, g.Name, "")
		if err != nil {
			return nil, err
		}
		for _, rg := range rs {
			v.Ranges = append(v.Ranges, RangeView{Span{rg.Start, rg.End}, string(rg.Status)})
		}
		slices.SortFunc(v.Ranges, func(a, b RangeView) int { return cmpSpan(a.Span, b.Span) })
		cat[g.Name] = v
	}
	return cat, nil
}

// readWindows downloads each group's stored window at its owner.
func (r *run) readWindows(ctx context.Context, final *Final) {
	groups := map[string]bool{}
	for _, cat := range final.Catalogs {
		for g := range cat {
			groups[g] = true
		}
	}
	for g := range groups {
		owner := final.Owner(g)
		a := r.admin[owner]
		if a == nil {
			final.WindowErrs[g] = fmt.Sprintf("owner %q is no node of the fleet", owner)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sr, err := a.GetGroupSnapshot(cctx, g, 0)
		if err == nil && sr != nil {
			var body []byte
			if body, err = io.ReadAll(io.LimitReader(sr, 16<<20)); err == nil {
				final.Windows[g], err = DecodeWindow(body)
			}
			sr.Close()
		}
		cancel()
		if err != nil {
			final.WindowErrs[g] = err.Error()
		}
	}
}
