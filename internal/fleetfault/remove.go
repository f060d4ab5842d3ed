package fleetfault

import (
	"context"
	"fmt"
	"time"
)

// remove is the fault of a machine lost and removed from the fleet by
// its operator, then found again: n (and its NATS server) is killed,
// removed at another member as soon as that member takes the removal (a
// removal of a member whose life is still renewed is refused until it
// lapses), left out for Down while its groups go on elsewhere, approved
// again there and started on its data, rejoining. Every check then holds
// as after any fault: nothing acknowledged lost, one holder at a time,
// every node agreeing at the end.
func (r *run) remove(ctx context.Context, n *Node, i, of int) error {
	if err := n.Kill(); err != nil {
		return err
	}
	err := r.natsFault(n, (*Node).Kill)
	at := r.nodes[0]
	for _, o := range r.nodes {
		if o != n {
			at = o
			break
		}
	}
	r.logf("fault %d/%d: SIGKILL %s%s, then removed from the fleet at %s", i+1, of, n.Name, r.andNATS(n), at.Name)
	t0 := time.Now()
	if rerr := r.untilTaken(ctx, func(ctx context.Context) error { return r.admin[at.Name].RemoveMember(ctx, n.Name, false) }); rerr != nil {
		return fmt.Errorf("removing %s at %s: %w", n.Name, at.Name, rerr)
	}
	r.logf("  %s removed at %s %.1fs after its kill", n.Name, at.Name, time.Since(t0).Seconds())
	sleepCtx(ctx, r.cfg.Down)
	if aerr := r.untilTaken(ctx, func(ctx context.Context) error { return r.admin[at.Name].ApproveMember(ctx, n.Name) }); aerr != nil {
		return fmt.Errorf("approving %s again at %s: %w", n.Name, at.Name, aerr)
	}
	if nerr := r.natsFault(n, (*Node).Start); err == nil {
		err = nerr
	}
	if err == nil {
		err = r.startAgain(ctx, n, "approved again at "+at.Name+" and restarted on its data")
	}
	return err
}

// startAgain starts a stopped node on its data and waits for its
// /healthz, saying what was done (what) and how long it took.
func (r *run) startAgain(ctx context.Context, n *Node, what string) error {
	if err := n.Start(); err != nil {
		return err
	}
	took, err := n.waitStatus(ctx, r.probe, "/healthz", r.cfg.ReadyWithin)
	r.logf("  %s %s; /healthz 200 after %.1fs", n.Name, what, took.Seconds())
	return err
}

// untilTaken makes an admin call until it is taken, for at most three
// claim TTLs and 10 s (a life lapses within one), each try bounded.
func (r *run) untilTaken(ctx context.Context, call func(context.Context) error) error {
	deadline := time.Now().Add(3*r.cfg.ClaimTTL + 10*time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		err := call(cctx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}
