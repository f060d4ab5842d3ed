package peers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"leasehold"
)

// Claim is the value of a group's key in ClaimsBucket: which node owns the
// group and when it last wrote the claim (on its own clock; the server's
// timestamp of the entry is what the bucket's TTL runs from).
type Claim struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

// ClaimsConfig is how a node keeps its ownership claims.
type ClaimsConfig struct {
	// Node is this node's fleet name, the Node of every claim it writes.
	Node string
	// TTL is how long a claim lasts unrenewed; it is the bucket's TTL, so
	// the server lets an unrenewed claim lapse by itself. Every node of a
	// fleet must use the same TTL.
	TTL time.Duration
	// Margin is how long before its claim could lapse a node stops holding
	// a group it cannot renew (default TTL/4). It covers the skew between
	// this node's clock and the NATS servers' and the time a caller takes
	// between asking Held and acting on the answer.
	Margin time.Duration
	// Replicas of the bucket (default 1).
	Replicas int
	// NowFunc is the clock (default time.Now). It must run at the wall
	// clock's rate: the server's TTL does.
	NowFunc func() time.Time
	// LostFunc, if set, is told of a group the moment its claim is lost: a
	// renewal or the watch found it taken or deleted, or it went unrenewed
	// until its margin. It is called from the claims' own goroutines, never
	// with a lock held; it must not block for long.
	LostFunc func(group string)
	// KeepFunc, if set, is asked which of the claims due for renewal are
	// still wanted; the others are released instead of renewed, so a node
	// renews the claims of the groups in work, not of every group it ever
	// touched. It is called from the renewal goroutine, never with a lock
	// held; on its error every claim is kept.
	KeepFunc func(ctx context.Context, groups []string) ([]string, error)
	Logger   *slog.Logger
}

// Claims keeps this node's ownership claims on groups in the ClaimsBucket
// key-value bucket. A claim is created and renewed by compare-and-set on
// the key's revision, and that revision is the fleet-level fence: it rises
// at every write and no two claims ever share one.
//
// What this node holds is answered from memory (Held), never from the
// network, so a node cut off from NATS stops holding its groups on time by
// itself: a claim is held until the start of its last successful write +
// TTL − Margin. The server keeps the claim until at least that write's
// timestamp + TTL, which is later, so no other node can claim the group
// while this one still holds it. Run renews claims and watches the bucket.
type Claims struct {
	kv     jetstream.KeyValue
	node   string
	ttl    time.Duration
	margin time.Duration
	now    func() time.Time
	lost   func(string)
	keep   func(context.Context, []string) ([]string, error)
	log    *slog.Logger

	mu     sync.Mutex
	held   map[string]*claimState // by group name
	closed bool

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	heldGauge       prometheus.GaugeFunc
	lostCount       prometheus.Counter
	renewalFailures prometheus.Counter
}

// claimState is one claim this node wrote.
type claimState struct {
	rev  uint64    // the revision it wrote last: the fence
	from time.Time // when that write started: the claim is held from it
	// told is set once LostFunc heard of the claim going unrenewed past
	// its margin, so it is told once a lapse.
	told bool
}

// until is when the claim stops being held unless renewed.
func (s *claimState) until(ttl, margin time.Duration) time.Time {
	return s.from.Add(ttl - margin)
}

// claimRenewWorkers bounds the renewals in flight at once.
const claimRenewWorkers = 8

// NewClaims creates or updates the claims bucket (history 1, the TTL, the
// replicas) and returns the node's Claims, holding nothing yet. Errors:
// invalid config, unavailable NATS.
func NewClaims(ctx context.Context, js jetstream.JetStream, cfg ClaimsConfig) (*Claims, error) {
	if !leasehold.ValidNodeName(cfg.Node) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "node name %q is not valid", cfg.Node)
	}
	if cfg.TTL <= 0 {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "claim TTL %s must be positive", cfg.TTL)
	}
	if cfg.Margin == 0 {
		cfg.Margin = cfg.TTL / 4
	}
	if cfg.Margin <= 0 || cfg.Margin >= cfg.TTL*2/3 {
		// A renewal every TTL/3 must land before the claim stops being held.
		return nil, leasehold.Errorf(leasehold.KindInvalid, "claim margin %s must be above 0 and below 2/3 of the TTL %s", cfg.Margin, cfg.TTL)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ClaimsBucket,
		Description: "leasehold group ownership claims",
		History:     1,
		TTL:         cfg.TTL,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "claims bucket: %v", err)
	}
	c := &Claims{
		kv: kv, node: cfg.Node, ttl: cfg.TTL, margin: cfg.Margin, now: cfg.NowFunc,
		lost: cfg.LostFunc, keep: cfg.KeepFunc, log: cfg.Logger, held: map[string]*claimState{},
		lostCount: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_claims_lost_total", Help: "Group ownership claims lost: taken, deleted or unrenewed past the margin.",
		}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_claim_renewal_failures_total", Help: "Claim renewals that did not reach NATS or got no answer.",
		}),
	}
	c.heldGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasehold_claims_held", Help: "Groups this node holds an ownership claim on.",
	}, func() float64 { return float64(len(c.Owned())) })
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Collectors are the claims' metrics, for web.Metrics.Register.
func (c *Claims) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.heldGauge, c.lostCount, c.renewalFailures}
}

