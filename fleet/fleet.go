package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// Config is how a node joins its fleet.
type Config struct {
	// Name is this node's fleet name, unique in the fleet.
	Name string
	// NATS is empty for the embedded server, or the URL(s) of an external
	// NATS, comma-separated.
	NATS string
	// Listen is the embedded server's client address (host:port; port 0
	// picks one).
	Listen string
	// ClusterListen and Routes cluster the embedded servers of several
	// nodes; empty runs it standalone.
	ClusterListen string
	Routes        []string
	// Dir is where the embedded server keeps JetStream (<data>/nats).
	Dir string
	// ClaimTTL is how long a node's claims stand once it stops renewing its
	// life in the fleet (default 30s).
	ClaimTTL time.Duration
	// Secret, if set, is the fleet's shared secret: the embedded server
	// asks it of clients and routes (ServerConfig.Secret), and this node
	// presents it as its token to the embedded or the external NATS.
	Secret string
	// ClientToken, if set, is the token the embedded server asks of
	// clients, and this node presents, in place of Secret: the node's own
	// (LocalSecret) when the fleet has no shared secret.
	ClientToken string
	// Auth is how this node authenticates to an external NATS when not
	// by the token in Secret.
	Auth Auth
	// TLS, if set, is the node's NATS certificate: the embedded server's
	// client port and routes speak TLS only, and this node's connection
	// presents the certificate and verifies NATS against the CA. To an
	// external NATS the CA alone will do.
	TLS *TLS
	// Replicas of the stream and buckets, at most MaxReplicas; 0 takes
	// Replicas(Routes) for the embedded server, and for an external NATS
	// MaxReplicas on a cluster and 1 on a standalone server.
	Replicas int
	// StreamMaxAge bounds how long the stream keeps events (default 24h);
	// a node away longer rebuilds its peers' parts from their dumps.
	StreamMaxAge time.Duration
	// StreamMaxBytes bounds the stream's size (default 1 GiB): a busy node
	// publishes several MB/s, so age alone would fill the disk.
	StreamMaxBytes int64
	Logger         *slog.Logger
}

// Fleet is this node's part in a fleet: the embedded server if any, the
// connection, the publisher, the fold, the claims, the state dumps and the
// snapshot replicas. It is the coordinator's appliance.Fleet: made by New
// before the node opens its catalog, it answers that the node has not
// joined (no lease, no holder call, /readyz 503 with what it waits for)
// until Join has set everything up, and then answers from the claims.
type Fleet struct {
	cfg  Config
	app  *appliance.Appliance
	log  *slog.Logger
	srv  *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	url  string
	conn atomic.Bool
	// closing quiets the disconnect warning of a node leaving on purpose.
	closing atomic.Bool
	// joined is set once everything below is; it orders their reads.
	joined atomic.Bool
	// waiting is what Join waits for, for Ready.
	waiting atomic.Pointer[string]
	// engine is the last probe of the streams and buckets (Offline).
	engine engine

	claims    *Claims
	ownership *Ownership
	publisher *Publisher
	folder    *Folder
	dumper    *Dumper
	snapshots *Replicator
	admin     *Admin
	records   jetstream.KeyValue

	connected prometheus.GaugeFunc
	closeOnce sync.Once
	// parts orders Run's start of the parts before Close's stop: a part
	// stopped may start again, and none must after Close.
	parts  sync.Mutex
	closed bool
}

// joinLogEvery is how often a node still joining says what it waits for.
const joinLogEvery = 10 * time.Second

