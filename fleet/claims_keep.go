package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
)

// Start renews this node's life every TTL/6, gives its claims up when the
// life goes unrenewed past its margin, asks the Keeper about each claim
// about every TTL/3 (a batch at a time) and releases those not kept, and
// watches the bucket for claims taken or deleted by others, until ctx
// ends or Stop. Stop waits for all that; neither the claims nor the life
// are released: they lapse after the TTL, as a killed node's do. Held is
// false after Stop. Errors: service.ErrStarted.
func (c *Claims) Start(ctx context.Context) error {
	return c.Begin(ctx, c.run,
		func(ctx context.Context) error { c.watch(ctx); return nil },
		func(ctx context.Context) error { c.countPeers(ctx); return nil })
}

// run renews the life and keeps the claims (see Start) until ctx ends.
func (c *Claims) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()

	// The tick is fine enough to catch the margin passing close to when it
	// does and to renew the life near TTL/6 after its last write.
	tick := min(c.renewEvery(), c.margin) / 4
	t := time.NewTicker(tick)
	defer t.Stop()
	renewing := make(chan struct{}, 1) // one renewal in flight
	keeping := make(chan struct{}, 1)  // one batch of Keep in flight
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.tellLapsed()
		if c.lifeDue() {
			select {
			case renewing <- struct{}{}:
				wg.Go(func() {
					defer func() { <-renewing }()
					rctx, cancel := context.WithTimeout(ctx, c.renewEvery())
					defer cancel()
					err := c.Renew(rctx)
					switch {
					case err == nil || ctx.Err() != nil:
					case leasehold.KindOf(err) == leasehold.KindConflict:
						// Said once at start; the earlier life lapses by itself.
						c.log.Debug("claims: waiting to begin this node's life", "err", err)
					default:
						c.log.Warn("claims: renewing this node's life failed", "err", err)
					}
				})
			default: // the last renewal is still waiting on NATS
			}
		}
		if c.keeper == nil {
			continue
		}
		select {
		case keeping <- struct{}{}:
		default:
			continue
		}
		batch := c.keepDue()
		if len(batch) == 0 {
			<-keeping
			continue
		}
		wg.Go(func() {
			defer func() { <-keeping }()
			c.keepOnly(ctx, batch)
		})
	}
}

// keepDue lists up to claimKeepBatch held claims last kept TTL/3 ago or
// more.
func (c *Claims) keepDue() []string {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var groups []string
	for g, s := range c.held {
		if !now.Before(s.kept.Add(c.ttl / 3)) {
			groups = append(groups, g)
			if len(groups) == claimKeepBatch {
				break
			}
		}
	}
	return groups
}

// keepOnly asks the Keeper about groups and releases those it does not keep.
func (c *Claims) keepOnly(ctx context.Context, groups []string) {
	c.mu.Lock()
	for g, r := range c.released {
		if time.Since(r.at) > releasedKeep {
			delete(c.released, g)
		}
	}
	c.mu.Unlock()
	kept, err := c.keeper.Keep(ctx, groups)
	if err != nil {
		c.log.Warn("claims: asking which claims to keep", "err", err)
		kept = groups
	}
	want := make(map[string]bool, len(kept))
	for _, g := range kept {
		want[g] = true
	}
	now := c.now()
	var idle []string
	c.mu.Lock()
	for _, g := range groups {
		if !want[g] {
			idle = append(idle, g)
		} else if s, ok := c.held[g]; ok {
			s.kept = now
		}
	}
	c.mu.Unlock()
	for _, g := range idle {
		rctx, cancel := context.WithTimeout(ctx, c.ttl/3)
		if err := c.Release(rctx, g); err != nil {
			c.log.Debug("claims: releasing an idle claim", "group", g, "err", err)
		}
		cancel()
	}
}

// watch follows every claim in the bucket and drops this node's claims
// that another node wrote over or someone deleted, so they stop being
// held at once. It restarts the watch while NATS is unreachable.
func (c *Claims) watch(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := c.kv.WatchAll(ctx)
		if err != nil {
			c.log.Warn("claims: watch failed, retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(c.margin):
			}
			continue
		}
		for e := range w.Updates() {
			if e != nil {
				c.seen(e)
			}
		}
		w.Stop()
	}
}

// seen handles one watched entry: a write or a delete newer than this
// node's own write of a claim it holds, by anyone but this life, means
// the claim is gone.
func (c *Claims) seen(e jetstream.KeyValueEntry) {
	group := claimGroup(e.Key())
	c.mu.Lock()
	s, ok := c.held[group]
	var rev uint64
	if ok {
		rev = s.rev
	}
	life := c.life
	c.mu.Unlock()
	if !ok || e.Revision() <= rev {
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		if cl, err := c.claimOf(e.Key(), e.Value()); err == nil && cl.Node == c.node && cl.Life == life {
			return // this life's own write, seen before Claim returned
		}
	}
	c.drop(group, rev, "overwritten or deleted")
}

// drop forgets group's claim if it is still at rev, and tells Losses.
func (c *Claims) drop(group string, rev uint64, why string) {
	c.mu.Lock()
	s, ok := c.held[group]
	if !ok || s.rev != rev {
		c.mu.Unlock()
		return
	}
	delete(c.held, group)
	c.mu.Unlock()
	c.log.Warn("claims: claim lost", "group", group, "why", why)
	c.lostCount.Inc()
	c.tellLost(group)
}

// tellLost queues groups whose claims were lost for TakeLost and signals
// Losses; it never blocks.
func (c *Claims) tellLost(groups ...string) {
	if len(groups) == 0 {
		return
	}
	c.mu.Lock()
	c.lostQ = append(c.lostQ, groups...)
	c.mu.Unlock()
	select {
	case c.losses <- struct{}{}:
	default:
	}
}

// Losses is signalled when claims were lost (the watch found them taken
// or deleted, or the node's life went unrenewed until its margin or was
// found lapsed) since the last TakeLost; Held is false for them already.
// One reader takes them: Ownership.
func (c *Claims) Losses() <-chan struct{} { return c.losses }

// TakeLost returns the groups whose claims were lost since the last call,
// oldest first, and forgets them.
func (c *Claims) TakeLost() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lost := c.lostQ
	c.lostQ = nil
	return lost
}