// Node is this node's fleet name.
func (c *Claims) Node() string { return c.node }

// ClaimKey is the key of group's claim. Key-value keys allow
// A-Za-z0-9-_=./ and no empty dot-separated token; group names may hold
// '+' and runs of dots or a final dot. Those are written =2B and =2E,
// and '=' never appears in a group name, so the key is readable for
// ordinary names and no two groups share one.
func ClaimKey(group string) string {
	if !strings.ContainsAny(group, "+.") {
		return group
	}
	var b strings.Builder
	for i := 0; i < len(group); i++ {
		switch ch := group[i]; {
		case ch == '+':
			b.WriteString("=2B")
		case ch == '.' && (i == len(group)-1 || group[i+1] == '.'):
			b.WriteString("=2E")
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// claimGroup is the group of a claim key, the inverse of ClaimKey.
func claimGroup(key string) string {
	if !strings.Contains(key, "=") {
		return key
	}
	return strings.NewReplacer("=2B", "+", "=2E", ".").Replace(key)
}

// Held reports whether this node holds group's claim now. It asks no one:
// true from a successful Claim or Renew until the start of the last
// successful write + TTL − Margin, false at once after a renewal or the
// watch found the claim taken, and false after Close.
func (c *Claims) Held(group string) bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.held[group]
	return ok && !c.closed && now.Before(s.until(c.ttl, c.margin))
}

// Rev is the revision this node last wrote group's claim at, 0 when it
// holds none.
func (c *Claims) Rev(group string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.held[group]; ok {
		return s.rev
	}
	return 0
}

// Owned lists the groups this node holds now, sorted.
func (c *Claims) Owned() []string {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	var groups []string
	for g, s := range c.held {
		if now.Before(s.until(c.ttl, c.margin)) {
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	return groups
}

// Claim makes this node group's owner: it creates the claim if there is
// none (or the last lapsed or was released) and renews it if it is already
// this node's, from this Claims or an earlier run of the node. It returns
// the fence, the claim's revision. Errors: invalid group name, conflict
// when another node's claim stands, unavailable NATS.
func (c *Claims) Claim(ctx context.Context, group string) (uint64, error) {
	if !leasehold.ValidGroupName(group) {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "group name %q is not valid", group)
	}
	key := ClaimKey(group)
	// A claim read between two writes of others can vanish or change under
	// us; a few rounds settle it.
	for range 3 {
		from := c.now()
		val, err := c.value(from)
		if err != nil {
			return 0, err
		}
		rev, err := c.kv.Create(ctx, key, val)
		if err == nil {
			c.record(group, rev, from)
			return rev, nil
		}
		if !claimAnswered(err) {
			return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: %v", group, err)
		}
		// The key exists: whose it is and at which revision decides.
		e, err := c.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // lapsed or released since
		}
		if err != nil {
			return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: %v", group, err)
		}
		cl, err := claimOf(e)
		if err != nil {
			// Whose it is cannot be told: it stands until it lapses.
			c.log.Warn("claims: unreadable claim", "group", group, "err", err)
			cl.Node = ""
		}
		if cl.Node != c.node && !c.lapsed(e) {
			return 0, leasehold.Errorf(leasehold.KindConflict, "group %q is owned by node %q", group, cl.Node)
		}
		// Ours (a renewal), or lapsed by the server's own timestamp though
		// not yet removed: write over that revision only.
		rev, err = c.kv.Update(ctx, key, val, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: %v", group, err)
		}
		c.record(group, rev, from)
		return rev, nil
	}
	return 0, leasehold.Errorf(leasehold.KindConflict, "group %q: its claim keeps changing, try again", group)
}

// lapsed reports whether another node's claim ran past its TTL, plus the
// margin for the server's clock against ours, by the server's timestamp of
// the write: the server removes such claims by itself, only a little late.
func (c *Claims) lapsed(e jetstream.KeyValueEntry) bool {
	return !c.now().Before(e.Created().Add(c.ttl + c.margin))
}

// Renew rewrites group's claim over the revision this node wrote last and
// returns the new fence. A claim found taken (the revision moved) is
// dropped at once and LostFunc told. Errors: lease lost when this node
// does not hold the claim or found it taken, unavailable NATS (the claim
// stays, and is held until its margin).
func (c *Claims) Renew(ctx context.Context, group string) (uint64, error) {
	c.mu.Lock()
	s, ok := c.held[group]
	var rev uint64
	if ok {
		rev = s.rev
	}
	c.mu.Unlock()
	if !ok {
		return 0, leasehold.Errorf(leasehold.KindLeaseLost, "node %q holds no claim on group %q", c.node, group)
	}
	from := c.now()
	val, err := c.value(from)
	if err != nil {
		return 0, err
	}
	next, err := c.kv.Update(ctx, ClaimKey(group), val, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		c.drop(group, rev, "taken")
		return 0, leasehold.Errorf(leasehold.KindLeaseLost, "the claim on group %q was taken or lapsed", group)
	}
	if err != nil {
		c.renewalFailures.Inc()
		return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "renew claim on group %q: %v", group, err)
	}
	c.mu.Lock()
	// Only over the write it renewed: a Release or a drop in between wins.
	if s, ok := c.held[group]; ok && s.rev == rev {
		s.rev, s.from, s.told = next, from, false
	}
	c.mu.Unlock()
	return next, nil
}

// Release gives group's claim up: this node stops holding it at once and
// deletes the claim if it is still the revision this node wrote. LostFunc
// is not told. Errors: unavailable NATS (the claim then lapses by itself).
func (c *Claims) Release(ctx context.Context, group string) error {
	c.mu.Lock()
	s, ok := c.held[group]
	delete(c.held, group)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	err := c.kv.Delete(ctx, ClaimKey(group), jetstream.LastRevision(s.rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "release claim on group %q: %v", group, err)
	}
	return nil
}

// Owner reads group's claim from the bucket and returns it with its
// revision. Errors: invalid group name, not found when no claim stands
// (none, released or lapsed), unavailable NATS.
func (c *Claims) Owner(ctx context.Context, group string) (Claim, uint64, error) {
	if !leasehold.ValidGroupName(group) {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindInvalid, "group name %q is not valid", group)
	}
	e, err := c.kv.Get(ctx, ClaimKey(group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindNotFound, "group %q has no owner", group)
	}
	if err != nil {
		return Claim{}, 0, leasehold.Wrap(leasehold.KindUnavailable, err, "owner of group %q: %v", group, err)
	}
	cl, err := claimOf(e)
	if err != nil {
		return Claim{}, 0, leasehold.Wrap(leasehold.KindInternal, err, "owner of group %q: %v", group, err)
	}
	if cl.Node != c.node && c.lapsed(e) {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindNotFound, "group %q has no owner (its claim lapsed)", group)
	}
	return cl, e.Revision(), nil
}

