package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
}

// Life is the value of a node's key in LivesBucket: the node is alive in
// the fleet, in the life named, while the key stands. The bucket's TTL
// removes a key its node stopped renewing; a node restarted begins a new
// life, so the claims of its last one stand no more.
type Life struct {
	Node string    `json:"node"`
	Life string    `json:"life"`
	At   time.Time `json:"at"`
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
	// Replicas of the buckets (default 1).
	Replicas int
	// NowFunc is the clock (default time.Now). It must run at the wall
	// clock's rate: the server's TTL does.
	NowFunc func() time.Time
	// LostFunc, if set, is told of a group the moment its claim is lost: the
	// watch found it taken or deleted, or the node's life went unrenewed
	// until its margin or was found lapsed. It is called from the claims'
	// own goroutines, never with a lock held; it must not block for long.
	LostFunc func(group string)
	// KeepFunc, if set, is asked now and then, a batch at a time, which of
	// the claims held are still wanted; the others are released, so a node
	// keeps the claims of the groups in work and lets idle ones go to
	// peers whose workers want them. It is called from the claims' own
	// goroutine, never with a lock held; on its error every claim is kept.
	KeepFunc func(ctx context.Context, groups []string) ([]string, error)
	Logger   *slog.Logger
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
// KeepFunc about idle claims, and watches the bucket for claims taken.
type Claims struct {
	kv     jetstream.KeyValue // ClaimsBucket
	lives  jetstream.KeyValue // LivesBucket, written here; read by readLife
	peers  atomic.Int64       // other nodes' lives in the bucket, last counted
	nc     *nats.Conn
	node   string
	ttl    time.Duration
	margin time.Duration
	now    func() time.Time
	lost   func(string)
	keep   func(context.Context, []string) ([]string, error)
	log    *slog.Logger

	mu       sync.Mutex
	life     string                 // this node's life now: the Life of its claims
	lifeRev  uint64                 // the revision of its last write of the life
	lifeFrom time.Time              // when that write started: claims are held from it
	minted   map[string]bool        // every life this process began
	held     map[string]*claimState // by group name, all of this life
	// released is, by group, the last revision of this life's claims
	// Release gave up: a Claim that finds this life's own write at or
	// below it writes the claim anew (or creates it again once the delete
	// landed), never holds it as it is, since the delete may land, or may
	// have landed, under it.
	released map[string]releasedClaim

	service.Base

	heldGauge       prometheus.GaugeFunc
	lostCount       prometheus.Counter
	renewalFailures prometheus.Counter
}

// claimState is one claim this node wrote.
type claimState struct {
	rev uint64 // the revision it wrote: the fence
	// kept is when KeepFunc last kept the claim (or it was written), so
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

// claimKeepBatch bounds the claims KeepFunc is asked about at once, so a
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
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ClaimsBucket,
		Description: "leasehold group ownership claims",
		History:     1,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "claims bucket: %v", err)
	}
	lives, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
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
		lost: cfg.LostFunc, keep: cfg.KeepFunc, log: cfg.Logger, held: map[string]*claimState{}, released: map[string]releasedClaim{}, minted: map[string]bool{},
		nc: js.Conn(),
		lostCount: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_claims_lost_total", Help: "Group ownership claims lost: taken, deleted, or their node's life unrenewed past the margin.",
		}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_claim_renewal_failures_total", Help: "Renewals of this node's life that did not reach NATS or got no answer.",
		}),
	}
	if err := c.begin(ctx, true); err != nil && leasehold.ErrorKind(err) != leasehold.KindConflict {
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

// newLife names a life: random, so no two lives of a node share a name.
func newLife() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// begin starts a new life of this node. A life of its name that still
// stands, and is not one this process began, is left alone: it is an
// earlier run of this node that may still be running (a restart that
// overlaps the old process), or another node under the same name, and its
// claims stand until it lapses. That is a conflict, and this node holds
// nothing until then (at most a TTL after that life's last renewal); Start
// tries again every tick. first only makes the first attempt say so at
// info level.
func (c *Claims) begin(ctx context.Context, first bool) error {
	life := newLife()
	key := ClaimKey(c.node)
	from := c.now()
	val, err := c.lifeValue(life, from)
	if err != nil {
		return err
	}
	// Minted before it is written: a write whose answer is lost leaves it
	// in the key, and it must read as this process's own.
	c.mu.Lock()
	c.minted[life] = true
	c.mu.Unlock()
	rev, err := c.lives.Create(ctx, key, val)
	if err != nil && claimAnswered(err) {
		var st lifeRead
		st, err = c.readLife(ctx, c.node)
		switch {
		case err != nil:
		case !st.found:
			rev, err = c.lives.Create(ctx, key, val)
		case c.mintedLife(st.life.Life) || c.lapsedAt(st.at):
			// This process's own (given up past its margin, or a write
			// whose answer was lost), or past its TTL by the server's
			// timestamp though not yet removed: nobody holds its claims.
			rev, err = c.lives.Update(ctx, key, val, st.rev)
		default:
			err := leasehold.Errorf(leasehold.KindConflict, "a life of node name %q stands (an earlier run still running or just stopped, or another node under this name): holding no groups until it lapses, at most %s", c.node, c.ttl+c.margin)
			if first {
				c.log.Info("claims: " + err.Error())
			}
			return err
		}
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "beginning node %q's life in the fleet: %v", c.node, err)
	}
	c.mu.Lock()
	c.life, c.lifeRev, c.lifeFrom = life, rev, from
	c.mu.Unlock()
	return nil
}

