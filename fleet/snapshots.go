package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
)

// Metadata keys of a replicated snapshot object. The object store keeps
// its own digest too (base64 sha-256 of the chunks, checked at the end of
// every download); these are what leasehold itself recorded.
const (
	SnapshotMetaNext   = "next"   // the window's Next, decimal
	SnapshotMetaSHA256 = "sha256" // hex sha-256 of the gzip bytes, as leasehold.Snapshot.SHA256
	SnapshotMetaOrigin = "origin" // the fleet name of the node that uploaded it
	SnapshotMetaAt     = "at"     // when the origin stored it, RFC 3339 with nanoseconds
	SnapshotMetaKey    = "key"    // the origin's public key
	SnapshotMetaSig    = "sig"    // the origin's signature of the above (windowSigned)
)

// Chunk sizes. A chunk is one JetStream message, so it must fit the
// server's max_payload (1 MiB by default) with room for headers. On one
// loopback server 1020 KiB and the client's default 128 KiB moved 4 GiB
// equally fast (medians of 4 runs: upload ~290 vs ~300 MiB/s, download
// ~340 MiB/s both, scripts/bench-objstore.sh on a shared 2-core machine);
// the larger chunk is 8× fewer messages per snapshot, so 8× fewer acks,
// index entries and, replicated, raft proposals.
const (
	snapshotChunkMax      = 1 << 20
	snapshotChunkHeadroom = 4 << 10
	snapshotChunkMin      = 64 << 10
)

// snapshotInFlight bounds the chunk bytes of an upload sent but not yet
// acknowledged. The server queues a stream's incoming messages up to 128
// MiB and answers 429 Too Many Requests past that; the object store
// client's own Put keeps up to 4000 chunks unacknowledged, so with 1 MiB
// chunks it overflows that queue whenever the server's disk falls behind
// (measured: nats.go's Put of 4 GiB failed with 429 in 4 of 6 runs, at
// 1020 and at 128 KiB chunks; this upload never did). Holding a few of them in
// flight keeps the link full on loopback and the queue far from full for
// several nodes uploading at once.
const snapshotInFlight = 16 << 20

// snapshotAckWait is how long a chunk may wait for its acknowledgement; a
// server whose disk is flushing gigabytes of page cache can pause a while.
const snapshotAckWait = 30 * time.Second

// snapshotPurgeWait bounds purging an object's chunks. The client's
// default of 5s is too short for gigabytes on a busy disk (measured: a
// 4 GiB purge outlasted it), and chunks left unpurged hold that much disk
// until the bucket is cleaned by hand.
const snapshotPurgeWait = 5 * time.Minute

// snapshotMinRate is the slowest download an import allows before it gives
// up: the object store client bounds a whole download by one deadline (5s
// when the context has none), so an import sets one from the object's
// size, at this rate, plus snapshotSlack.
const (
	snapshotMinRate = 4 << 20 // bytes per second
	snapshotSlack   = time.Minute
)

// ReplicatorConfig is how a node replicates its window snapshots.
type ReplicatorConfig struct {
	// Node is this node's fleet name, the origin of what it uploads.
	Node string
	// Replicas of the object store bucket if new (default 1); an existing
	// one keeps its own.
	Replicas int
	// ChunkSize of uploaded objects; 0 takes the largest that fits the
	// server's max_payload, up to 1 MiB less headroom for headers.
	ChunkSize int
	// PeersFunc reports whether the fleet has another live node. While it
	// has none, windows stay on this node's disk only (nobody could take
	// a group over from a copy, and a second copy on the same disk would
	// double it); once peers appear, every owned group's window missing
	// from the bucket is uploaded. Nil: always peers.
	PeersFunc func() bool
	Logger    *slog.Logger
}