// New checks cfg and returns this node's part in its fleet, not joined
// yet: give it to appliance.Open (Config.Fleet), then Join. Errors:
// invalid config.
func New(cfg Config) (*Fleet, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !leasehold.ValidNodeName(cfg.Name) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "node name %q is not valid", cfg.Name)
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
		return nil, err
	}
	if cfg.TLS != nil {
		check := cfg.TLS.Check
		if cfg.NATS != "" {
			check = cfg.TLS.CheckClient
		}
		if err := check(); err != nil {
			return nil, err
		}
	}
	if cfg.Replicas < 0 || cfg.Replicas > MaxReplicas {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "--nats-replicas %d: want 1 to %d, or 0 to take what the NATS cluster can keep", cfg.Replicas, MaxReplicas)
	}
	if cfg.Auth.set() && cfg.NATS == "" {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "--nats-user, --nats-nkey-file and --nats-creds-file authenticate to an external NATS (--nats URL); the embedded server takes the fleet's secret")
	}
	if err := cfg.Auth.check(cmp.Or(cfg.ClientToken, cfg.Secret)); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, log: cfg.Logger}
	f.wait("starting")
	f.connected = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasehold_peer_connected", Help: "1 while this node is connected to NATS.",
	}, func() float64 {
		if f.conn.Load() {
			return 1
		}
		return 0
	})
	return f, nil
}

// wait records what Join waits for.
func (f *Fleet) wait(what string) { f.waiting.Store(&what) }

