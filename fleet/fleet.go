package fleet

import (
	"cmp"
	"context"
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
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
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
	// SecretAlso are secrets accepted besides Secret: the other secret
	// while the fleet's rolls (RotateSecret).
	SecretAlso []string
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
	// Replicas of the stream and buckets, at most MaxReplicas; 0 takes,
	// for the embedded server, one a server routed to (PeerRoutes) and
	// this node's, and for an external NATS MaxReplicas on a cluster and 1
	// on a standalone server.
	Replicas int
	// StreamMaxAge bounds how long the stream keeps events (default 24h);
	// a node away longer rebuilds its peers' parts from their dumps.
	StreamMaxAge time.Duration
	// StreamMaxBytes bounds the stream's size (default 1 GiB): a busy node
	// publishes several MB/s, so age alone would fill the disk.
	StreamMaxBytes int64
	Logger         *slog.Logger
	// DataDir is the node's data dir, where its key pair (IdentityFile)
	// and the keys it pinned for its peers (PinsFile) are kept; empty
	// keeps a key for the name in this process and pins in memory.
	DataDir string
	// Roster, if set, is a file of "NAME PUBKEY" lines: only the nodes it
	// lists, each by its key, are believed (read again when it changes).
	// Without it a name's key is pinned at first sight.
	Roster string
	// AcceptUnsigned believes an unsigned message or value as the node it
	// names: only while a rolling upgrade from a release that signs
	// nothing goes on (Keyring.AcceptUnsigned).
	AcceptUnsigned bool
}

// Local is this node as the fleet serves it, given at New: its catalog,
// which the fleet publishes from and folds into, and the parts of its
// behaviour the fleet calls on.
type Local struct {
	// DB is the node's catalog (appliance.OpenCatalog).
	DB *store.DB
	// Coordinator owns and disowns groups as their claims are won and
	// lost, and applies the admin writes peers carry here:
	// *appliance.Coordinator.
	Coordinator interface {
		Owner
		AdminApplier
	}
	// Snapshots is the node's snapshot store: *appliance.Snapshots.
	Snapshots Windows
	// MaxAttempts is the node's, for the ranges folded and rebuilt here.
	MaxAttempts int64
}

// Fleet is this node's part in a fleet, a service: Start joins in the
// background (the embedded server if any, the connection, the stream and
// buckets) and then starts its parts from one ordered list (the snapshot
// replicas, the fold, the publisher, ownership, the claims, the admin
// forwarder and the state dumps); Stop stops them in reverse, drains the
// connection and shuts the embedded server down. Until it has joined, its
// Gate tells the coordinator so (no lease, no holder call, /readyz 503
// with what it waits for).
type Fleet struct {
	cfg  Config
	gate *Gate
	node Local
	log  *slog.Logger
	srv  *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	url  string
	// shownURL is url with any user, password or token in it hidden:
	// what the log, /readyz and errors name (an external NATS's URL may
	// carry its credentials).
	shownURL string
	conn     atomic.Bool
	// closing quiets the disconnect warning of a node leaving on purpose.
	closing atomic.Bool
	// joined is closed once every part below is made and started.
	joined  chan struct{}
	members *Members
	// engine is the last probe of the streams and buckets (Offline).
	engine engine
	// copies is how many copies the join placed of the events stream
	// (place), for the log: the copy raiser raises them to cfg.Replicas.
	copies atomic.Int32

	claims    *Claims
	removals  *Removals
	publisher *Publisher
	folder    *Folder
	snapshots *Replicator
	records   jetstream.KeyValue

	connected prometheus.GaugeFunc

	// srvOpts are the options srv runs with, for a reload (RotateSecret).
	srvOpts *server.Options
	// secrets is the fleet's secret as it rolls; nil without one.
	secrets *Secrets
	// tlsCert is the NATS certificate this node presents (ReloadTLS).
	tlsCert clientCert

	service.Base
	// mu orders the start of the parts (once joined) before Stop's stop
	// of them: none starts after Stop.
	mu      sync.Mutex
	parts   *service.List
	stopped bool
}

