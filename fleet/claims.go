package fleet

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
)

// Claim is the value of a group's key in ClaimsBucket: which node owns the
// group, in which of its lives, and when it wrote the claim (on its own
// clock). A claim stands while its node's life does.
type Claim struct {
	Node string    `json:"node"`
	Life string    `json:"life"`
	At   time.Time `json:"at"`
	// Key is the public key of Node, whose signature the value carries
	// (signValue): a claim not signed by the node it names is believed by
	// no one.
	Key string `json:"key,omitempty"`
}

// Life is the value of a node's key in LivesBucket: the node is alive in
// the fleet, in the life named, while the key stands. The bucket's TTL
// removes a key its node stopped renewing; a node restarted begins a new
// life, so the claims of its last one stand no more.
type Life struct {
	Node string    `json:"node"`
	Life string    `json:"life"`
	At   time.Time `json:"at"`
	// Key is the public key of Node, whose signature the value carries.
	Key string `json:"key,omitempty"`
}

// ClaimsConfig is how a node keeps its ownership claims.
type ClaimsConfig struct {
	// Node is this node's fleet name, the Node of every claim it writes.
	Node string
	// TTL is how long the node's life lasts unrenewed, and with it every
	// claim it holds; it is the lives bucket's TTL, so the server lets an
	// unrenewed life lapse by itself. Every node of a fleet must use the
	// same TTL.
	TTL time.Duration
	// Margin is how long before its life could lapse a node stops holding
	// its groups when it cannot renew, and how long after that others wait
	// before they take its groups (default TTL/4, at most claimMarginMax).
	// It covers the skew between this node's clock and the NATS servers'
	// and the time a caller takes between asking Held and acting on the
	// answer.
	Margin time.Duration
	// Replicas of new buckets (default 1); an existing bucket keeps its
	// own, so a node joining while a server is down lowers no copies.
	Replicas int
	// NowFunc is the clock (default time.Now). It must run at the wall
	// clock's rate: the server's TTL does.
	NowFunc func() time.Time
	// Keeper, if set, is asked now and then which of the claims held are
	// still wanted; nil keeps every claim.
	Keeper ClaimKeeper
	Logger *slog.Logger
	// Identity signs the node's life and claims; nil takes a key made for
	// the node's name in this process (ephemeralIdentity).
	Identity *Identity
	// Keyring checks the lives and claims read; nil keeps one in memory.
	Keyring *Keyring
}

// ClaimKeeper decides which of the claims a node holds it keeps: asked a
// batch at a time, it answers those still wanted, and the others are
// released, so a node keeps the claims of the groups in work and lets
// idle ones go to peers whose workers want them. It is asked from the
// claims' own goroutine, never with a lock held; on its error every claim
// is kept. Keeper is one.
type ClaimKeeper interface {
	Keep(ctx context.Context, groups []string) ([]string, error)
}