// mintedLife reports whether life is one this process began.
func (c *Claims) mintedLife(life string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return life != "" && c.minted[life]
}

// lapsedAt reports whether a write the server stamped at ran past its
// TTL, plus the margin for the server's clock against ours: the server
// removes such keys by itself, only a little late.
func (c *Claims) lapsedAt(at time.Time) bool {
	return !c.now().Before(at.Add(c.ttl + c.margin))
}

// lifeRead is a node's life key as the lives stream's leader holds it.
type lifeRead struct {
	found bool
	life  Life
	rev   uint64    // the key's revision
	at    time.Time // the server's timestamp of the write
}

// readLife reads node's life key from the lives stream's leader (see
// lastOnLeader).
func (c *Claims) readLife(ctx context.Context, node string) (lifeRead, error) {
	m, err := c.lastOnLeader(ctx, LivesBucket, ClaimKey(node))
	if err != nil {
		return lifeRead{}, fmt.Errorf("reading the life of node %q: %w", node, err)
	}
	if !m.found || m.deleted {
		return lifeRead{}, nil // none, deleted or purged: no life stands
	}
	st := lifeRead{found: true, rev: m.seq, at: m.at}
	if err := json.Unmarshal(m.data, &st.life); err != nil {
		st.life = Life{} // unreadable: stands for no life
	}
	return st, nil
}

// leaderEntry is a key's last write as a bucket's stream leader holds it.
type leaderEntry struct {
	found   bool      // a write of the key stands in the stream
	deleted bool      // that write is a delete or purge marker
	seq     uint64    // its revision
	data    []byte    // its value
	at      time.Time // the server's timestamp of the write
}