// Join starts the embedded server (or connects to the external NATS), sets
// up the stream and buckets, and wires the claims: from then on the node
// leases only groups whose claims it holds. Peers not up yet, or a cluster
// still electing its leaders, are waited for, however long, saying in the
// log what is waited for; Ready tells it too. Once joined, the node
// answers its peers' state dumps and carried admin writes until ctx ends
// or Close. Errors: invalid config (an address that cannot be listened
// on, a secret NATS refuses), ctx's.
func (f *Fleet) Join(ctx context.Context, app *appliance.Appliance) error {
	f.app = app
	start := time.Now()
	// The publisher's indexes exist only while peer sync runs.
	if made, err := app.DB.PeerIndexes(ctx, true); err != nil {
		return err
	} else if len(made) > 0 {
		f.log.Info("peers: made peer sync's indexes", "indexes", made, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := f.startNATS(); err != nil {
		return err
	}
	if err := f.connect(ctx); err != nil {
		return err
	}
	records, err := f.setUpStream(ctx)
	if err != nil {
		return err
	}
	if err := f.wire(ctx, records); err != nil {
		return err
	}
	f.joined.Store(true)
	f.log.Info("peers: joined the fleet", "name", f.cfg.Name, "nats", f.url, "replicas", f.cfg.Replicas, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// startNATS starts the embedded server, or takes the external NATS's URL,
// and settles the copies the fleet keeps (see Replicas).
func (f *Fleet) startNATS() error {
	cfg := &f.cfg
	if cfg.NATS != "" {
		// Replicas 0 is settled once connected (externalReplicas).
		f.url = cfg.NATS
		return nil
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = Replicas(cfg.Routes)
	}
	f.wait("the embedded NATS server to start")
	var err error
	f.srv, err = StartServer(ServerConfig{Name: cfg.Name, Dir: cfg.Dir, Listen: cfg.Listen,
		ClusterListen: cfg.ClusterListen, Routes: cfg.Routes, Secret: cfg.Secret, ClientToken: cfg.ClientToken,
		TLS: cfg.TLS, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	f.url = f.srv.ClientURL()
	return nil
}

// setUpStream makes (or updates) the events stream and the publish
// records' bucket, retrying while the cluster has no JetStream yet: a
// cluster takes a moment to elect its meta leader, and longer while its
// peers are not up (a fleet started node by node).
func (f *Fleet) setUpStream(ctx context.Context) (jetstream.KeyValue, error) {
	cfg := &f.cfg
	var records jetstream.KeyValue
	f.wait(fmt.Sprintf("the fleet's JetStream (%s): %s", f.url, f.routesUp()))
	if cfg.Replicas == 0 {
		cfg.Replicas = f.externalReplicas()
	}
	err := f.retry(ctx, func(ctx context.Context) error {
		// A node that joins knowing fewer routes than the fleet's first
		// nodes must not lower the copies they set up: the stream's count
		// stands for the stream and the buckets alike.
		if s, err := f.js.Stream(ctx, StreamName); err == nil && s.CachedInfo().Config.Replicas > cfg.Replicas {
			cfg.Replicas = s.CachedInfo().Config.Replicas
		}
		if _, err := f.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: StreamName, Description: "leasehold events of every node of the fleet",
			Subjects: []string{SubjectPrefix + ">"}, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
			MaxAge: cfg.StreamMaxAge, MaxBytes: cfg.StreamMaxBytes, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardOld,
		}); err != nil {
			return fmt.Errorf("stream %s: %w", StreamName, f.placementHint(err))
		}
		var err error
		records, err = f.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: PublishedBucket, Description: "leasehold publish records", History: 1, Replicas: cfg.Replicas,
		})
		if err != nil {
			return fmt.Errorf("bucket %s: %w", PublishedBucket, err)
		}
		return nil
	})
	return records, err
}

// wire makes the node's parts: claims and ownership, the snapshot
// replicator, the publisher, the folder, the dumper and the admin
// forwarder, each on the connection and the catalog. The dumper and the
// admin forwarder start answering peers at once, with ctx; Run starts the
// others.
func (f *Fleet) wire(ctx context.Context, records jetstream.KeyValue) error {
	cfg, app := f.cfg, f.app
	coord, db := app.Coordinator, app.DB
	f.ownership = NewOwnership(coord, db, cfg.ClaimTTL/3, f.log)
	f.wait("the fleet's claims and snapshot buckets")
	err := f.retry(ctx, func(ctx context.Context) error {
		var err error
		if f.claims == nil {
			f.claims, err = NewClaims(ctx, f.js, ClaimsConfig{Node: cfg.Name, TTL: cfg.ClaimTTL, Replicas: cfg.Replicas,
				LostFunc: f.ownership.Lost, KeepFunc: f.ownership.Keep, Logger: f.log})
			if leasehold.ErrorKind(err) == leasehold.KindInvalid {
				return backoffStop{err}
			}
			if err != nil {
				return err
			}
		}
		f.snapshots, err = NewReplicator(ctx, f.js, app, ReplicatorConfig{Node: cfg.Name, Replicas: cfg.Replicas, Logger: f.log,
			PeersFunc: func() bool { return f.claims.Peers() > 0 }})
		return err
	})
	if err != nil {
		return err
	}
	f.ownership.SetAdopt(f.adopt)
	f.ownership.SetSettled(f.settled)
	f.ownership.Attach(f.claims)

	f.records = records
	f.publisher = NewPublisher(f.js, db, cfg.Name, records, f.log)
	f.publisher.SnapshotFunc = f.snapshots.Replicate
	f.folder = NewFolder(f.js, db, cfg.Name, records, app.Config.MaxAttempts, f.log)
	if err := f.startDumps(ctx); err != nil {
		return err
	}
	f.admin = NewAdmin(f.nc, coord, cfg.Name, f.claims.Life, f.log)
	return f.admin.Start(ctx)
}

// connect connects to NATS, trying again until it answers; a refused
// secret is an error at once.
func (f *Fleet) connect(ctx context.Context) error {
	opts := []nats.Option{nats.Name("leasehold " + f.cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(5 * time.Second),
		nats.ConnectHandler(func(*nats.Conn) { f.conn.Store(true) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			f.conn.Store(true)
			f.log.Info("peers: NATS reconnected", "url", f.url)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			f.conn.Store(false)
			if !f.closing.Load() {
				f.log.Warn("peers: NATS disconnected", "url", f.url, "err", err)
			}
		})}
	if token := cmp.Or(f.cfg.ClientToken, f.cfg.Secret); token != "" {
		opts = append(opts, nats.Token(token))
	}
	auth, err := f.cfg.Auth.options()
	if err != nil {
		return err
	}
	opts = append(opts, auth...)
	if f.cfg.NATS != "" {
		// A server of an external cluster cut off without a FIN would hold
		// this node for minutes at nats.go's pings (every 2 min); pinged
		// as routes are, the node moves to another server of its list
		// within seconds. The embedded server is in this process.
		opts = append(opts, nats.PingInterval(routePingInterval), nats.MaxPingsOutstanding(routePingsOut))
	}
	if f.cfg.TLS != nil {
		tc, err := f.cfg.TLS.clientConfig()
		if err != nil {
			return err
		}
		opts = append(opts, nats.Secure(tc))
	}
	f.wait("NATS at " + f.url)
	err = f.retry(ctx, func(context.Context) error {
		var err error
		f.nc, err = nats.Connect(f.url, opts...)
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return backoffStop{leasehold.Wrap(leasehold.KindInvalid, err, "NATS at %s refused this node: its credentials are wrong or missing (%s): %v", f.url, f.credentialFlags(), err)}
		}
		if refusedTLS(err) {
			return backoffStop{leasehold.Wrap(leasehold.KindInvalid, err, "NATS at %s: its certificate is not one this node can verify (--nats-tls-ca): %v", f.url, err)}
		}
		return err
	})
	if err != nil {
		return err
	}
	f.conn.Store(f.nc.IsConnected())
	f.js, err = jetstream.New(f.nc)
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "JetStream: %v", err)
	}
	return nil
}