// Claims keeps this node's ownership claims on groups in the ClaimsBucket
// key-value bucket, and its life in LivesBucket. A claim is created or
// taken over by compare-and-set on the key's revision, and that revision
// is the fleet-level fence: it rises at every write and no two claims ever
// share one.
//
// Claims are not renewed one by one: each names the life of the node that
// wrote it, and stands while that life does. The node renews its life, one
// write every TTL/6 however many groups it owns; a node whose life lapsed
// (killed, or cut off from NATS for a TTL) has lost every claim at once,
// and any node may take its groups over.
//
// What this node holds is answered from memory (Held), never from the
// network, so a node cut off from NATS stops holding its groups on time by
// itself: a claim is held until the start of the life's last successful
// write + TTL − Margin. The server keeps the life until at least that
// write's timestamp + TTL, which is later, so no other node can take a
// group over while this one still holds it. Start renews the life, asks
// the Keeper about idle claims, and watches the bucket for claims taken.
// The claims lost (Losses, TakeLost) are the claims' news: whoever acts on
// them takes them, and the claims know nothing of who does.
type Claims struct {
	kv     jetstream.KeyValue // ClaimsBucket
	lives  jetstream.KeyValue // LivesBucket, written here; read by readLife
	peers  atomic.Int64       // other nodes' lives in the bucket, last counted
	nc     *nats.Conn
	node   string
	ttl    time.Duration
	margin time.Duration
	now    func() time.Time
	keeper ClaimKeeper
	log    *slog.Logger
	losses chan struct{} // signalled when lostQ grows
	id     *Identity     // signs this node's life and claims
	ring   *Keyring      // checks the lives and claims read

	mu       sync.Mutex
	life     string                 // this node's life now: the Life of its claims
	lifeRev  uint64                 // the revision of its last write of the life
	lifeFrom time.Time              // when that write started: claims are held from it
	minted   map[string]bool        // every life this process began
	held     map[string]*claimState // by group name, all of this life
	// lifeBegan is when this life's first write started: a node cut off
	// from NATS past its margin begins a new life when it is back.
	lifeBegan time.Time
	// released is, by group, the last revision of this life's claims
	// Release gave up: a Claim that finds this life's own write at or
	// below it writes the claim anew (or creates it again once the delete
	// landed), never holds it as it is, since the delete may land, or may
	// have landed, under it.
	released map[string]releasedClaim
	lostQ    []string // groups whose claims were lost, not taken yet
	// signed are the claim values this node signed and wrote, by key,
	// until the members' watch of the bucket sees them (Signed): a value
	// of this node's own needs no check of its signature, and every node
	// checking each claim it sees was 3-4% of its CPU under load.
	signedMu sync.Mutex
	signed   map[string][]byte

	service.Base

	heldGauge       prometheus.GaugeFunc
	lostCount       prometheus.Counter
	renewalFailures prometheus.Counter
}

// claimState is one claim this node wrote.
type claimState struct {
	rev uint64 // the revision it wrote: the fence
	// kept is when the Keeper last kept the claim (or it was written), so
	// each claim is asked about about once every TTL/3.
	kept time.Time
}

// releasedClaim is a revision Release gave up, and when.
type releasedClaim struct {
	rev uint64
	at  time.Time
}

// releasedKeep is how long a released revision is remembered: longer than
// any Claim takes (a few requests of at most lifeReadTimeout each).
const releasedKeep = time.Minute

// claimKeepBatch bounds the claims the Keeper is asked about at once, so a
// node holding very many spreads the asking over several rounds.
const claimKeepBatch = 512

// NewClaims creates or updates the claims bucket (history 1, no TTL) and
// the lives bucket (history 1, the TTL), with the replicas, begins this
// node's life and returns its Claims, holding nothing yet. A life of the
// same name still standing is taken over: it is an earlier run of this
// node, whose claims stand no more. Errors: invalid config, unavailable
// NATS.
func NewClaims(ctx context.Context, js jetstream.JetStream, cfg ClaimsConfig) (*Claims, error) {
	if !leasehold.ValidNodeName(cfg.Node) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "node name %q is not valid", cfg.Node)
	}
	if cfg.TTL <= 0 {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "claim TTL %s must be positive", cfg.TTL)
	}
	if cfg.Margin == 0 {
		cfg.Margin = min(cfg.TTL/4, claimMarginMax)
	}
	if cfg.Margin <= 0 || cfg.Margin >= cfg.TTL*2/3 {
		// Renewals must have time to land before the life stops being held.
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
	if cfg.Identity == nil {
		cfg.Identity = ephemeralIdentity(cfg.Node)
	}
	if cfg.Keyring == nil {
		cfg.Keyring = memoryKeyring(cfg.Logger)
	}
	kv, err := createBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      ClaimsBucket,
		Description: "leasehold group ownership claims",
		History:     1,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "claims bucket: %v", err)
	}
	lives, err := createBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      LivesBucket,
		Description: "leasehold node lives: the claims of a node stand while its key does",
		History:     1,
		TTL:         cfg.TTL,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "lives bucket: %v", err)
	}
	c := &Claims{
		kv: kv, lives: lives, node: cfg.Node, ttl: cfg.TTL, margin: cfg.Margin, now: cfg.NowFunc,
		keeper: cfg.Keeper, log: cfg.Logger, losses: make(chan struct{}, 1), held: map[string]*claimState{}, released: map[string]releasedClaim{}, signed: map[string][]byte{}, minted: map[string]bool{},
		nc: js.Conn(), id: cfg.Identity, ring: cfg.Keyring,
		lostCount: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_claims_lost_total", Help: "Group ownership claims lost: taken, deleted, or their node's life unrenewed past the margin.",
		}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_claim_renewal_failures_total", Help: "Renewals of this node's life that did not reach NATS or got no answer.",
		}),
	}
	if err := c.begin(ctx, true); err != nil && leasehold.KindOf(err) != leasehold.KindConflict {
		return nil, err
	}
	c.heldGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasehold_claims_held", Help: "Groups this node holds an ownership claim on.",
	}, func() float64 { return float64(len(c.Owned())) })
	return c, nil
}