// Replicator carries window snapshots between the nodes of a fleet through
// the SnapshotsBucket object store: one object per group, named by the
// group's name (the client encodes object names into subjects itself, so
// any group name is safe and listings show it as it is), holding the
// gzip bytes and the snapshot's Next and sha-256 in its metadata.
//
// The owner of a group calls Replicate after a snapshot of it lands; Start
// uploads one snapshot at a time in the background, since they may be
// several GiB each. A node taking a group over calls Import before it
// leases the group, so its workers resume from the newest replicated
// window rather than from scratch.
type Replicator struct {
	obs    jetstream.ObjectStore
	stream jetstream.Stream    // the bucket's stream, for purging chunks
	pub    jetstream.JetStream // uploads' publisher, acks timed by snapshotAckWait
	db     *store.DB
	snaps  Windows
	node   string
	chunk  uint32
	log    *slog.Logger
	peers  func() bool
	// id signs the windows uploaded; ring checks those imported: a
	// window not signed by a node of the fleet is never adopted.
	id   *Identity
	ring *Keyring

	aloneChecks atomic.Int64 // looks for peers while alone, for tests

	keep keptWindows // windows known in the bucket, for uploads waiting (Kept)

	mu       sync.Mutex
	queue    []string        // groups waiting, oldest first
	queued   map[string]bool // the groups in queue
	pending  map[string]bool // groups queued, being uploaded, or failed and waiting to be tried again
	failures map[string]int  // failed uploads in a row, by group
	wake     chan struct{}   // a group was queued

	purges    []string      // chunk subjects waiting to be purged, oldest first
	purgeWake chan struct{} // a subject was queued

	service.Base

	replications *prometheus.CounterVec
	imports      *prometheus.CounterVec
	sizes        prometheus.Histogram

	stall time.Duration // snapshotStall; tests shorten it
}

// Windows is the node's snapshot store, as the replicator reads and
// writes it: *appliance.Snapshots is one.
type Windows interface {
	// Open opens group groupID's newest snapshot to read.
	Open(ctx context.Context, groupID int64) (*os.File, *leasehold.Snapshot, error)
	// Put stores a snapshot, here one imported from the bucket.
	Put(ctx context.Context, u appliance.Upload) (leasehold.Snapshot, error)
	// MaxBytes is the largest snapshot the store takes.
	MaxBytes() int64
}

// NewReplicator creates or updates the snapshots bucket (file storage, the
// replicas, no compression: gzip does not shrink) and returns the node's
// Replicator with nothing queued. Errors: invalid config, unavailable NATS.
func NewReplicator(ctx context.Context, js jetstream.JetStream, db *store.DB, snaps Windows, cfg ReplicatorConfig) (*Replicator, error) {
	if !leasehold.ValidNodeName(cfg.Node) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "node name %q is not valid", cfg.Node)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	chunk := cfg.ChunkSize
	if chunk == 0 {
		chunk = snapshotChunkMax - snapshotChunkHeadroom
		if mp := int(js.Conn().MaxPayload()) - snapshotChunkHeadroom; mp > 0 && mp < chunk {
			chunk = max(mp, snapshotChunkMin)
		}
	}
	if mp := js.Conn().MaxPayload(); chunk <= 0 || (mp > 0 && int64(chunk) > mp) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "snapshot chunk size %d must be above 0 and within the server's max payload %d", chunk, mp)
	}
	copies, err := keepCopies(ctx, js, snapshotStream, cfg.Replicas)
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "snapshots bucket: %v", err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      SnapshotsBucket,
		Description: "leasehold window snapshots, one object per group",
		Storage:     jetstream.FileStorage,
		Replicas:    copies,
	})
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "snapshots bucket: %v", err)
	}
	stream, err := js.Stream(ctx, snapshotStream)
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "snapshots bucket: %v", err)
	}
	pub, err := jetstream.New(js.Conn(), jetstream.WithPublishAsyncTimeout(snapshotAckWait))
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInternal, err, "snapshots publisher: %v", err)
	}
	r := &Replicator{
		obs: obs, stream: stream, pub: pub, db: db, snaps: snaps, node: cfg.Node, chunk: uint32(chunk), log: cfg.Logger, peers: cfg.PeersFunc,
		id: ephemeralIdentity(cfg.Node), ring: memoryKeyring(cfg.Logger),
		queued: map[string]bool{}, pending: map[string]bool{}, failures: map[string]int{},
		wake: make(chan struct{}, 1), purgeWake: make(chan struct{}, 1), stall: snapshotStall,
		replications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_snapshot_replications_total",
			Help: "Window snapshot replications to the object store: ok (uploaded), unchanged (already there), failed.",
		}, []string{"result"}),
		imports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_snapshot_imports_total",
			Help: "Window snapshots imported from the object store on taking a group over: ok, unchanged (already here), none (nothing replicated), failed.",
		}, []string{"result"}),
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_snapshot_replicated_bytes",
			Help:    "Sizes of the window snapshots uploaded to the object store.",
			Buckets: prometheus.ExponentialBuckets(1<<20, 4, 10), // 1 MiB … 256 GiB
		}),
	}
	for _, res := range []string{"ok", "unchanged", "failed"} {
		r.replications.WithLabelValues(res)
	}
	for _, res := range []string{"ok", "unchanged", "none", "failed"} {
		r.imports.WithLabelValues(res)
	}
	return r, nil
}