// joinLogEvery is how often a node still joining says what it waits for.
const joinLogEvery = 10 * time.Second

// joinAttemptFirst and joinAttemptMax bound one attempt of a join step.
// A JetStream request made while the cluster has no meta leader yet, or
// while several nodes create the same stream at once, is often never
// answered: a short first wait tries again soon instead of idling for
// the longest one; a step that truly takes longer (a store recovering)
// gets doubling waits up to the longest.
const (
	joinAttemptFirst = 500 * time.Millisecond
	joinAttemptMax   = 5 * time.Second
)

// New is this node's part in the fleet of gate (NewGate), over node, not
// started: give gate to the appliance first (appliance.Config.Fleet),
// then node's parts from it here. Errors: invalid config.
func New(gate *Gate, node Local) (*Fleet, error) {
	if node.DB == nil || node.Coordinator == nil || node.Snapshots == nil {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "fleet: the node's catalog, coordinator and snapshots are needed")
	}
	f := &Fleet{cfg: gate.cfg, gate: gate, node: node, log: gate.cfg.Logger, joined: make(chan struct{})}
	if f.cfg.Secret != "" {
		f.secrets = NewSecrets(f.cfg.Secret, f.cfg.SecretAlso...)
	}
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

// Start joins the fleet in the background and, once joined, starts the
// parts; peers not up yet, or a cluster still electing its leaders, are
// waited for, however long, saying in the log what is waited for (Ready
// tells it too). The fleet ends (Done, Err) when it cannot join for good
// (a JoinError: an address that cannot be listened on, a secret NATS
// refuses) or a part ends by itself. Errors: service.ErrStarted.
func (f *Fleet) Start(ctx context.Context) error { return f.Begin(ctx, f.run) }

// Joined is closed once the fleet has joined and started its parts.
func (f *Fleet) Joined() <-chan struct{} { return f.joined }

// JoinError is the end of a fleet that could not join: the node's
// configuration, not its running, is at fault.
type JoinError struct {
	Node string
	Err  error
}

func (e *JoinError) Error() string { return fmt.Sprintf("joining the fleet as %s: %v", e.Node, e.Err) }
func (e *JoinError) Unwrap() error { return e.Err }