// Collectors are the claims' metrics, for web.Metrics.Register.
func (c *Claims) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.heldGauge, c.lostCount, c.renewalFailures}
}

// Node is this node's fleet name.
func (c *Claims) Node() string { return c.node }

// LifeBegan is when this node's current life began, on its clock (zero
// before it has one).
func (c *Claims) LifeBegan() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lifeBegan
}

// Life is this node's life now: the Life its claims name.
func (c *Claims) Life() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.life
}

// ClaimKey is the key of group's claim (and of a node's life: node names
// are group names). Key-value keys allow A-Za-z0-9-_=./ and no empty
// dot-separated token; group names may hold '+' and runs of dots or a
// final dot. Those are written =2B and =2E, and '=' never appears in a
// group name, so the key is readable for ordinary names and no two groups
// share one.
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

// lifeReadTimeout bounds a read of a node's life, as the JetStream client
// bounds its own requests by default.
var lifeReadTimeout = 5 * time.Second

// jsErrNoMessageFound is JetStream's error code for a get that finds no
// message.
const jsErrNoMessageFound = 10037

// Held reports whether this node holds group's claim now. It asks no one:
// true from a successful Claim until the claim is released or found taken,
// and while this node's life is held: until the start of its last
// successful renewal + TTL − Margin. False after Stop.
func (c *Claims) Held(group string) bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[group]
	return ok && c.liveLocked(now)
}

// Holds reports whether this node holds group's claim now, as Held does,
// and the revision it wrote the claim at: the fleet's fence.
func (c *Claims) Holds(group string) (uint64, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.held[group]
	if !ok || !c.liveLocked(now) {
		return 0, false
	}
	return s.rev, true
}

// Rev is the revision this node wrote group's claim at, 0 when it holds
// none.
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
	if !c.liveLocked(now) {
		return nil
	}
	groups := make([]string, 0, len(c.held))
	for g := range c.held {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	return groups
}

// Claim makes this node group's owner: it creates the claim if there is
// none (or it was released) and takes it over if its node's life is over
// (lapsed, or an earlier run of a node). A claim this node holds is
// returned as it is. It returns the fence, the claim's revision. Errors:
// invalid group name, conflict when a live node's claim stands,
// unavailable NATS or this node's life not held.
func (c *Claims) Claim(ctx context.Context, group string) (uint64, error) {
	life, rev, held, err := c.claimable(group)
	if err != nil || held {
		return rev, err
	}
	key := ClaimKey(group)
	val, err := c.value(key, life)
	if err != nil {
		return 0, err
	}
	c.noteSigned(key, val)
	// A claim read between two writes of others can vanish or change under
	// us; a few rounds settle it.
	for range 3 {
		rev, err := createOnly(ctx, c.kv, key, val)
		if err == nil {
			return c.record(group, life, rev)
		}
		if !claimAnswered(err) {
			return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: %v", group, err)
		}
		// The key exists: whose it is, and whether that life goes on,
		// decide, as the leader has it (a lagging replica's older revision
		// would never match).
		e, err := c.lastOnLeader(ctx, ClaimsBucket, key)
		if err != nil {
			return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: reading its claim: %v", group, err)
		}
		if !e.found {
			continue // purged since
		}
		if !e.deleted {
			cl, err := c.claimOf(key, e.data)
			if err != nil {
				// Whose it is cannot be told (or it is not signed by the
				// node it names), and nothing would ever end it.
				c.log.Warn("claims: unreadable or unsigned claim, taking it over", "group", group, "err", err)
			} else if cl.Node == c.node && cl.Life == life {
				// This life's own claim. Written by a Claim of the same
				// group running beside this one (a lease's claim and the
				// idle worker's it queued), it is held at that revision:
				// writing it again would move the fence under a lease
				// granted at it, and that lease would be lost. Given up by
				// Release, it is written anew below, so the release's
				// delete misses it (or, landed already, the write misses
				// and the next round creates it).
				if rev, err := c.recordOwn(group, life, e.seq); err == nil || !errors.Is(err, errReleased) {
					return rev, err
				}
			} else {
				alive, err := c.alive(ctx, cl)
				if err != nil {
					return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: %v", group, err)
				}
				if alive {
					return 0, leasehold.Errorf(leasehold.KindConflict, "group %q is owned by node %q", group, cl.Node)
				}
			}
		}
		// Released, of a life that is over, or this life's own: write over
		// that revision only.
		rev, err = c.kv.Update(ctx, key, val, e.seq)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return 0, leasehold.Wrap(leasehold.KindUnavailable, err, "claim on group %q: %v", group, err)
		}
		return c.record(group, life, rev)
	}
	return 0, leasehold.Errorf(leasehold.KindConflict, "group %q: its claim keeps changing, try again", group)
}