// Collectors are the replicator's metrics, for web.Metrics.Register.
func (r *Replicator) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.replications, r.imports, r.sizes}
}

// Replicate queues group's snapshot for upload and returns at once. A
// group already waiting is not queued twice: the upload reads the newest
// local snapshot when its turn comes, so the newest request wins by
// itself. A group being uploaded now is queued again, for the snapshot
// that replaced it.
func (r *Replicator) Replicate(group string) {
	if r.Stopped() {
		return
	}
	r.mu.Lock()
	if r.queued[group] {
		r.mu.Unlock()
		return
	}
	r.pending[group] = true
	r.queued[group] = true
	r.queue = append(r.queue, group)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued group, or "" when none waits.
func (r *Replicator) next() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return ""
	}
	g := r.queue[0]
	r.queue[0] = ""
	r.queue = r.queue[1:]
	delete(r.queued, g)
	return g
}

// Pending reports whether group has a snapshot here that may not be in
// the object store yet: queued, being uploaded, or failed and waiting to
// be tried again. A node keeps its claim on such a group, so a peer that
// takes it over finds its newest window replicated.
func (r *Replicator) Pending(group string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending[group]
}

// Retries of a failed upload: the first after replicateRetry, each next
// one twice as late, up to replicateRetryMax. A finished group stores no
// further snapshot to queue it again, and its claim is kept until its
// window is replicated.
const (
	replicateRetry    = 5 * time.Second
	replicateRetryMax = 5 * time.Minute
)

// done records how group's upload went: a failed one is queued again
// after a backoff, and the group stays pending until an upload succeeds
// or finds nothing to do.
func (r *Replicator) done(group string, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !failed {
		delete(r.failures, group)
		if !r.queued[group] {
			delete(r.pending, group)
		}
		return
	}
	r.failures[group]++
	delay := replicateRetry << min(r.failures[group]-1, 10)
	time.AfterFunc(min(delay, replicateRetryMax), func() { r.Replicate(group) })
}

// Start uploads queued snapshots, one at a time, and purges replaced
// chunks beside, until ctx ends or Stop; an upload under way is then cut
// off and its chunks purged. A failed upload is logged, counted, and
// tried again later (see replicateRetry). Errors: service.ErrStarted.
func (r *Replicator) Start(ctx context.Context) error { return r.Begin(ctx, r.run) }

// Stop ends what Start started and waits for it, the purges' drain too.
func (r *Replicator) Stop() {
	r.Base.Stop()
	r.pub.CleanupPublisher() // its reply subscription, on a connection others share
}

// run uploads queued snapshots (see Start) until ctx ends.
func (r *Replicator) run(ctx context.Context) error {
	// The purger stops only after the uploads, so the chunks of one cut
	// off by the stop are in its drain: its context is ctx's without the
	// cancel, ended once the uploads have.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	var purging sync.WaitGroup
	purging.Go(func() { r.purger(pctx) })
	defer purging.Wait()
	defer pcancel()
	// Alone, queued groups wait (still pending, so their claims are
	// kept); peers are looked for every replicateAloneCheck.
	alone := time.NewTicker(replicateAloneCheck)
	defer alone.Stop()
	wasAlone := true
	for {
		if r.peers != nil && !r.peers() {
			wasAlone = true
			select {
			case <-ctx.Done():
				return nil
			case <-alone.C:
			}
			r.aloneChecks.Add(1)
			continue
		}
		if wasAlone {
			// Peers (again), or a start: windows stored while alone, or
			// before a crash cut their uploads off, are queued; those the
			// bucket holds already cost one info read each.
			wasAlone = false
			if err := r.queueMissing(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.log.Warn("snapshots: listing windows to replicate; trying again", "err", err)
				wasAlone = true
				continue
			}
		}
		g := r.next()
		if g == "" {
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
			case <-alone.C:
			}
			continue
		}
		res, err := r.replicate(ctx, g)
		if ctx.Err() != nil {
			return nil
		}
		r.replications.WithLabelValues(res).Inc()
		if err != nil {
			r.log.Error("snapshots: replication failed; trying again later", "group", g, "err", err)
		}
		r.done(g, err != nil)
	}
}

