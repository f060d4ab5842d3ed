package peers

import (
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

	"leasehold"
	"leasehold/appliance"
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
	// Replicas of the stream and buckets; 0 takes Replicas(Routes) for the
	// embedded server and 1 for an external NATS.
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
// snapshot replicas.
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
}

// joinTimeout bounds Join: a cluster elects its JetStream leaders within
// it, or the node does not start.
const joinTimeout = 60 * time.Second

// Join starts the embedded server (or connects to the external NATS), sets
// up the stream and buckets, and wires claims into the node's leases: from
// here on the node leases only groups whose claims it holds. Errors:
// invalid config, unavailable NATS.
func Join(ctx context.Context, app *appliance.Appliance, cfg Config) (_ *Fleet, err error) {
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
	// The publisher's indexes exist only while peer sync runs.
	start := time.Now()
	if made, err := app.DB.PeerIndexes(ctx, true); err != nil {
		return nil, err
	} else if len(made) > 0 {
		cfg.Logger.Info("peers: made peer sync's indexes", "indexes", made, "took", time.Since(start).Round(time.Millisecond))
	}
	f := &Fleet{cfg: cfg, app: app, log: cfg.Logger}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if cfg.NATS == "" {
		if cfg.Replicas == 0 {
			cfg.Replicas = Replicas(cfg.Routes)
		}
		f.srv, err = StartServer(ServerConfig{Name: cfg.Name, Dir: cfg.Dir, Listen: cfg.Listen,
			ClusterListen: cfg.ClusterListen, Routes: cfg.Routes, Secret: cfg.Secret, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		f.url = f.srv.ClientURL()
	} else {
		if cfg.Replicas == 0 {
			cfg.Replicas = 1
		}
		f.url = cfg.NATS
	}
	f.cfg = cfg
	opts := []nats.Option{nats.Name("leasehold " + cfg.Name), nats.MaxReconnects(-1)}
	if cfg.Secret != "" {
		opts = append(opts, nats.Token(cfg.Secret))
	}
	f.nc, err = nats.Connect(f.url, append(opts,
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second),
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
		}))...)
	if errors.Is(err, nats.ErrAuthorization) {
		return nil, leasehold.Wrap(leasehold.KindInvalid, err, "NATS at %s refused this node: its secret is wrong or missing (--nats-secret-file): %v", f.url, err)
	}
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "connecting to NATS at %s: %v", f.url, err)
	}
	f.conn.Store(f.nc.IsConnected())
	f.js, err = jetstream.New(f.nc)
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "JetStream: %v", err)
	}
	jctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	var records jetstream.KeyValue
	// A cluster takes a moment to elect its meta leader; until then every
	// JetStream call fails, so the setup is retried.
	err = retry(jctx, func(ctx context.Context) error {
		// A node that joins knowing fewer routes than the fleet's first
		// nodes must not lower the copies they set up: the stream's count
		// stands for the stream and the buckets alike.
		if s, err := f.js.Stream(ctx, StreamName); err == nil && s.CachedInfo().Config.Replicas > cfg.Replicas {
			cfg.Replicas = s.CachedInfo().Config.Replicas
			f.cfg.Replicas = cfg.Replicas
		}
		if _, err := f.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: StreamName, Description: "leasehold events of every node of the fleet",
			Subjects: []string{SubjectPrefix + ">"}, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
			MaxAge: cfg.StreamMaxAge, MaxBytes: cfg.StreamMaxBytes, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardOld,
		}); err != nil {
			return fmt.Errorf("stream %s: %w", StreamName, err)
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
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "setting up JetStream: %v", err)
	}

	coord, db := app.Coordinator, app.DB
	f.ownership = NewOwnership(coord, db, cfg.ClaimTTL/3, f.log)
	err = retry(jctx, func(ctx context.Context) error {
		var err error
		f.claims, err = NewClaims(ctx, f.js, ClaimsConfig{Node: cfg.Name, TTL: cfg.ClaimTTL, Replicas: cfg.Replicas,
			LostFunc: f.ownership.Lost, KeepFunc: f.ownership.Keep, Logger: f.log})
		if leasehold.ErrorKind(err) == leasehold.KindInvalid {
			return backoffStop{err}
		}
		if err != nil {
			return err
		}
		f.snapshots, err = NewReplicator(ctx, f.js, app, ReplicatorConfig{Node: cfg.Name, Replicas: cfg.Replicas, Logger: f.log})
		return err
	})
	var stop backoffStop
	if errors.As(err, &stop) {
		return nil, stop.err
	}
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "setting up JetStream: %v", err)
	}
	f.ownership.SetAdopt(f.adopt)
	f.ownership.SetSettled(f.settled)
	f.ownership.Attach(f.claims)

	f.records = records
	f.publisher = NewPublisher(f.js, db, cfg.Name, records, f.log)
	f.publisher.SnapshotFunc = f.snapshots.Replicate
	f.folder = NewFolder(f.js, db, cfg.Name, records, app.Config.MaxAttempts, f.log)
	if err := f.startDumps(); err != nil {
		return nil, err
	}
	if f.admin, err = NewAdmin(f.nc, coord, cfg.Name, f.log); err != nil {
		return nil, err
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
	if err != nil {
		return err
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

// Run publishes, folds, keeps claims and replicates snapshots until ctx
// ends.
func (f *Fleet) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{f.claims.Run, f.ownership.Run, f.publisher.Run, f.folder.Run, f.snapshots.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				f.log.Error("peers: a part of peer sync stopped", "err", err)
			}
		}()
	}
	wg.Wait()
	return nil
}

// Close stops everything Join started: claims are left to lapse (a node
// shutting down keeps no promise to come back), the connection is drained
// and the embedded server shut down.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.closing.Store(true)
		if f.dumper != nil {
			f.dumper.Stop()
		}
		if f.admin != nil {
			f.admin.Stop()
		}
		if f.claims != nil {
			f.claims.Close()
		}
		if f.snapshots != nil {
			f.snapshots.Close()
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

// Peers is the fleet as this node sees it.
func (f *Fleet) Peers(ctx context.Context) (leasehold.FleetStatus, error) {
	st := leasehold.FleetStatus{Name: f.cfg.Name, Enabled: true, Connected: f.conn.Load()}
	if f.claims != nil {
		st.Owned = int64(len(f.claims.Owned()))
	}
	var err error
	st.Peers, err = f.app.DB.Peers(ctx)
	return st, err
}

// Collectors are the fleet's metrics.
func (f *Fleet) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{f.connected}
	cs = append(cs, f.claims.Collectors()...)
	cs = append(cs, f.publisher.Collectors()...)
	cs = append(cs, f.folder.Collectors()...)
	cs = append(cs, f.snapshots.Collectors()...)
	return cs
}

// retry calls fn until it succeeds or ctx ends, returning its last error.
func retry(ctx context.Context, fn func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// startDumps answers this node's state dumps and lets the folder rebuild
// peers' parts from theirs.
func (f *Fleet) startDumps() error {
	db, max := f.app.DB, f.app.Config.MaxAttempts
	f.dumper = NewDumper(f.nc, db, f.cfg.Name, f.log)
	if err := f.dumper.Start(); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "answering state dumps: %v", err)
	}
	f.folder.RebuildFunc = func(ctx context.Context, origin string) error { return Rebuild(ctx, f.nc, db, origin, max) }
	return nil
}