// claimable is Claim's first look: group's name valid and this node's
// life renewed (else an error), and the claim's revision if this life
// holds it already (held).
func (c *Claims) claimable(group string) (life string, rev uint64, held bool, err error) {
	if !leasehold.ValidGroupName(group) {
		return "", 0, false, leasehold.Errorf(leasehold.KindInvalid, "group name %q is not valid", group)
	}
	now := c.now()
	c.mu.Lock()
	life, live := c.life, c.liveLocked(now)
	s, ok := c.held[group]
	c.mu.Unlock()
	if !live {
		return "", 0, false, leasehold.Errorf(leasehold.KindUnavailable, "claim on group %q: node %q's life in the fleet is not renewed (NATS unreachable?)", group, c.node)
	}
	if !ok {
		return life, 0, false, nil
	}
	return life, s.rev, true, nil
}

// alive reports whether the life a claim names goes on: for this node's
// current life, yes; otherwise whether that node's life key stands, on the
// stream's leader, with the same life and has not run past its TTL plus
// the margin by the server's timestamp. An earlier life of this node is
// asked like any other's: it may be a run that overlaps this one.
func (c *Claims) alive(ctx context.Context, cl Claim) (bool, error) {
	if cl.Life == "" {
		return false, nil
	}
	if cl.Node == c.node {
		c.mu.Lock()
		own := cl.Life == c.life
		c.mu.Unlock()
		if own {
			return true, nil
		}
	}
	st, err := c.readLife(ctx, cl.Node)
	if err != nil {
		return false, err
	}
	return st.found && st.life.Life == cl.Life && !c.lapsedAt(st.at), nil
}

// Release gives group's claim up: this node stops holding it at once and
// deletes the claim if it is still the revision this node wrote. Losses
// is not told. Errors: unavailable NATS (the claim then stands until this
// node's life ends, or the node claims the group again).
func (c *Claims) Release(ctx context.Context, group string) error {
	c.mu.Lock()
	s, ok := c.held[group]
	delete(c.held, group)
	if ok && s.rev > c.released[group].rev {
		c.released[group] = releasedClaim{rev: s.rev, at: time.Now()}
	}
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
// (none, released, or its node's life is over), unavailable NATS.
func (c *Claims) Owner(ctx context.Context, group string) (Claim, uint64, error) {
	if !leasehold.ValidGroupName(group) {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindInvalid, "group name %q is not valid", group)
	}
	// From the leader, as Claim reads it: a replica's direct get may be
	// taken by a lagging or cut-off replica (see lastOnLeader).
	e, err := c.lastOnLeader(ctx, ClaimsBucket, ClaimKey(group))
	if err != nil {
		return Claim{}, 0, leasehold.Wrap(leasehold.KindUnavailable, err, "owner of group %q: %v", group, err)
	}
	if !e.found || e.deleted {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindNotFound, "group %q has no owner", group)
	}
	cl, err := c.claimOf(ClaimKey(group), e.data)
	if err != nil {
		// A claim not signed by the node it names stands for no one.
		return Claim{}, 0, leasehold.Wrap(leasehold.KindNotFound, err, "group %q has no owner (its claim is not believed: %v)", group, err)
	}
	alive, err := c.alive(ctx, cl)
	if err != nil {
		return Claim{}, 0, leasehold.Wrap(leasehold.KindUnavailable, err, "owner of group %q: %v", group, err)
	}
	if !alive {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindNotFound, "group %q has no owner (the life of node %q that claimed it is over)", group, cl.Node)
	}
	return cl, e.seq, nil
}

