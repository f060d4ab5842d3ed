package fleetfault

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The upgrade mode (Config.FromBin): the fleet starts on an older build
// and, under the load, each node in turn is stopped, started again on
// Config.Bin with the same data directory, and waited for (its /readyz,
// then the fleet settled) before the next: a rolling upgrade as an
// operator would make it. Each replacement is recorded as a fault of kind
// "upgrade" (from the stop to the new build's /readyz 200), so the checks
// and the takeover figures hold it as they hold a kill.

// Replace stops of an upgraded node.
const (
	ReplaceTerm = "term" // SIGTERM, as a service manager stops it
	ReplaceKill = "kill" // SIGKILL: a crash mid-upgrade
)

// Replacement is what one node's upgrade took.
type Replacement struct {
	Node string
	// Stop is how the old build was stopped ("term" or "kill"); Graceful
	// whether it exited on the SIGTERM within the grace.
	Stop     string
	Graceful bool
	// Stopped is from the signal to the old process gone; Ready from the
	// new build's start to its /readyz 200; Settled from then to every
	// node ready and seeing every member up.
	Stopped, Ready, Settled time.Duration
	// End is when the fleet had settled, since the load began.
	End time.Duration
}

// UpgradeFigures is the upgrade mode's part of the report.
type UpgradeFigures struct {
	From, To     string // the builds, as `leasehold version` names them
	Replacements []Replacement
	// FinishesBefore counts the finishes acknowledged before the last
	// replacement had settled; LostBefore those of them the check found
	// lost (they are among the report's LostFinishes).
	FinishesBefore, LostBefore int
	// GroupsAfter are the groups with a finish acknowledged after the
	// last replacement had settled (the fleet working on the new build),
	// of Groups.
	GroupsAfter, Groups int
}

// upgradeFigures sums up the replacements against the history and the
// checked report.
func upgradeFigures(from, to string, reps []Replacement, calls []Call, rep *Report) *UpgradeFigures {
	u := &UpgradeFigures{From: from, To: to, Replacements: reps}
	if len(reps) == 0 {
		return u
	}
	end := reps[len(reps)-1].End
	groups, after := map[string]bool{}, map[string]bool{}
	for _, c := range calls {
		if c.Group != "" {
			groups[c.Group] = true
		}
		if c.Kind != KindFinish || !c.Acked() {
			continue
		}
		if c.Recv < end {
			u.FinishesBefore++
		} else if c.Sent > end {
			after[c.Group] = true
		}
	}
	for _, l := range rep.LostFinishes {
		if l.Finish.Recv < end {
			u.LostBefore++
		}
	}
	u.Groups, u.GroupsAfter = len(groups), len(after)
	return u
}

// Print writes the replacements and the figures.
func (u *UpgradeFigures) Print(w io.Writer) {
	fmt.Fprintf(w, "upgrade: from %s to %s, %d node(s) replaced one at a time under the load\n", u.From, u.To, len(u.Replacements))
	var ready []time.Duration
	for _, p := range u.Replacements {
		how := "SIGKILL, gone in"
		if p.Stop == ReplaceTerm {
			how = "SIGTERM, exited in"
			if !p.Graceful {
				how = "SIGTERM, not gone in the grace: SIGKILL after"
			}
		}
		fmt.Fprintf(w, "  %s: %s %.1fs; new build /readyz 200 %.1fs after its start; fleet settled %.1fs later\n",
			p.Node, how, p.Stopped.Seconds(), p.Ready.Seconds(), p.Settled.Seconds())
		ready = append(ready, p.Ready)
	}
	if len(ready) > 0 {
		slices.Sort(ready)
		fmt.Fprintf(w, "  time to ready after a replacement: min %.1fs, max %.1fs\n", ready[0].Seconds(), ready[len(ready)-1].Seconds())
	}
	fmt.Fprintf(w, "  finishes acknowledged before the last replacement settled: %d, lost at the end: %d\n", u.FinishesBefore, u.LostBefore)
	fmt.Fprintf(w, "  groups with a finish acknowledged after it (on the new build): %d of %d\n", u.GroupsAfter, u.Groups)
}

// buildName is what `bin version` says of the build, bin itself when it
// says nothing.
func buildName(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if s := strings.TrimSpace(string(out)); err == nil && s != "" {
		return fmt.Sprintf("%q", s)
	}
	return bin
}