// replicateAloneCheck is how often a node alone looks for peers to
// replicate its windows to.
const replicateAloneCheck = time.Second

// queueMissing queues every owned group with a window here, for a bucket
// that may lack it.
func (r *Replicator) queueMissing(ctx context.Context) error {
	groups, err := r.db.OwnedWithSnapshot(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		r.Replicate(g)
	}
	if len(groups) > 0 {
		r.log.Info("snapshots: replicating the windows of owned groups the fleet may lack", "groups", len(groups))
	}
	return nil
}

// replicate uploads group's local snapshot unless the object already holds
// it, and says which ("ok", "unchanged", "failed"). A group that is gone
// or has no snapshot has nothing to upload: unchanged.
func (r *Replicator) replicate(ctx context.Context, group string) (string, error) {
	g, err := r.db.GroupByName(ctx, group)
	if leasehold.KindOf(err) == leasehold.KindNotFound {
		return "unchanged", nil
	}
	if err != nil {
		return "failed", err
	}
	// A group whose state here is a peer's was lost or let go since it was
	// queued: its object is its new owner's to write.
	if origin, err := r.db.GroupOrigin(ctx, g.ID); err != nil {
		return "failed", err
	} else if origin != "" {
		return "unchanged", nil
	}
	// The open file is this snapshot's bytes to the end, even if a newer
	// upload replaces and removes it meanwhile; that one queues itself.
	f, snap, err := r.snaps.Open(ctx, g.ID)
	if err != nil {
		return "failed", err
	}
	if f == nil {
		return "unchanged", nil
	}
	defer f.Close()
	old, err := r.obs.GetInfo(ctx, group, jetstream.GetObjectInfoShowDeleted())
	switch {
	case err == nil && !old.Deleted && old.Metadata[SnapshotMetaSHA256] == snap.SHA256:
		r.keep.stored(group, snap.File, 0, 0)
		return "unchanged", nil
	case err == nil && !old.Deleted && r.peersNewer(old, snap):
		return "unchanged", nil
	case errors.Is(err, jetstream.ErrObjectNotFound):
		old = nil
	case err != nil:
		return "failed", leasehold.Wrap(leasehold.KindUnavailable, err, "snapshot of group %q: %v", group, err)
	}
	meta := map[string]string{
		SnapshotMetaNext:   strconv.FormatInt(snap.Next, 10),
		SnapshotMetaSHA256: snap.SHA256,
		SnapshotMetaOrigin: r.node,
		SnapshotMetaAt:     snap.At.UTC().Format(time.RFC3339Nano),
		SnapshotMetaKey:    r.id.PublicKey(),
	}
	meta[SnapshotMetaSig] = r.id.sign(snapshotMetaSubj+group, windowSigned(group, meta))
	began := time.Now()
	info, err := r.upload(ctx, snap, old, jetstream.ObjectMeta{
		Name:        group,
		Description: "window snapshot of group " + group,
		Metadata:    meta,
		Opts:        &jetstream.ObjectMetaOptions{ChunkSize: r.chunk},
	}, f)
	if err != nil {
		return "failed", err
	}
	r.sizes.Observe(float64(info.Size))
	r.keep.stored(group, snap.File, int64(info.Size), time.Since(began))
	return "ok", nil
}

// Names of the object store's wire format, as nats.go writes it: chunks
// on one subject per upload (a fresh NUID), the object's info as JSON on
// a subject per name, rolled up so only the newest stays.
const (
	snapshotStream     = "OBJ_" + SnapshotsBucket
	snapshotChunksSubj = "$O." + SnapshotsBucket + ".C."
	snapshotMetaSubj   = "$O." + SnapshotsBucket + ".M."
)