// run joins, starts the parts, and waits for ctx's end or a part's.
func (f *Fleet) run(ctx context.Context) error {
	start := time.Now()
	if err := f.join(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return &JoinError{Node: f.cfg.Name, Err: err}
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	// Staged dump files a process ended mid-dump or mid-copy left: no
	// dump or rebuild runs before the parts start.
	removeStaged(f.node.DB.StageDir(), "")
	err := f.parts.Start(ctx)
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	f.gate.open()
	close(f.joined)
	f.log.Info("peers: joined the fleet", "name", f.cfg.Name, "nats", f.shownURL, "copies", f.copies.Load(), "target", f.cfg.Replicas, "took", time.Since(start).Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return nil
	case <-f.parts.Done():
		if err := f.parts.Err(); err != nil {
			return fmt.Errorf("peers: %w", err)
		}
		return nil
	}
}

// join starts the embedded server (or connects to the external NATS),
// sets up the stream and buckets, and makes the parts.
func (f *Fleet) join(ctx context.Context) error {
	// The publisher's indexes are the catalog's to keep: it made them as it
	// opened with an outbox (store.Options.NoOutbox).
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
	if err := f.makeParts(ctx, records); err != nil {
		return err
	}
	return nil
}

// startNATS starts the embedded server, or takes the external NATS's URL,
// and settles the copies the fleet keeps (see Replicas).
func (f *Fleet) startNATS() error {
	cfg := &f.cfg
	if cfg.NATS != "" {
		// Replicas 0 is settled once connected (externalReplicas).
		f.url, f.shownURL = cfg.NATS, ShownURL(cfg.NATS)
		return nil
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = min(3, 1+PeerRoutes(cfg.ClusterListen, cfg.Routes))
	}
	f.gate.waitingOn("the embedded NATS server to start")
	srv, opts, err := startServer(ServerConfig{Name: cfg.Name, Dir: cfg.Dir, Listen: cfg.Listen,
		ClusterListen: cfg.ClusterListen, Routes: cfg.Routes, Secret: f.present(), ClientToken: cfg.ClientToken,
		Secrets: f.secrets, TLS: cfg.TLS, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.srv = srv // under f.mu: Stop may be shutting it down
	f.srvOpts = opts.Clone()
	f.mu.Unlock()
	f.url = srv.ClientURL()
	f.shownURL = ShownURL(f.url)
	return nil
}

// setUpStream makes (or updates) the events stream and the publish
// records' bucket, retrying while the cluster has no JetStream yet: a
// cluster takes a moment to elect its meta leader, and longer while its
// peers are not up (a fleet started node by node). Each gets as many
// copies as the servers up can place, at least a majority of the target
// (place); the copy raiser raises them later.
func (f *Fleet) setUpStream(ctx context.Context) (jetstream.KeyValue, error) {
	cfg := &f.cfg
	var records jetstream.KeyValue
	f.gate.waitingOn(fmt.Sprintf("the fleet's JetStream (%s): %s", f.shownURL, f.routesUp()))
	if cfg.Replicas == 0 {
		cfg.Replicas = f.externalReplicas()
	}
	err := f.retry(ctx, func(ctx context.Context) error {
		// A node that joins knowing fewer routes than the fleet's first
		// nodes must not lower the copies they aimed at: the stream's count
		// stands for the stream and the buckets alike.
		had, err := keepCopies(ctx, f.js, StreamName, cfg.Replicas)
		if err != nil {
			return err
		}
		cfg.Replicas = max(cfg.Replicas, had)
		err = place(ctx, cfg.Replicas, func(ctx context.Context, copies int) error {
			copies, err := keepCopies(ctx, f.js, StreamName, copies)
			if err != nil {
				return err
			}
			f.copies.Store(int32(copies))
			_, err = f.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
				Name: StreamName, Description: "leasehold events of every node of the fleet",
				Subjects: []string{SubjectPrefix + ">"}, Storage: jetstream.FileStorage, Replicas: copies,
				MaxAge: cfg.StreamMaxAge, MaxBytes: cfg.StreamMaxBytes, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardOld,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("stream %s: %w", StreamName, f.placementHint(err))
		}
		err = place(ctx, cfg.Replicas, func(ctx context.Context, copies int) error {
			var err error
			records, err = createBucket(ctx, f.js, jetstream.KeyValueConfig{
				Bucket: PublishedBucket, Description: "leasehold publish records", History: 1, Replicas: copies,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("bucket %s: %w", PublishedBucket, f.placementHint(err))
		}
		return nil
	})
	return records, err
}

// makeParts makes the node's parts, on the connection and the catalog,
// each given what it works with, and the one ordered list they start in
// (and stop in, reversed): a part starts after the parts it calls on.
// placeBuckets makes the fleet's snapshot, removal and claims buckets
// (each on as many copies as the servers up can hold, see place), trying
// again until they are made or ctx ends, with the keeper and adoption
// the claims use.
func (f *Fleet) placeBuckets(ctx context.Context, records jetstream.KeyValue) (keeper *Keeper, adopt *adoption, err error) {
	cfg, node := f.cfg, f.node
	f.gate.waitingOn("the fleet's claims and snapshot buckets")
	err = f.retry(ctx, func(ctx context.Context) error {
		var err error
		if f.snapshots == nil {
			err = place(ctx, cfg.Replicas, func(ctx context.Context, copies int) error {
				var err error
				f.snapshots, err = NewReplicator(ctx, f.js, node.DB, node.Snapshots, ReplicatorConfig{Node: cfg.Name, Replicas: copies, Logger: f.log,
					PeersFunc: func() bool { return f.claims.Peers() > 0 }})
				if err == nil {
					f.snapshots.id, f.snapshots.ring = f.gate.id, f.gate.ring
				}
				return err
			})
			if err != nil {
				return err
			}
			adopt = &adoption{db: node.DB, js: f.js, records: records, snapshots: f.snapshots, log: f.log, ring: f.gate.ring}
			keeper = NewKeeper(node.DB, cfg.ClaimTTL/3, adopt)
		}
		// The removals' bucket before the claims: placing a bucket with
		// a server missing takes seconds, and the claims' life is
		// written when they are made, so nothing made after them may
		// delay the start of its renewals.
		if f.removals == nil {
			err = place(ctx, cfg.Replicas, func(ctx context.Context, copies int) error {
				var err error
				f.removals, err = newRemovals(ctx, f.js, copies, node.DB, cfg.Name, node.MaxAttempts, f.log)
				return err
			})
			if err != nil {
				return err
			}
		}
		err = place(ctx, cfg.Replicas, func(ctx context.Context, copies int) error {
			var err error
			f.claims, err = NewClaims(ctx, f.js, ClaimsConfig{Node: cfg.Name, TTL: cfg.ClaimTTL, Replicas: copies, Keeper: keeper, Logger: f.log,
				Identity: f.gate.id, Keyring: f.gate.ring})
			return err
		})
		if leasehold.KindOf(err) == leasehold.KindInvalid {
			return backoffStop{err}
		}
		if err != nil {
			return err
		}
		f.removals.claims = f.claims
		return nil
	})
	return keeper, adopt, err
}

func (f *Fleet) makeParts(ctx context.Context, records jetstream.KeyValue) error {
	cfg, node := f.cfg, f.node
	keeper, adopt, err := f.placeBuckets(ctx, records)
	if err != nil {
		return err
	}
	f.members = NewMembers(f.claims.lives, f.claims.kv, cfg.Name, cfg.ClaimTTL, f.log)
	f.members.readLife = f.claims.readLife
	f.members.ring = f.gate.ring
	f.members.gone = f.removals.Removed
	f.members.signed = f.claims.Signed
	f.removals.keys = ringWithdrawer{f.gate.ring, f.log}
	f.removals.id, f.removals.ring = f.gate.id, f.gate.ring
	f.records = records
	carrier := NewCarrier(f.nc, cfg.Name, f.claims.Life)
	carrier.id = f.gate.id
	own := NewOwnership(OwnershipConfig{Owner: node.Coordinator, DB: node.DB, Claims: f.claims, Keeper: keeper, Adoption: adopt,
		Asker: carrier, Orphans: f.members, Every: cfg.ClaimTTL / 3, Logger: f.log})
	f.publisher = NewPublisher(f.js, node.DB, cfg.Name, records, f.snapshots, f.log)
	f.publisher.id, f.publisher.ring = f.gate.id, f.gate.ring
	f.removals.rebuilder = dumpRebuilder{f.nc, node.DB, node.MaxAttempts, f.gate.ring, f.removals}
	f.folder = NewFolder(f.js, node.DB, cfg.Name, records, node.MaxAttempts, f.removals.rebuilder, f.log)
	f.folder.ring = f.gate.ring
	if cfg.NATS == "" {
		f.folder.server = cfg.Name // the embedded server's name (startNATS)
	}
	f.removals.want = own.Want
	admin := NewAdmin(f.nc, node.Coordinator, own, cfg.Name, f.claims.Life, f.log)
	admin.id, admin.ring = f.gate.id, f.gate.ring
	dumper := NewDumper(f.nc, node.DB, cfg.Name, f.log)
	dumper.id = f.gate.id
	f.gate.parts(f, own, admin)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parts = service.NewList(
		service.Part{Name: "snapshot replicas", Service: f.snapshots}, // the publisher queues snapshots to it
		service.Part{Name: "fold", Service: f.folder},
		service.Part{Name: "publisher", Service: f.publisher},
		service.Part{Name: "ownership", Service: own}, // the claims tell it of lost groups
		service.Part{Name: "claims", Service: f.claims},
		service.Part{Name: "admin forwarder", Service: admin},
		service.Part{Name: "state dumps", Service: dumper},
		service.Part{Name: "members", Service: f.members},
		service.Part{Name: "removals", Service: f.removals},
		service.Part{Name: "copy raiser", Service: newCopyRaiser(f.js, engineStreams, cfg.Replicas, f.log)},
	)
	return nil
}

// Keyring is the keys this node believes for its peers: Withdraw a
// member removed from the fleet, Approve it (or its new key) again.
func (f *Fleet) Keyring() *Keyring { return f.gate.ring }

// Identity is this node's key pair.
func (f *Fleet) Identity() *Identity { return f.gate.id }

// dumpRebuilder rebuilds a peer's part from its state dump over NATS
// (Rebuild), for the fold.
type dumpRebuilder struct {
	nc          *nats.Conn
	db          *store.DB
	maxAttempts int64
	ring        *Keyring
	removals    *Removals
}

func (r dumpRebuilder) Rebuild(ctx context.Context, origin string) error {
	if r.removals != nil && r.removals.Removed(origin) {
		return nil // nothing of a removed member is taken
	}
	return rebuild(ctx, r.nc, r.db, origin, r.maxAttempts, r.ring)
}

// connect connects to NATS, trying again until it answers; a refused
// secret is an error at once.
func (f *Fleet) connect(ctx context.Context) error {
	opts := []nats.Option{nats.Name("leasehold " + f.cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(5 * time.Second),
		nats.ConnectHandler(func(*nats.Conn) { f.conn.Store(true) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			f.conn.Store(true)
			f.log.Info("peers: NATS reconnected", "url", f.shownURL)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			f.conn.Store(false)
			if !f.closing.Load() {
				f.log.Warn("peers: NATS disconnected", "url", f.shownURL, "err", err)
			}
		})}
	switch {
	case f.cfg.ClientToken != "":
		opts = append(opts, nats.Token(f.cfg.ClientToken))
	case f.secrets != nil:
		// Read at each connection: a secret rotated since is presented.
		opts = append(opts, nats.TokenHandler(f.secrets.Present))
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
		opts = append(opts, nats.Secure(f.tlsCert.reloadable(tc)))
	}
	f.gate.waitingOn("NATS at " + f.shownURL)
	err = f.retry(ctx, func(context.Context) error {
		var err error
		f.nc, err = nats.Connect(f.url, opts...)
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return backoffStop{leasehold.Wrap(leasehold.KindInvalid, err, "NATS at %s refused this node: its credentials are wrong or missing (%s): %v", f.shownURL, f.credentialFlags(), err)}
		}
		if refusedTLS(err) {
			return backoffStop{leasehold.Wrap(leasehold.KindInvalid, err, "NATS at %s: its certificate is not one this node can verify (--nats-tls-ca): %v", f.shownURL, err)}
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

// routesUp says how many peers the embedded server has routes to, for
// the log of a node waiting to join: peers, not route connections (a
// server keeps a pool of several to each peer), against the peers the
// routes configured (which may name this node too).
func (f *Fleet) routesUp() string {
	if f.srv == nil || len(f.cfg.Routes) == 0 {
		return "no routes"
	}
	return fmt.Sprintf("%d peers routed (%d routes configured)", routedPeers(f.srv), len(f.cfg.Routes))
}

// routedPeers counts the distinct servers s has a route to.
func routedPeers(s *server.Server) int {
	rz, err := s.Routez(nil)
	if err != nil {
		return 0
	}
	peers := map[string]bool{}
	for _, r := range rz.Routes {
		peers[cmp.Or(r.RemoteName, r.RemoteID)] = true
	}
	return len(peers)
}

// retry calls fn until it succeeds, a backoffStop, or ctx ends. While it
// fails it says, every joinLogEvery, what the node waits for.
func (f *Fleet) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	began, said := time.Now(), time.Now()
	wait := joinAttemptFirst
	for {
		cctx, cancel := context.WithTimeout(ctx, wait)
		err := fn(cctx)
		cancel()
		var stop backoffStop
		if errors.As(err, &stop) {
			return stop.err
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, context.DeadlineExceeded) {
			wait = min(wait*2, joinAttemptMax)
		}
		routed := f.routesUp()
		f.gate.routed.Store(&routed)
		if time.Since(said) >= joinLogEvery {
			said = time.Now()
			f.log.Warn("peers: joining the fleet: still waiting", "for", f.gate.waitingFor(), "routes", routed,
				"waited", time.Since(began).Round(time.Second), "last_err", err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// backoffStop ends a retry at once.
type backoffStop struct{ err error }

func (b backoffStop) Error() string { return b.err.Error() }

// Stop stops the parts in reverse order of their start (the state dumps
// and the admin forwarder first, the snapshot replicas last), ends a join
// under way, drains the connection and shuts the embedded server down.
// Claims are left to lapse: a node shutting down keeps no promise to come
// back.
func (f *Fleet) Stop() {
	f.closing.Store(true)
	f.mu.Lock()
	f.stopped = true
	parts := f.parts
	f.mu.Unlock()
	if parts != nil {
		parts.Stop()
	}
	f.Base.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nc != nil {
		f.nc.Close()
	}
	if f.srv != nil {
		f.srv.Shutdown()
		f.srv.WaitForShutdown()
	}
}

// ClientURL is where NATS clients of this node connect.
func (f *Fleet) ClientURL() string { return f.url }

// Conn is the node's NATS connection.
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// Peers is the fleet as this node sees it; a node still joining knows no
// peers yet.
func (f *Fleet) Peers(ctx context.Context) (leasehold.FleetStatus, error) {
	st := leasehold.FleetStatus{Name: f.cfg.Name, Enabled: true, Connected: f.conn.Load(), Peers: []leasehold.Peer{}}
	if !f.isJoined() {
		return st, nil
	}
	st.Offline = f.Offline(ctx)
	st.Owned = int64(len(f.claims.Owned()))
	st.Published = f.publisher.Position()
	var err error
	if st.Unpublished, err = f.node.DB.UnsentCount(ctx); err != nil {
		return st, err
	}
	if st.Peers, err = f.node.DB.Peers(ctx); err != nil {
		return st, err
	}
	st.Peers = f.members.Status(st.Peers)
	return st, nil
}

// isJoined reports whether Joined is closed.
func (f *Fleet) isJoined() bool {
	select {
	case <-f.joined:
		return true
	default:
		return false
	}
}

// Collector is the fleet's metrics, to register at start: until the node
// has joined only leasehold_peer_connected is collected. It describes no
// metrics up front (an unchecked collector), since its parts are made by
// the join.
func (f *Fleet) Collector() prometheus.Collector { return fleetMetrics{f} }

// fleetMetrics collects the fleet's parts once they exist.
type fleetMetrics struct{ f *Fleet }

func (fleetMetrics) Describe(chan<- *prometheus.Desc) {}

func (m fleetMetrics) Collect(ch chan<- prometheus.Metric) {
	f := m.f
	f.connected.Collect(ch)
	if !f.isJoined() {
		return
	}
	members := []prometheus.Collector{f.members.Collector(f.node.DB.PeerMembers)}
	for _, parts := range [][]prometheus.Collector{f.claims.Collectors(), f.publisher.Collectors(), f.folder.Collectors(), f.snapshots.Collectors(), members, f.gate.ring.Collectors()} {
		for _, c := range parts {
			c.Collect(ch)
		}
	}
}
