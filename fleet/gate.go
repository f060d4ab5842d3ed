package fleet

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// Gate is the fleet's door to the node's coordinator (appliance.Fleet):
// made by NewGate before the node opens its catalog and given to the
// appliance, it answers that the node has not joined (no lease, no holder
// call, /readyz 503 with what it waits for) until the Fleet made on it has
// joined, and then answers from that fleet's ownership and claims. Only
// the Fleet opens it; it holds nothing of the appliance.
type Gate struct {
	cfg Config
	// id is this node's key pair, ring the keys it believes for its
	// peers (identity.go).
	id   *Identity
	ring *Keyring
	// waiting is what the fleet waits for while it joins, for Ready.
	waiting atomic.Pointer[string]
	// made are the fleet's parts the gate answers from, once made; they
	// answer only once joined is set.
	made   atomic.Pointer[gateParts]
	joined atomic.Bool
	// routed is how many peers the embedded server had routes to at the
	// join's last try, for Ready.
	routed atomic.Pointer[string]
}

// gateParts are what a joined node's gate answers from.
type gateParts struct {
	own       *Ownership
	admin     *Admin
	publisher *Publisher
	folder    *Folder
	fleet     *Fleet
}

// NewGate checks cfg and returns the gate of this node's fleet, closed:
// give it to appliance.Open (Config.Fleet), then to New. Errors: invalid
// config.
func NewGate(cfg Config) (*Gate, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Gate{cfg: cfg}
	if cfg.DataDir == "" {
		// Joined without a data dir (tests, embedding programs): a key
		// for the name in this process, and pins in memory.
		g.id = ephemeralIdentity(cfg.Name)
	} else if g.id, err = LoadIdentity(cfg.DataDir, cfg.Name); err != nil {
		return nil, err
	}
	if g.ring, err = NewKeyring(cfg.DataDir, cfg.Roster, cfg.Logger); err != nil {
		return nil, err
	}
	g.ring.own(g.id)
	if cfg.AcceptUnsigned {
		g.ring.AcceptUnsigned(true)
		cfg.Logger.Warn("unsigned messages are believed as the nodes they name (--fleet-accept-unsigned): for a rolling upgrade from an earlier release only; restart without it once every node runs this one")
	}
	if key, _ := g.ring.Key(cfg.Name); cfg.Roster != "" && key != g.id.PublicKey() {
		cfg.Logger.Warn("this node's key is not on the fleet roster under its name: its peers refuse what it publishes until the roster lists it",
			"roster", cfg.Roster, "name", cfg.Name, "key", g.id.PublicKey())
	}
	g.waitingOn("starting")
	return g, nil
}

// withDefaults checks cfg and fills its zero fields. Errors: invalid.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !leasehold.ValidNodeName(cfg.Name) {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "node name %q is not valid", cfg.Name)
	}
	if cfg.ClaimTTL == 0 {
		cfg.ClaimTTL = 30 * time.Second
	}
	if cfg.StreamMaxAge == 0 {
		cfg.StreamMaxAge = 24 * time.Hour
	}
	if cfg.StreamMaxBytes == 0 {
		cfg.StreamMaxBytes = 1 << 30
	}
	if _, err := ParseRoutes(cfg.Routes); err != nil {
		return cfg, err
	}
	if cfg.TLS != nil {
		check := cfg.TLS.Check
		if cfg.NATS != "" {
			check = cfg.TLS.CheckClient // to an external NATS the CA alone will do
		}
		if err := check(); err != nil {
			return cfg, err
		}
	}
	if cfg.Replicas < 0 || cfg.Replicas > MaxReplicas {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "--nats-replicas %d: want 1 to %d, or 0 to take what the NATS cluster can keep", cfg.Replicas, MaxReplicas)
	}
	if cfg.Auth.set() && cfg.NATS == "" {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "--nats-user, --nats-nkey-file and --nats-creds-file authenticate to an external NATS (--nats URL); the embedded server takes the fleet's secret")
	}
	if err := cfg.Auth.check(cmp.Or(cfg.ClientToken, cfg.Secret)); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// waitingOn records what the fleet's join is now waiting on, for the
// readiness answer (Ready) and the still-waiting log line to name; it
// blocks nothing.
func (g *Gate) waitingOn(what string) { g.waiting.Store(&what) }

// waitingFor is what the fleet waits for.
func (g *Gate) waitingFor() string { return *g.waiting.Load() }