// upload stores body as the object meta names, in the object store's
// format, so any client's Get reads it, but with at most snapshotInFlight
// chunk bytes unacknowledged (see there for why the client's Put is not
// used). Memory is that window of chunk buffers, whatever the size. Each
// buffer is reused only once its chunk is acknowledged, as a chunk may be
// resent while it waits. The info is published only when every chunk is
// stored and the bytes read hash to snap's sha-256, so a file changed on
// disk never stands for the recorded snapshot; an upload that fails has
// its chunks purged, and the object it replaces (old, nil when none)
// stays; once it is replaced its chunks are purged. Errors: internal
// (the file is not the recorded snapshot), unavailable NATS.
func (r *Replicator) upload(ctx context.Context, snap *leasehold.Snapshot, old *jetstream.ObjectInfo, meta jetstream.ObjectMeta, body io.Reader) (*jetstream.ObjectInfo, error) {
	info := &jetstream.ObjectInfo{ObjectMeta: meta, Bucket: SnapshotsBucket, NUID: nuid.Next()}
	subj := snapshotChunksSubj + info.NUID
	fail := func(err error) (*jetstream.ObjectInfo, error) {
		r.purgeLater(subj)
		if errors.As(err, new(*leasehold.Error)) {
			return nil, err
		}
		return nil, leasehold.Wrap(leasehold.KindUnavailable, err, "uploading the snapshot of group %q: %v", meta.Name, err)
	}

	metaSubj := snapshotMetaSubj + base64.URLEncoding.EncodeToString([]byte(meta.Name))
	last, err := r.lastMeta(ctx, metaSubj)
	if err != nil {
		return fail(err)
	}
	sum, err := r.sendChunks(ctx, subj, body, info)
	if err != nil {
		return fail(err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != snap.SHA256 || int64(info.Size) != snap.Size {
		return fail(leasehold.Errorf(leasehold.KindInternal, "the snapshot file of group %q is not the recorded one (sha-256 %s, %d bytes; recorded %s, %d bytes)", meta.Name, got, info.Size, snap.SHA256, snap.Size))
	}
	info.Digest = jetstream.GetObjectDigestValue(sum)

	data, err := json.Marshal(info)
	if err != nil {
		return fail(leasehold.Wrap(leasehold.KindInternal, err, "snapshot info: %v", err))
	}
	m := nats.NewMsg(metaSubj)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	// Only over the object there was when the upload began: one another
	// node put there meanwhile (the group's new owner, while this upload
	// waited out a partition) is not replaced by an older window.
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	m.Data = data
	if _, err := r.pub.PublishMsg(ctx, m); err != nil {
		return fail(err)
	}
	if old != nil && !old.Deleted {
		r.purgeLater(snapshotChunksSubj + old.NUID)
	}
	return info, nil
}

// sendChunks publishes body on subj in chunks of r.chunk, a window of
// them in flight, counting them and their bytes into info, and returns
// the digest of what it sent once every chunk is acknowledged.
func (r *Replicator) sendChunks(ctx context.Context, subj string, body io.Reader, info *jetstream.ObjectInfo) (hash.Hash, error) {
	window := max(1, snapshotInFlight/int(r.chunk))
	bufs := make([][]byte, window)
	acks := make([]jetstream.PubAckFuture, window)
	// settle waits for slot i's chunk, if any, to be acknowledged.
	settle := func(i int) error {
		if acks[i] == nil {
			return nil
		}
		defer func() { acks[i] = nil }()
		select {
		case <-acks[i].Ok():
			return nil
		case err := <-acks[i].Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	sum := sha256.New()
	for i := 0; ; i = (i + 1) % window {
		if err := settle(i); err != nil {
			return nil, err
		}
		if bufs[i] == nil {
			bufs[i] = make([]byte, r.chunk)
		}
		n, rerr := io.ReadFull(body, bufs[i])
		if n > 0 {
			sum.Write(bufs[i][:n])
			m := nats.NewMsg(subj)
			m.Data = bufs[i][:n]
			ack, err := r.pub.PublishMsgAsync(m)
			if err != nil {
				return nil, err
			}
			acks[i] = ack
			info.Chunks++
			info.Size += uint64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, leasehold.Wrap(leasehold.KindInternal, rerr, "reading the snapshot of group %q: %v", info.Name, rerr)
		}
	}
	for i := range acks {
		if err := settle(i); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// purgeLater queues the chunks on subj to be purged by the purger, so an
// upload never waits on one: a purge asked of a stream that is electing a
// leader gets no answer until its deadline, minutes for gigabytes, and
// the next group's window would wait that long to be replicated.
func (r *Replicator) purgeLater(subj string) {
	r.mu.Lock()
	r.purges = append(r.purges, subj)
	r.mu.Unlock()
	select {
	case r.purgeWake <- struct{}{}:
	default:
	}
}

// Purges: each waits up to snapshotPurgeWait; a failed one is tried
// again after purgeRetry, up to purgeAttempts times in all. At Stop the
// purges still waiting get purgeDrain together, so a node stopping
// leaves as few orphaned chunks as it can without hanging on a stream
// that cannot answer.
const (
	purgeRetry    = 10 * time.Second
	purgeAttempts = 5
	purgeDrain    = 10 * time.Second
)

// purger purges queued chunk subjects until ctx ends, then drains what is
// left within purgeDrain.
func (r *Replicator) purger(ctx context.Context) {
	tries := map[string]int{}
	take := func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.purges) == 0 {
			return ""
		}
		s := r.purges[0]
		r.purges = r.purges[1:]
		return s
	}
	for {
		if ctx.Err() != nil {
			// ctx has ended: the drain has its own time.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), purgeDrain)
			defer cancel()
			for s := take(); s != "" && dctx.Err() == nil; s = take() {
				if err := r.purge(dctx, s); err != nil {
					r.log.Warn("snapshots: purging chunks at close; they stay in the bucket", "subject", s, "err", err)
				}
			}
			return
		}
		subj := take()
		if subj == "" {
			select {
			case <-ctx.Done():
			case <-r.purgeWake:
			}
			continue
		}
		err := r.purge(ctx, subj)
		if ctx.Err() != nil {
			r.purgeLater(subj) // cut off: the drain tries it again
			continue
		}
		if err == nil {
			delete(tries, subj)
			continue
		}
		tries[subj]++
		if tries[subj] >= purgeAttempts {
			r.log.Error("snapshots: purging chunks failed; they stay in the bucket", "subject", subj, "attempts", tries[subj], "err", err)
			delete(tries, subj)
			continue
		}
		r.log.Warn("snapshots: purging chunks; trying again later", "subject", subj, "err", err)
		time.AfterFunc(purgeRetry, func() { r.purgeLater(subj) })
	}
}

// purge removes the chunks on subj, waiting up to snapshotPurgeWait.
func (r *Replicator) purge(ctx context.Context, subj string) error {
	ctx, cancel := context.WithTimeout(ctx, snapshotPurgeWait)
	defer cancel()
	return r.stream.Purge(ctx, jetstream.WithPurgeSubject(subj))
}

// Import makes the newest replicated snapshot of group this node's own, for
// a node about to take the group over: it is downloaded straight into the
// node's snapshot store as an operator's upload (so it is refused while a
// worker here holds the group), its sha-256 checked against the object's
// metadata while it streams and the object store's digest at its end. A
// failed import leaves the local snapshot as it was. It returns the
// snapshot now recorded here, the local one unchanged when it is the
// replicated one already, or nil when nothing is replicated. Errors:
// invalid or not found group, conflict (held here, or an upload under
// way), unprocessable (the object's bytes do not match its digests or its
// metadata is unreadable), too large, no space, unavailable NATS (a
// download that got no bytes for snapshotStall among them).
func (r *Replicator) Import(ctx context.Context, group string) (*leasehold.Snapshot, error) {
	snap, res, err := r.importGroup(ctx, group)
	r.imports.WithLabelValues(res).Inc()
	return snap, err
}

// importGroup is Import, saying also which result it counts as.
func (r *Replicator) importGroup(ctx context.Context, group string) (*leasehold.Snapshot, string, error) {
	if !leasehold.ValidGroupName(group) {
		return nil, "failed", leasehold.Errorf(leasehold.KindInvalid, "group name %q is not valid", group)
	}
	g, err := r.db.GroupByName(ctx, group)
	if err != nil {
		return nil, "failed", err
	}
	info, err := r.leaderInfo(ctx, group)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, "none", nil
	}
	if err != nil {
		return nil, "failed", leasehold.Wrap(leasehold.KindUnavailable, err, "replicated snapshot of group %q: %v", group, err)
	}
	next, digest, err := r.windowMeta(info)
	if err != nil {
		return nil, "failed", leasehold.Wrap(leasehold.KindUnprocessable, err, "replicated snapshot of group %q: %v", group, err)
	}
	local, err := r.db.Snapshot(ctx, g.ID)
	if err != nil {
		return nil, "failed", err
	}
	if local != nil && local.SHA256 == hex.EncodeToString(digest) {
		return local, "unchanged", nil
	}
	if int64(info.Size) > r.snaps.MaxBytes() {
		return nil, "failed", leasehold.Errorf(leasehold.KindTooLarge, "the replicated snapshot of group %q is %d bytes, over the limit of %d", group, info.Size, r.snaps.MaxBytes())
	}

	dl := snapshotSlack + time.Duration(info.Size/snapshotMinRate)*time.Second
	dctx, cancel := context.WithTimeout(ctx, dl)
	defer cancel()
	watch := watchDownload(dctx, group, info.Size, r.stall, r.log)
	defer watch.stop()
	// Get reads the info again and subscribes to the chunks: two
	// requests that a NATS cut off mid-way leaves unanswered.
	watch.wait()
	obj, err := r.obs.Get(watch.ctx, group)
	if err != nil {
		watch.check()
	}
	watch.arrived(0, true)
	if serr := watch.err(); serr != nil {
		return nil, "failed", serr
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, "none", nil // deleted since
	}
	if err != nil {
		return nil, "failed", leasehold.Wrap(leasehold.KindUnavailable, err, "downloading the snapshot of group %q: %v", group, err)
	}
	defer obj.Close()
	if got, _ := obj.Info(); got != nil && got.NUID != info.NUID {
		// Not the window the leader has: replaced between the two reads,
		// or read from a replica behind (leaderInfo). Tried again later.
		return nil, "failed", leasehold.Errorf(leasehold.KindUnavailable, "downloading the snapshot of group %q: the replica read is not at the stream leader's window yet", group)
	}
	snap, err := r.snaps.Put(ctx, appliance.Upload{
		GroupID: g.ID, NodeID: 0, Next: next,
		Body: watchedBody{obj, watch}, Gzip: true, Digest: digest, Adopting: true,
	})
	if serr := watch.err(); err != nil && serr != nil {
		return nil, "failed", serr
	}
	switch {
	case err == nil:
		return &snap, "ok", nil
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return nil, "failed", leasehold.Wrap(leasehold.KindUnprocessable, err, "the replicated snapshot of group %q does not match the object store's digest", group)
	case leasehold.KindOf(err) == leasehold.KindInvalid:
		// The body that broke off is the download.
		return nil, "failed", leasehold.Wrap(leasehold.KindUnavailable, err, "downloading the snapshot of group %q broke off (allowed %s): %v", group, dl, err)
	}
	return nil, "failed", err
}

// windowSigned is what a window's signature covers: its group and the
// metadata leasehold records, its sha-256 among them, so the bytes (which
// the object store checks against that digest) are the signer's.
func windowSigned(group string, meta map[string]string) []byte {
	return fmt.Appendf(nil, "%s\n%s\n%s\n%s\n%s", group, meta[SnapshotMetaNext], meta[SnapshotMetaSHA256], meta[SnapshotMetaOrigin], meta[SnapshotMetaAt])
}

// windowMeta is snapshotMeta for a window signed by the node that
// uploaded it, with a key the fleet knows for it; a window that is not is
// refused (counted and logged).
func (r *Replicator) windowMeta(info *jetstream.ObjectInfo) (int64, []byte, error) {
	next, digest, err := snapshotMeta(info)
	if err != nil {
		return 0, nil, err
	}
	md := info.Metadata
	subject := snapshotMetaSubj + info.Name
	at, _ := time.Parse(time.RFC3339Nano, md[SnapshotMetaAt])
	if err := r.ring.verifyBefore(subject, md[SnapshotMetaOrigin], md[SnapshotMetaKey], md[SnapshotMetaSig], windowSigned(info.Name, md), at); err != nil {
		r.ring.refuse("snapshot", subject, err)
		return 0, nil, fmt.Errorf("not signed by a node of the fleet: %w", err)
	}
	return next, digest, nil
}

// snapshotMeta reads a replicated snapshot's Next and sha-256 from its
// object's metadata, and checks that sha-256 is the object store's own
// digest, so an object whose metadata lies is refused before it is
// downloaded.
func snapshotMeta(info *jetstream.ObjectInfo) (int64, []byte, error) {
	next, err := strconv.ParseInt(info.Metadata[SnapshotMetaNext], 10, 64)
	if err != nil || next < 0 {
		return 0, nil, errors.New("its next is not a count")
	}
	digest, err := hex.DecodeString(info.Metadata[SnapshotMetaSHA256])
	if err != nil || len(digest) != 32 {
		return 0, nil, errors.New("its sha256 is not a hex sha-256")
	}
	if sum, err := jetstream.DecodeObjectDigest(info.Digest); err != nil || string(sum) != string(digest) {
		return 0, nil, errors.New("its sha256 is not the object's digest")
	}
	return next, digest, nil
}