// ClaimFree claims, in order, up to max of candidates that no other node
// owns (unowned, released, or their owner's life over), for a node whose
// workers find nothing to do, and returns the groups it won. Groups this
// node already holds are skipped. Errors: unavailable NATS, with what was
// won before.
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
		switch leasehold.KindOf(err) {
		case leasehold.KindConflict, leasehold.KindInvalid:
			c.log.Debug("claims: not free", "group", g, "why", err)
			continue
		}
		if err != nil {
			return won, err
		}
		won = append(won, g)
	}
	return won, nil
}

// record notes a claim this node wrote at rev in life and returns rev; a
// life that ended meanwhile holds nothing (its claim stands for no one),
// and that is unavailable.
func (c *Claims) record(group, life string, rev uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recordLocked(group, life, rev)
}

// recordLocked is record with c.mu held.
func (c *Claims) recordLocked(group, life string, rev uint64) (uint64, error) {
	if c.life != life {
		return 0, leasehold.Errorf(leasehold.KindUnavailable, "claim on group %q: node %q's life ended while claiming", group, c.node)
	}
	if s, ok := c.held[group]; ok && s.rev > rev {
		return s.rev, nil // a later write of ours already landed
	}
	c.held[group] = &claimState{rev: rev, kept: c.now()}
	if r, ok := c.released[group]; ok && r.rev < rev {
		delete(c.released, group) // held anew above it: no older write can be found
	}
	return rev, nil
}

// errReleased is recordOwn's answer for a revision Release gave up.
var errReleased = errors.New("claims: a released revision")

// recordOwn is record for a write of this life's that a Claim found
// standing: refused (errReleased) when Release gave that revision up,
// checked under the same lock as the record, so no release slips between.
func (c *Claims) recordOwn(group, life string, rev uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.released[group]; ok && r.rev >= rev {
		return 0, errReleased
	}
	return c.recordLocked(group, life, rev)
}

// signedMax bounds the values kept for Signed: a value written and never
// seen (the write failed) stays until its key is written again, and past
// this many the whole set is forgotten, which only costs checks.
const signedMax = 4096

// noteSigned keeps val, the claim value this node signed for key, for
// Signed, before it is written.
func (c *Claims) noteSigned(key string, val []byte) {
	c.signedMu.Lock()
	defer c.signedMu.Unlock()
	if len(c.signed) >= signedMax {
		clear(c.signed)
	}
	c.signed[key] = val
}

// Signed reports whether val is the value this node last signed and wrote
// as key's claim, and forgets it once so: a watch of the bucket sees each
// write once. A value this node signed is its own claim, the same bytes
// its signature was checked over nowhere else; any other value says no.
func (c *Claims) Signed(key string, val []byte) bool {
	c.signedMu.Lock()
	defer c.signedMu.Unlock()
	own, ok := c.signed[key]
	if !ok || !bytes.Equal(own, val) {
		return false
	}
	delete(c.signed, key)
	return true
}

// value is this node's claim in life on the claim key key, signed.
func (c *Claims) value(key, life string) ([]byte, error) {
	return c.id.signValue(kvSubject(ClaimsBucket, key), Claim{Node: c.node, Life: life, At: c.now().UTC(), Key: c.id.PublicKey()})
}

// claimOf reads the claim data on the claim key key, checking that the
// node it names signed it (refusals are counted and logged). Errors:
// *RefusedError, a decoding error.
func (c *Claims) claimOf(key string, data []byte) (Claim, error) {
	var cl Claim
	err := c.ring.openValue(kvSubject(ClaimsBucket, key), data, &cl)
	if _, ok := errors.AsType[*RefusedError](err); ok {
		c.ring.refuse("claim", kvSubject(ClaimsBucket, key), err)
	}
	return cl, err
}

// claimAnswered reports whether err is the server's answer (a JetStream API
// error such as the key existing) rather than NATS not answering.
func claimAnswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}