// lastOnLeader reads key's last write in bucket from the bucket stream's
// leader. A key-value Get is a direct get, which any replica may answer,
// and the nearest one answers first: a lagging replica (a node just
// resumed, or one an election left behind) shows an older write of a live
// node's life, or none, so the node would look lapsed; and an older
// revision of a claim, so a takeover written over it is refused as a
// revision mismatch every time. The leader has every write it
// acknowledged.
//
// It waits at most lifeReadTimeout, whatever ctx allows: a request the
// server takes and never answers (its leader lost in an election, a route
// cut) would otherwise hold a caller without a deadline, such as the offer
// of disowned groups, for good, and the node would never take a group on
// again.
func (c *Claims) lastOnLeader(ctx context.Context, bucket, key string) (leaderEntry, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return leaderEntry{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, lifeReadTimeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return leaderEntry{}, err
	}
	var resp struct {
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64    `json:"seq"`
			Hdrs []byte    `json:"hdrs"`
			Data []byte    `json:"data"`
			Time time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return leaderEntry{}, err
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == jsErrNoMessageFound {
			return leaderEntry{}, nil
		}
		return leaderEntry{}, fmt.Errorf("%s (%d)", resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return leaderEntry{}, errors.New("an empty answer")
	}
	return leaderEntry{
		found:   true,
		deleted: bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")),
		seq:     resp.Message.Seq,
		data:    resp.Message.Data,
		at:      resp.Message.Time,
	}, nil
}

// lifeReadTimeout bounds a read of a node's life, as the JetStream client
// bounds its own requests by default.
var lifeReadTimeout = 5 * time.Second

// jsErrNoMessageFound is JetStream's error code for a get that finds no
// message.
const jsErrNoMessageFound = 10037

// liveLocked reports whether this node's life is held at now: begun,
// renewed within TTL − Margin, and Claims not stopped. c.mu is held.
func (c *Claims) liveLocked(now time.Time) bool {
	return c.life != "" && !c.Stopped() && now.Before(c.lifeFrom.Add(c.ttl-c.margin))
}

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
	if !leasehold.ValidGroupName(group) {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "group name %q is not valid", group)
	}
	now := c.now()
	c.mu.Lock()
	life, live := c.life, c.liveLocked(now)
	s, ok := c.held[group]
	c.mu.Unlock()
	if !live {
		return 0, leasehold.Errorf(leasehold.KindUnavailable, "claim on group %q: node %q's life in the fleet is not renewed (NATS unreachable?)", group, c.node)
	}
	if ok {
		return s.rev, nil
	}
	key := ClaimKey(group)
	val, err := c.value(life)
	if err != nil {
		return 0, err
	}
	// A claim read between two writes of others can vanish or change under
	// us; a few rounds settle it.
	for range 3 {
		rev, err := c.kv.Create(ctx, key, val)
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
			var cl Claim
			if err := json.Unmarshal(e.data, &cl); err != nil {
				// Whose it is cannot be told, and nothing would ever end it.
				c.log.Warn("claims: unreadable claim, taking it over", "group", group, "err", err)
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

// Renew writes this node's life again, so every claim it holds stands a
// TTL from the write's start. Start calls it every TTL/6. A life found
// lapsed or taken over has lost every claim: LostFunc is told of each and
// a new life begins. A node without a life (its last went past its margin)
// begins one. Errors: unavailable NATS (claims are held until the margin).
func (c *Claims) Renew(ctx context.Context) error {
	c.mu.Lock()
	life, rev := c.life, c.lifeRev
	c.mu.Unlock()
	if life == "" {
		return c.begin(ctx, false)
	}
	key := ClaimKey(c.node)
	from := c.now()
	val, err := c.lifeValue(life, from)
	if err != nil {
		return err
	}
	next, err := c.lives.Update(ctx, key, val, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A renewal of ours whose answer was lost moved the revision too;
		// only a life found gone or another's ends this one.
		st, rerr := c.readLife(ctx, c.node)
		switch {
		case rerr != nil:
			err = rerr
		case st.found && st.life.Life == life:
			next, err = c.lives.Update(ctx, key, val, st.rev)
		default:
			c.loseAll(life, "this node's life lapsed or was taken over")
			return c.begin(ctx, false)
		}
	}
	if err != nil {
		c.renewalFailures.Inc()
		return leasehold.Wrap(leasehold.KindUnavailable, err, "renewing node %q's life in the fleet: %v", c.node, err)
	}
	c.mu.Lock()
	if c.life == life {
		c.lifeRev, c.lifeFrom = next, from
	}
	c.mu.Unlock()
	return nil
}

// Release gives group's claim up: this node stops holding it at once and
// deletes the claim if it is still the revision this node wrote. LostFunc
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
	alive, err := c.alive(ctx, cl)
	if err != nil {
		return Claim{}, 0, leasehold.Wrap(leasehold.KindUnavailable, err, "owner of group %q: %v", group, err)
	}
	if !alive {
		return Claim{}, 0, leasehold.Errorf(leasehold.KindNotFound, "group %q has no owner (the life of node %q that claimed it is over)", group, cl.Node)
	}
	return cl, e.Revision(), nil
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
		switch leasehold.ErrorKind(err) {
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

// Start renews this node's life every TTL/6, gives its claims up when the
// life goes unrenewed past its margin, asks KeepFunc about each claim
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
	keeping := make(chan struct{}, 1)  // one batch of KeepFunc in flight
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
					case leasehold.ErrorKind(err) == leasehold.KindConflict:
						// Said once at start; the earlier life lapses by itself.
						c.log.Debug("claims: waiting to begin this node's life", "err", err)
					default:
						c.log.Warn("claims: renewing this node's life failed", "err", err)
					}
				})
			default: // the last renewal is still waiting on NATS
			}
		}
		if c.keep == nil {
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

// claimMarginMax caps the default margin: clocks kept by NTP agree to
// milliseconds, and a caller acts on Held within one catalog write, so a
// margin of a quarter of a long TTL would only delay takeovers (a cut-off
// node's groups are taken over TTL + margin after its last renewal).
const claimMarginMax = 2 * time.Second

// ClaimTTLFloor is the shortest claim TTL at which a leader election in
// the lives bucket costs no node its claims (see renewEvery).
const ClaimTTLFloor = 18 * time.Second

// renewEvery is how often the life is renewed, and how long one renewal
// may wait on NATS. A leader election in the lives bucket (its leader's
// node killed or cut off) blocks every write for 4–9 s; the life is held
// until TTL − margin (3/4 TTL) after its last renewal, so renewing every
// TTL/6 leaves 7/12 of the TTL for one to land after the election: an
// election costs no claim from a claim TTL of about 18 s (the default is
// 30 s). Writes are one small key a node, so the rate costs nothing.
func (c *Claims) renewEvery() time.Duration { return c.ttl / 6 }

// Peers is how many other nodes' lives stood in the fleet when last
// counted (every TTL/6): its live peers. The bucket's keys expire a TTL
// after their last renewal, so a dead peer stops counting by itself.
func (c *Claims) Peers() int { return int(c.peers.Load()) }

// countPeers counts the other nodes' lives every TTL/6 until ctx ends; a
// count that fails keeps the last one.
func (c *Claims) countPeers(ctx context.Context) {
	t := time.NewTicker(c.renewEvery())
	defer t.Stop()
	own := ClaimKey(c.node)
	for {
		lctx, cancel := context.WithTimeout(ctx, c.renewEvery())
		keys, err := c.lives.ListKeys(lctx)
		if err == nil {
			n := int64(0)
			for k := range keys.Keys() {
				if k != own {
					n++
				}
			}
			c.peers.Store(n)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lifeDue reports whether this node's life is due for renewal (its last
// write is TTL/6 old or more) or is to begin.
func (c *Claims) lifeDue() bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.life == "" || !now.Before(c.lifeFrom.Add(c.renewEvery()))
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

// keepOnly asks KeepFunc about groups and releases those it does not keep.
func (c *Claims) keepOnly(ctx context.Context, groups []string) {
	c.mu.Lock()
	for g, r := range c.released {
		if time.Since(r.at) > releasedKeep {
			delete(c.released, g)
		}
	}
	c.mu.Unlock()
	kept, err := c.keep(ctx, groups)
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

// tellLapsed ends this node's life once it went unrenewed past its
// margin: every claim is given up (LostFunc told of each) and the next
// renewal begins a new life. The claims written in the old one stand for
// no one from then on, so any node, this one too, may take them over.
func (c *Claims) tellLapsed() {
	now := c.now()
	c.mu.Lock()
	life := c.life
	lapsed := life != "" && !now.Before(c.lifeFrom.Add(c.ttl-c.margin))
	c.mu.Unlock()
	if lapsed {
		c.loseAll(life, "this node's life went unrenewed past its margin")
	}
}

// loseAll ends life, if it is still this node's, and gives up every
// claim held in it.
func (c *Claims) loseAll(life, why string) {
	c.mu.Lock()
	if c.life != life {
		c.mu.Unlock()
		return
	}
	c.life = ""
	groups := make([]string, 0, len(c.held))
	for g := range c.held {
		groups = append(groups, g)
	}
	c.held = map[string]*claimState{}
	c.mu.Unlock()
	c.log.Warn("claims: claims lost", "why", why, "claims", len(groups))
	c.lostCount.Add(float64(len(groups)))
	if c.lost != nil {
		for _, g := range groups {
			c.lost(g)
		}
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
		if cl, err := claimOf(e); err == nil && cl.Node == c.node && cl.Life == life {
			return // this life's own write, seen before Claim returned
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
	c.mu.Unlock()
	c.log.Warn("claims: claim lost", "group", group, "why", why)
	c.lostCount.Inc()
	if c.lost != nil {
		c.lost(group)
	}
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

func (c *Claims) value(life string) ([]byte, error) {
	b, err := json.Marshal(Claim{Node: c.node, Life: life, At: c.now().UTC()})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInternal, err, "claim: %v", err)
	}
	return b, nil
}

func (c *Claims) lifeValue(life string, at time.Time) ([]byte, error) {
	b, err := json.Marshal(Life{Node: c.node, Life: life, At: at.UTC()})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInternal, err, "life: %v", err)
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