// ClaimFree claims, in order, up to max of candidates that no other node
// owns (unowned, released or lapsed), for a node whose workers find
// nothing to do, and returns the groups it won. Groups this node already
// holds are skipped. Errors: unavailable NATS, with what was won before.
func (c *Claims) ClaimFree(ctx context.Context, candidates []string, max int) ([]string, error) {
	var won []string
	for _, g := range candidates {
		if len(won) >= max {
			break
		}
		if c.Held(g) {
			continue
		}
		_, err := c.Claim(ctx, g)
		switch leasehold.ErrorKind(err) {
		case leasehold.KindConflict, leasehold.KindInvalid:
			continue
		}
		if err != nil {
			return won, err
		}
		won = append(won, g)
	}
	return won, nil
}

// Run renews held claims every TTL/3, tells LostFunc of claims that went
// unrenewed past their margin, and watches the bucket for claims taken or
// deleted by others, until ctx ends or Close. It returns nil then.
func (c *Claims) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.watch(ctx)
	}()

	// The tick is fine enough to catch a margin passing close to when it
	// does and to renew each claim near TTL/3 after its last write.
	tick := min(c.ttl/3, c.margin) / 4
	t := time.NewTicker(tick)
	defer t.Stop()
	renewing := make(chan struct{}, 1) // one batch of renewals in flight
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.tellLapsed()
		select {
		case renewing <- struct{}{}:
		default:
			continue // the last batch is still waiting on NATS
		}
		due := c.due()
		if len(due) == 0 {
			<-renewing
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-renewing }()
			c.renewAll(ctx, due)
		}()
	}
}