// routesUp says how many of the embedded server's routes are up, for the
// log of a node waiting to join.
func (f *Fleet) routesUp() string {
	if f.srv == nil || len(f.cfg.Routes) == 0 {
		return "no routes"
	}
	return fmt.Sprintf("%d of %d peers' routes up", f.srv.NumRoutes(), len(f.cfg.Routes))
}

// retry calls fn until it succeeds, a backoffStop, or ctx ends. While it
// fails it says, every joinLogEvery, what the node waits for.
func (f *Fleet) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	began, said := time.Now(), time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(cctx)
		cancel()
		var stop backoffStop
		if errors.As(err, &stop) {
			return stop.err
		}
		if err == nil {
			return nil
		}
		if time.Since(said) >= joinLogEvery {
			said = time.Now()
			f.log.Warn("peers: joining the fleet: still waiting", "for", *f.waiting.Load(), "routes", f.routesUp(),
				"waited", time.Since(began).Round(time.Second), "last_err", err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Ready is nil once the node has joined its fleet. Errors: unavailable,
// naming what it waits for.
func (f *Fleet) Ready() error {
	if f.joined.Load() {
		return nil
	}
	return leasehold.Errorf(leasehold.KindUnavailable, "joining the fleet as %s: waiting for %s", f.cfg.Name, *f.waiting.Load())
}

// Holds is the claim this node holds on group now (appliance.Fleet).
func (f *Fleet) Holds(group string) (uint64, bool) {
	if !f.joined.Load() {
		return 0, false
	}
	return f.ownership.Holds(group)
}

// Want queues group's claim (appliance.Fleet).
func (f *Fleet) Want(group string) {
	if f.joined.Load() {
		f.ownership.Want(group)
	}
}

// ClaimNow claims groups for a lease that found nothing else
// (appliance.Fleet).
func (f *Fleet) ClaimNow(ctx context.Context, groups []string) bool {
	return f.joined.Load() && f.ownership.ClaimNow(ctx, groups)
}

// Ensure makes sure this node holds group's claim before an admin write
// (appliance.Fleet). Errors: conflict, unavailable.
func (f *Fleet) Ensure(ctx context.Context, group string) error {
	if err := f.Ready(); err != nil {
		return err
	}
	return f.ownership.Ensure(ctx, group)
}

// Idle is told that a lease found nothing (appliance.Fleet).
func (f *Fleet) Idle() {
	if f.joined.Load() {
		f.ownership.Idle()
	}
}

// Forward carries an admin write to a peer's group's owner
// (appliance.Fleet). Errors: origin's, unavailable.
func (f *Fleet) Forward(ctx context.Context, origin string, op appliance.AdminOp) (appliance.AdminResult, error) {
	if err := f.Ready(); err != nil {
		return appliance.AdminResult{}, err
	}
	return f.admin.Forward(ctx, origin, op)
}

// backoffStop ends a retry at once.
type backoffStop struct{ err error }

func (b backoffStop) Error() string { return b.err.Error() }

// settled reports whether all of group has left this node: its events
// published and its newest snapshot replicated. Until then its claim is
// kept even when it is idle.
func (f *Fleet) settled(ctx context.Context, group string) bool {
	if f.snapshots.Pending(group) {
		return false
	}
	unsent, err := f.app.DB.Unpublished(ctx, group)
	return err == nil && !unsent
}

// adopt brings in the newest replicated snapshot of a peer's group this
// node just won, before it is owned here.
func (f *Fleet) adopt(ctx context.Context, group string) error {
	g, err := f.app.DB.GroupByName(ctx, group)
	if err != nil {
		return err
	}
	origin, err := f.app.DB.GroupOrigin(ctx, g.ID)
	if err != nil || origin == "" {
		return err
	}
	if err := f.caughtUp(ctx, origin); err != nil {
		return err
	}
	snap, err := f.snapshots.Import(ctx, group)
	switch k := leasehold.ErrorKind(err); {
	case err == nil:
	case k == leasehold.KindUnprocessable || k == leasehold.KindTooLarge:
		// A replicated window that can never be read: adopted without it.
		return err
	default:
		// The window is there but cannot be read now (NATS unavailable,
		// a slow download): adopting without it would lose every id it
		// holds from the group's final window, so not now.
		return fmt.Errorf("%w: its replicated window could not be read: %v", ErrBehind, err)
	}
	if snap != nil {
		f.log.Info("peers: adopted a group with its replicated snapshot", "group", group, "from", origin, "next", snap.Next)
	}
	return nil
}

// caughtUpWait bounds how long an adoption waits for the fold to reach
// the last owner's publish record.
const caughtUpWait = 5 * time.Second

// caughtUp waits until this node has folded the stream through origin's
// publish record, so what it adopts is the state origin last published;
// ErrBehind if the fold does not get there within caughtUpWait. A record
// past the stream's end (the stream was made again) vouches for nothing
// and is not waited for.
func (f *Fleet) caughtUp(ctx context.Context, origin string) error {
	e, err := f.records.Get(ctx, origin)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // origin never published
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "reading %q's publish record: %v", origin, err)
	}
	var rec PublishRecord
	if json.Unmarshal(e.Value(), &rec) != nil {
		return nil
	}
	deadline := time.Now().Add(caughtUpWait)
	for {
		_, mark, err := f.app.DB.FoldMark(ctx)
		if err != nil {
			return err
		}
		if mark >= rec.Seq {
			return nil
		}
		if time.Now().After(deadline) {
			stream, err := f.js.Stream(ctx, StreamName)
			if err == nil {
				if info, err := stream.Info(ctx); err == nil && info.State.LastSeq < rec.Seq {
					return nil
				}
			}
			return ErrBehind
		}
		sleep(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// part is one of the node's services (service): started with
// the fleet's context, stopped by Close.
type part interface {
	Start(ctx context.Context) error
	Stop()
	Done() <-chan struct{}
	Err() error
}

// Run starts the claims, ownership, the publisher, the fold and the
// snapshot replicas with ctx, and returns nil once ctx has ended and they
// have stopped. A part that stops by itself (its error, or Close) stops
// the others and Run returns its error. Join first.
func (f *Fleet) Run(ctx context.Context) error {
	if !f.joined.Load() {
		return leasehold.Errorf(leasehold.KindInternal, "peers: Run before Join")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f.parts.Lock()
	if f.closed {
		f.parts.Unlock()
		return leasehold.Errorf(leasehold.KindInternal, "peers: Run after Close")
	}
	var wg sync.WaitGroup
	for _, p := range []struct {
		name string
		part part
	}{{"claims", f.claims}, {"ownership", f.ownership}, {"publisher", f.publisher}, {"fold", f.folder}, {"snapshot replicas", f.snapshots}} {
		if err := p.part.Start(ctx); err != nil {
			cancel(fmt.Errorf("peers: %s: %w", p.name, err))
			break
		}
		wg.Go(func() {
			<-p.part.Done()
			if ctx.Err() == nil {
				err := p.part.Err()
				if err == nil {
					err = errors.New("stopped by itself")
				}
				cancel(fmt.Errorf("peers: %s: %w", p.name, err))
			}
		})
	}
	f.parts.Unlock()
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Close stops everything Join started: claims are left to lapse (a node
// shutting down keeps no promise to come back), the connection is drained
// and the embedded server shut down.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.closing.Store(true)
		f.parts.Lock()
		f.closed = true
		f.parts.Unlock()
		if f.dumper != nil {
			f.dumper.Stop()
		}
		if f.admin != nil {
			f.admin.Stop()
		}
		if f.claims != nil {
			f.claims.Stop()
		}
		if f.ownership != nil {
			f.ownership.Stop() // after the claims, which tell it of lost groups
		}
		// The publisher and the fold end with Run's ctx; a Close that
		// comes first stops them here.
		if f.publisher != nil {
			f.publisher.Stop() // before the snapshots, which it queues
		}
		if f.folder != nil {
			f.folder.Stop()
		}
		if f.snapshots != nil {
			f.snapshots.Stop()
		}
		if f.nc != nil {
			f.nc.Close()
		}
		if f.srv != nil {
			f.srv.Shutdown()
			f.srv.WaitForShutdown()
		}
	})
	return nil
}

// ClientURL is where NATS clients of this node connect.
func (f *Fleet) ClientURL() string { return f.url }

// Conn is the node's NATS connection.
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// Peers is the fleet as this node sees it; a node still joining knows no
// peers yet.
func (f *Fleet) Peers(ctx context.Context) (leasehold.FleetStatus, error) {
	st := leasehold.FleetStatus{Name: f.cfg.Name, Enabled: true, Connected: f.conn.Load(), Peers: []leasehold.Peer{}}
	if !f.joined.Load() {
		return st, nil
	}
	st.Offline = f.Offline(ctx)
	st.Owned = int64(len(f.claims.Owned()))
	st.Published = f.publisher.Position()
	var err error
	if st.Unpublished, err = f.app.DB.UnsentCount(ctx); err != nil {
		return st, err
	}
	st.Peers, err = f.app.DB.Peers(ctx)
	return st, err
}

// Troubles are the fleet's findings outside the catalog at now: peer
// sync stuck when the outbox has not been published for a minute
// (appliance.Troubled).
func (f *Fleet) Troubles(now time.Time) []leasehold.Finding {
	if !f.joined.Load() || f.publisher == nil {
		return nil
	}
	since, err, ok := f.publisher.Stuck(now)
	if !ok {
		return nil
	}
	return []leasehold.Finding{{Kind: leasehold.FindingPeerSyncStuck, Node: f.cfg.Name, Since: since, AgeS: now.Sub(since).Seconds(),
		Detail: fmt.Sprintf("the outbox has not been published to the fleet's stream since %s: %v", since.UTC().Format(time.RFC3339), err)}}
}

// Collector is the fleet's metrics, to register at start: until the node
// has joined only leasehold_peer_connected is collected. It describes no
// metrics up front (an unchecked collector), since its parts are made by
// Join.
func (f *Fleet) Collector() prometheus.Collector { return fleetMetrics{f} }

// fleetMetrics collects the fleet's parts once they exist.
type fleetMetrics struct{ f *Fleet }

func (fleetMetrics) Describe(chan<- *prometheus.Desc) {}

func (m fleetMetrics) Collect(ch chan<- prometheus.Metric) {
	f := m.f
	f.connected.Collect(ch)
	if !f.joined.Load() {
		return
	}
	for _, parts := range [][]prometheus.Collector{f.claims.Collectors(), f.publisher.Collectors(), f.folder.Collectors(), f.snapshots.Collectors()} {
		for _, c := range parts {
			c.Collect(ch)
		}
	}
}

// startDumps answers this node's state dumps, with ctx, and lets the
// folder rebuild peers' parts from theirs.
func (f *Fleet) startDumps(ctx context.Context) error {
	db, max := f.app.DB, f.app.Config.MaxAttempts
	f.dumper = NewDumper(f.nc, db, f.cfg.Name, f.log)
	if err := f.dumper.Start(ctx); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "answering state dumps: %v", err)
	}
	f.folder.RebuildFunc = func(ctx context.Context, origin string) error { return Rebuild(ctx, f.nc, db, origin, max) }
	return nil
}