// upgrade replaces the nodes one at a time, node-a first, each only once
// the fleet has settled after the one before, with a gap after each.
func (r *run) upgrade(ctx context.Context) {
	cfg := r.cfg
	// From a build that signs nothing (it knows no --fleet-accept-unsigned)
	// to one that signs, the new build's nodes believe the earlier ones'
	// unsigned messages during the roll, as README's upgrade says.
	var transition []string
	if knowsFlag(ctx, cfg.Bin, transitionFlag) && !knowsFlag(ctx, cfg.FromBin, transitionFlag) {
		transition = []string{transitionFlag}
		r.logf("upgrade: the new build's nodes start with %s (the earlier build signs nothing)", transitionFlag)
	}
	for i, n := range r.nodes {
		if ctx.Err() != nil {
			return
		}
		f := Fault{Kind: "upgrade", Node: n.Name, Start: r.since()}
		p := Replacement{Node: n.Name, Stop: cfg.Replace}
		t0 := time.Now()
		if cfg.Replace == ReplaceKill {
			if err := n.Kill(); err != nil {
				r.violation("upgrade of %s: %v", n.Name, err)
			}
		} else {
			p.Graceful = n.Stop(cfg.StopGrace)
		}
		p.Stopped = time.Since(t0)
		r.logf("upgrade %d/%d: %s stopped (%s) in %.1fs; starting it on the new build", i+1, len(r.nodes), n.Name, cfg.Replace, p.Stopped.Seconds())
		n.SetBin(cfg.Bin, transition...)
		err := n.Start()
		if err == nil {
			p.Ready, err = n.waitStatus(ctx, r.probe, "/readyz", cfg.ReadyWithin)
		}
		f.End = r.since()
		r.hist.AddFault(f)
		if err != nil {
			r.violation("upgrade of %s: the new build did not come up: %v", n.Name, err)
			return
		}
		t1 := time.Now()
		if why := r.settle(ctx, cfg.ReadyWithin); why != "" {
			r.violation("upgrade of %s: the fleet did not settle within %s: %s", n.Name, cfg.ReadyWithin, why)
			return
		}
		p.Settled, p.End = time.Since(t1), r.since()
		r.replaced = append(r.replaced, p)
		r.logf("  %s on the new build: /readyz 200 after %.1fs; the fleet settled %.1fs later", n.Name, p.Ready.Seconds(), p.Settled.Seconds())
		sleepCtx(ctx, cfg.Gap)
	}
}

// settle waits, for at most within, until every node answers /readyz 200
// and its /api/v1/peers shows it connected, every stream online and every
// other member up. It returns what was still amiss when it gave up, ""
// once settled.
func (r *run) settle(ctx context.Context, within time.Duration) string {
	deadline := time.Now().Add(within)
	for {
		why := r.unsettledMembers(ctx)
		if why == "" || time.Now().After(deadline) || ctx.Err() != nil {
			return why
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func (r *run) unsettledMembers(ctx context.Context) string {
	for _, n := range r.nodes {
		if st := probe(ctx, r.probe, n.URL()+"/readyz"); st != 200 {
			return fmt.Sprintf("%s: /readyz %d", n.Name, st)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := r.admin[n.Name].Peers(cctx)
		cancel()
		switch {
		case err != nil:
			return fmt.Sprintf("%s: /api/v1/peers: %v", n.Name, err)
		case !st.Connected:
			return fmt.Sprintf("%s: not connected to NATS", n.Name)
		case st.Offline != "":
			return fmt.Sprintf("%s: offline: %s", n.Name, st.Offline)
		}
		// An older build may name no state: its peers count as up.
		states := map[string]string{}
		for _, p := range st.Peers {
			states[p.Name] = p.State
		}
		for _, m := range nodeNames {
			if s, ok := states[m]; m != n.Name && (!ok || s != "" && s != "up") {
				return fmt.Sprintf("%s sees %s %q (members: %v)", n.Name, m, s, slices.Sorted(maps.Keys(states)))
			}
		}
	}
	return ""
}

// transitionFlag is the new build's flag for a rolling upgrade from a
// build that signs nothing.
const transitionFlag = "--fleet-accept-unsigned"

// knowsFlag reports whether bin's serve knows flag (its -h names it).
func knowsFlag(ctx context.Context, bin, flag string) bool {
	out, _ := exec.CommandContext(ctx, bin, "serve", "-h").CombinedOutput()
	return bytes.Contains(out, []byte(strings.TrimLeft(flag, "-")))
}