// parts records the fleet's parts, made but not started.
func (g *Gate) parts(f *Fleet, own *Ownership, admin *Admin) {
	g.made.Store(&gateParts{own: own, admin: admin, publisher: f.publisher, folder: f.folder, fleet: f})
}

// open lets the coordinator through: the fleet has joined and started the
// parts.
func (g *Gate) open() { g.joined.Store(true) }

// through is the parts, once the fleet has joined; nil before.
func (g *Gate) through() *gateParts {
	if !g.joined.Load() {
		return nil
	}
	return g.made.Load()
}

// Ready is nil once the node has joined its fleet. Errors: unavailable,
// naming what it waits for.
func (g *Gate) Ready() error {
	if g.joined.Load() {
		return nil
	}
	what := g.waitingFor()
	if routed := g.routed.Load(); routed != nil {
		what += ": " + *routed
	}
	return leasehold.Errorf(leasehold.KindUnavailable, "joining the fleet as %s: waiting for %s", g.cfg.Name, what)
}

// Holds is the claim this node holds on group now (appliance.Fleet).
func (g *Gate) Holds(group string) (uint64, bool) {
	if p := g.through(); p != nil {
		return p.own.Holds(group)
	}
	return 0, false
}

// Want queues group's claim (appliance.Fleet).
func (g *Gate) Want(group string) {
	if p := g.through(); p != nil {
		p.own.Want(group)
	}
}

// ClaimNow claims groups for a lease that found nothing else
// (appliance.Fleet).
func (g *Gate) ClaimNow(ctx context.Context, groups []string) bool {
	p := g.through()
	return p != nil && p.own.ClaimNow(ctx, groups)
}

// Ensure makes sure this node holds group's claim before an admin write
// (appliance.Fleet). Errors: conflict, unavailable.
func (g *Gate) Ensure(ctx context.Context, group string) error {
	p := g.through()
	if p == nil {
		return g.Ready()
	}
	return p.own.Ensure(ctx, group)
}

// Idle is told that a lease found nothing (appliance.Fleet).
func (g *Gate) Idle(node int64) {
	if p := g.through(); p != nil {
		p.own.Idle(node)
	}
}

// Forward carries an admin write to a peer's group's owner
// (appliance.Fleet). Errors: origin's, unavailable.
func (g *Gate) Forward(ctx context.Context, origin string, op appliance.AdminOp) (appliance.AdminResult, error) {
	p := g.through()
	if p == nil {
		return appliance.AdminResult{}, g.Ready()
	}
	return p.admin.Forward(ctx, origin, op)
}

// Troubles are the fleet's findings outside the catalog at now: peer
// sync stuck when the outbox has not been published for a minute, or
// when the fold holds at a peer's message of a newer format
// (appliance.Troubled).
func (g *Gate) Troubles(now time.Time) []leasehold.Finding {
	p := g.through()
	if p == nil {
		return nil
	}
	var out []leasehold.Finding
	if newer := p.folder.Newer(); newer != nil {
		out = append(out, leasehold.Finding{Kind: leasehold.FindingPeerSyncStuck, Node: newer.Origin, Since: now,
			Detail: newer.Error()})
	}
	since, err, ok := p.publisher.Stuck(now)
	if !ok {
		return out
	}
	return append(out, leasehold.Finding{Kind: leasehold.FindingPeerSyncStuck, Node: g.cfg.Name, Since: since, AgeS: now.Sub(since).Seconds(),
		Detail: fmt.Sprintf("the outbox has not been published to the fleet's stream since %s: %v", since.UTC().Format(time.RFC3339), err)})
}

// EngineOffline is nil when the fleet's streams and buckets can all be
// served, for /readyz (appliance.Engine). Errors: unavailable, naming
// what is offline.
func (g *Gate) EngineOffline(ctx context.Context) error {
	p := g.through()
	if p == nil {
		return nil
	}
	if off := p.fleet.Offline(ctx); off != "" {
		return leasehold.Errorf(leasehold.KindUnavailable, "the fleet's streams and buckets are offline in NATS (%s): writes on groups are refused until NATS has them back", off)
	}
	return nil
}

// PublicKey is this node's public key in the fleet, as a roster lists it.
func (g *Gate) PublicKey() string { return g.id.PublicKey() }

// Keyring is the keys this node believes for its peers (Fleet.Keyring).
func (g *Gate) Keyring() *Keyring { return g.ring }