// due lists the held claims whose last write is TTL/3 old or more.
func (c *Claims) due() []string {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var groups []string
	for g, s := range c.held {
		if !now.Before(s.from.Add(c.ttl / 3)) {
			groups = append(groups, g)
		}
	}
	return groups
}

// renewAll renews groups claimWorkers at a time, each renewal bounded so
// a batch against an unreachable NATS ends before the next is due.
func (c *Claims) renewAll(ctx context.Context, groups []string) {
	if c.keep != nil {
		kept, err := c.keep(ctx, groups)
		if err != nil {
			c.log.Warn("claims: asking which claims to keep", "err", err)
		} else {
			want := make(map[string]bool, len(kept))
			for _, g := range kept {
				want[g] = true
			}
			var idle []string
			for _, g := range groups {
				if !want[g] {
					idle = append(idle, g)
				}
			}
			groups = kept
			for _, g := range idle {
				rctx, cancel := context.WithTimeout(ctx, c.ttl/3)
				if err := c.Release(rctx, g); err != nil {
					c.log.Debug("claims: releasing an idle claim", "group", g, "err", err)
				}
				cancel()
			}
		}
	}
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(claimRenewWorkers, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				rctx, cancel := context.WithTimeout(ctx, c.ttl/3)
				_, err := c.Renew(rctx, g)
				cancel()
				if err != nil && leasehold.ErrorKind(err) == leasehold.KindUnavailable && ctx.Err() == nil {
					c.log.Warn("claims: renewal failed", "group", g, "err", err)
				}
			}
		}()
	}
	for _, g := range groups {
		select {
		case next <- g:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
}

// tellLapsed tells LostFunc, once, of each claim that went unrenewed past
// its margin. The claim is kept: a renewal that still finds its revision
// makes it held again, since no one can have taken it meanwhile.
func (c *Claims) tellLapsed() {
	now := c.now()
	var lapsed []string
	c.mu.Lock()
	for g, s := range c.held {
		if !s.told && !now.Before(s.until(c.ttl, c.margin)) {
			s.told = true
			lapsed = append(lapsed, g)
		}
	}
	c.mu.Unlock()
	for _, g := range lapsed {
		c.log.Warn("claims: claim unrenewed past its margin, not held", "group", g)
		c.lostCount.Inc()
		if c.lost != nil {
			c.lost(g)
		}
	}
}

// watch follows every claim in the bucket and drops this node's claims
// that another node wrote over or someone deleted, so they stop being
// held before the next renewal would find out. It restarts the watch
// while NATS is unreachable.
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
// node's own last write of a claim it holds, by anyone but this node, means
// the claim is gone.
func (c *Claims) seen(e jetstream.KeyValueEntry) {
	group := claimGroup(e.Key())
	c.mu.Lock()
	s, ok := c.held[group]
	var rev uint64
	if ok {
		rev = s.rev
	}
	c.mu.Unlock()
	if !ok || e.Revision() <= rev {
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		if cl, err := claimOf(e); err == nil && cl.Node == c.node {
			return // this node's own renewal, seen before Renew returned
		}
	}
	c.drop(group, rev, "overwritten or deleted")
}

// drop forgets group's claim if it is still at rev, and tells LostFunc.
func (c *Claims) drop(group string, rev uint64, why string) {
	c.mu.Lock()
	s, ok := c.held[group]
	if !ok || s.rev != rev {
		c.mu.Unlock()
		return
	}
	delete(c.held, group)
	told := s.told
	c.mu.Unlock()
	c.log.Warn("claims: claim lost", "group", group, "why", why)
	if told {
		return // LostFunc already heard when it went unrenewed
	}
	c.lostCount.Inc()
	if c.lost != nil {
		c.lost(group)
	}
}

// record notes a claim this node wrote at rev, the write having started at
// from.
func (c *Claims) record(group string, rev uint64, from time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.held[group]; ok && s.rev > rev {
		return // a later write of ours already landed
	}
	c.held[group] = &claimState{rev: rev, from: from}
}

func (c *Claims) value(at time.Time) ([]byte, error) {
	b, err := json.Marshal(Claim{Node: c.node, At: at.UTC()})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInternal, err, "claim: %v", err)
	}
	return b, nil
}

func claimOf(e jetstream.KeyValueEntry) (Claim, error) {
	var cl Claim
	err := json.Unmarshal(e.Value(), &cl)
	return cl, err
}

// claimAnswered reports whether err is the server's answer (a JetStream API
// error such as the key existing) rather than NATS not answering.
func claimAnswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}

// Close stops Run and waits for it. Claims are not released: they lapse
// after the TTL, as a killed node's do. Held is false after Close.
func (c *Claims) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return nil
}
