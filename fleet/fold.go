package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
)

// Folder folds the peers' events from the fleet's stream into this node's
// catalog, through a durable consumer, a batch a catalog write. The write
// that folds a batch also records the fold mark (the stream incarnation and
// the last sequence folded), so the mark never says more than the catalog
// holds, and a restart goes on from the mark.
//
// A gap is a stretch of the stream this node never folded that is gone
// (retention dropped it while this node was behind or away). The folder
// finds it when the stream's first retained message is past its mark, or
// when the consumer skips ahead; then, origin by origin, it reads the
// origin's publish record, and an origin that published past the mark may
// have had events in the hole: its part is rebuilt from a full state dump
// (its Rebuilder) instead of folding on with a hole. A missing mark (a new
// node) is seeded the same way, not counted as a gap; a mark of another
// incarnation of the stream vouches for nothing.
type Folder struct {
	js          jetstream.JetStream
	db          *store.DB
	node        string
	records     jetstream.KeyValue
	maxAttempts int64
	log         *slog.Logger
	// ring checks each message's signature before it is read: a message
	// not signed by the node its subject names is passed over.
	ring *Keyring
	// server is the name of the node's embedded NATS server, where its
	// consumer is placed if it can be (see consumer); "" on an external
	// NATS.
	server string

	// rebuilder rebuilds origin's part from its dump; nil skips rebuilds
	// (the gap is logged and counted).
	rebuilder Rebuilder

	// owed are origins whose rebuild failed (down or busy): the fold goes
	// on past the hole, and they are asked again every rebuildRetry until
	// one succeeds. The catalog keeps them too (store.DB.OweRebuild), so a
	// restart asks again. Only the folding goroutine touches it.
	owed      map[string]bool
	owedTried time.Time

	// newer is the message of a newer format the fold holds at, if any
	// (see NewerFormatError), for Troubles; newerSaid is when it was last
	// logged (only the folding goroutine touches it).
	newer     atomic.Pointer[NewerFormatError]
	newerSaid time.Time

	folded   prometheus.Counter
	gaps     prometheus.Counter
	rebuilds *prometheus.CounterVec
	lag      prometheus.Gauge

	service.Base
}

// foldBatch bounds the messages fetched from the stream at once.
const foldBatch = 512

// Rebuilder rebuilds a peer's part of the catalog from its state dump
// (see Rebuild).
type Rebuilder interface {
	Rebuild(ctx context.Context, origin string) error
}

// foldWrite bounds the events (a peer's Messages) folded in one catalog
// write. The catalog has one writer, and a node's own holder calls queue
// behind the fold's write: a write of 512 events (tens of ms) left a node
// folding a peer's backlog 6% of its own cycles; 16 leave it about half,
// and the fold loses little, since a fetch still brings foldBatch stream
// messages, each a publish batch of events.
const foldWrite = 16

// NewFolder returns node's folder of the stream, reading publish records
// from records; rebuild, if not nil, rebuilds the part of a peer whose
// events the stream lost.
func NewFolder(js jetstream.JetStream, db *store.DB, node string, records jetstream.KeyValue, maxAttempts int64, rebuild Rebuilder, log *slog.Logger) *Folder {
	return &Folder{js: js, db: db, node: node, records: records, maxAttempts: maxAttempts, rebuilder: rebuild, log: log, ring: memoryKeyring(log),
		folded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_peer_events_folded_total", Help: "Peers' events folded into this node's catalog.",
		}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_peer_gaps_total", Help: "Stretches of the stream lost to retention before this node folded them.",
		}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_peer_rebuilds_total", Help: "Peers' parts rebuilt from their state dumps, by result.",
		}, []string{"result"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_peer_fold_lag_messages", Help: "Stream messages not yet folded here.",
		}),
	}
}

// Newer is the peer's message of a newer format the fold holds at, or
// nil.
func (f *Folder) Newer() *NewerFormatError { return f.newer.Load() }

// Collectors are the folder's metrics.
func (f *Folder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{f.folded, f.gaps, f.rebuilds, f.lag}
}

// Start folds until ctx ends or Stop, starting over (from the mark) after
// an error. Errors: service.ErrStarted.
func (f *Folder) Start(ctx context.Context) error { return f.Begin(ctx, f.folding) }

// folding folds (see Start) until ctx ends.
func (f *Folder) folding(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	owed, err := f.db.RebuildsOwed(ctx)
	if err != nil {
		f.log.Warn("peers: reading the rebuilds owed", "err", err)
	}
	for _, origin := range owed {
		if f.owed == nil {
			f.owed = map[string]bool{}
		}
		f.owed[origin] = true // asked at once: owedTried is zero
	}
	for ctx.Err() == nil {
		err := f.run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if newer := (*NewerFormatError)(nil); errors.As(err, &newer) {
			f.newer.Store(newer)
			if time.Since(f.newerSaid) >= time.Minute {
				f.newerSaid = time.Now()
				f.log.Error("peers: a peer writes a newer message format than this build reads; folding stops before it until this node is upgraded",
					"origin", newer.Origin, "format", newer.Format, "reads", FormatVersion, "seq", newer.Seq)
			}
			sleep(ctx, 5*time.Second)
			continue
		}
		f.log.Warn("peers: folding the stream", "err", err, "retry_in", backoff)
		sleep(ctx, backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// incarnation names the stream's incarnation: its creation time.
func incarnation(info *jetstream.StreamInfo) string {
	return info.Created.UTC().Format(time.RFC3339Nano)
}

func (f *Folder) run(ctx context.Context) error {
	stream, err := f.js.Stream(ctx, StreamName)
	if err != nil {
		return err
	}
	inc, mark, err := f.catchUp(ctx, stream)
	if err != nil {
		return err
	}
	cons, err := f.consumer(ctx, stream, mark)
	if err != nil {
		return err
	}
	return f.loop(ctx, cons, inc, mark)
}

// catchUp decides, from the catalog's fold mark and the stream as it is,
// where folding starts, rebuilding first what cannot be folded: every
// origin when the mark is of another incarnation of the stream (or missing
// while the stream has already dropped its start), the origins that
// published into a hole when retention dropped events past the mark. It
// returns the stream's incarnation and the mark to fold on from.
func (f *Folder) catchUp(ctx context.Context, stream jetstream.Stream) (string, uint64, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return "", 0, err
	}
	inc := incarnation(info)
	markInc, mark, err := f.db.FoldMark(ctx)
	if err != nil {
		return "", 0, err
	}
	newNode := markInc == ""
	// A mark of another incarnation (or, from before marks named theirs,
	// a position with none) vouches for nothing in this stream.
	otherStream := markInc != inc && (mark > 0 || !newNode)
	switch {
	case otherStream || (newNode && info.State.FirstSeq > 1):
		// Every origin is rebuilt from its dump, then folding goes on from
		// where the stream was before the dumps.
		if !newNode {
			f.gaps.Inc()
		}
		return inc, info.State.LastSeq, f.rebuildFrom(ctx, inc, 0, info.State.LastSeq, newNode)
	case newNode:
		// A new node on a stream that still holds its start folds it all.
		return inc, 0, nil
	case f.hole(mark, info.State.FirstSeq):
		from := info.State.FirstSeq - 1
		return inc, from, f.rebuildFrom(ctx, inc, mark, from, false)
	}
	return inc, mark, nil
}

// hole is the gap rule, written once: the next message there is to fold
// (next) is past the one after the mark, so retention dropped events this
// node never folded. It counts and logs the gap.
func (f *Folder) hole(mark, next uint64) bool {
	if next <= mark+1 {
		return false
	}
	f.gaps.Inc()
	f.log.Warn("peers: events lost to the stream's retention before they were folded here: rebuilding",
		"folded_through", mark, "next", next)
	return true
}

// rebuildFrom rebuilds the origins whose records do not rule out events
// past mark, then records from as the fold mark.
func (f *Folder) rebuildFrom(ctx context.Context, inc string, mark, from uint64, seeded bool) error {
	if err := f.rebuildAll(ctx, inc, mark, seeded); err != nil {
		return err
	}
	return f.db.Write(ctx, func(tx *store.Tx) error { return tx.SetFoldMark(inc, from) })
}

// consumer makes this node's durable consumer of the stream, starting
// after mark: the catalog's mark is what was folded, whatever the server
// last delivered.
//
// It is one copy, in memory, on this node's own server when the fleet's
// NATS is embedded. The consumer is only the fold's read cursor, made
// again from the mark at every start, so copies of it on three servers
// kept nothing worth keeping, while each was a raft group replicating
// (and, with SyncAlways, syncing on every server) a record of every
// message it delivered: the three folds' groups were the fleet's
// busiest, and a restarted server had the most of them to catch up. In a rolling
// upgrade on a loaded machine they once had no quorum for about a minute
// after a node's stop (RELIABILITY.md): the folds stalled, and the
// takeovers that wait for the fold with them. One copy on the node's own
// server reads the node's own replica of the stream and needs no other
// server; placed elsewhere (an external NATS, or its own server not
// picked in foldPlaceTries) its server's loss ends the fetches and the
// fold makes it again.
func (f *Folder) consumer(ctx context.Context, stream jetstream.Stream, mark uint64) (jetstream.Consumer, error) {
	durable := "fold_" + consumerName(f.node)
	cfg := jetstream.ConsumerConfig{
		Durable: durable, Description: "leasehold fold of " + f.node,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: mark + 1,
		AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1, InactiveThreshold: time.Hour,
		Replicas: 1, MemoryStorage: true,
	}
	began := time.Now()
	for try := 1; ; try++ {
		_ = stream.DeleteConsumer(ctx, durable)
		cons, err := stream.CreateOrUpdateConsumer(ctx, cfg)
		if err != nil {
			return nil, err
		}
		on := ""
		if c := cons.CachedInfo().Cluster; c != nil {
			on = c.Leader
		}
		if f.server == "" || on == "" || on == f.server || try == foldPlaceTries || time.Since(began) >= foldPlaceWithin {
			if on != f.server && f.server != "" && on != "" {
				f.log.Debug("peers: the fold's consumer is on another server", "server", on, "tries", try)
			}
			return cons, nil
		}
	}
}

// foldPlaceTries and foldPlaceWithin bound the consumers made to get one
// on the node's own server (NATS places a one-copy consumer on any server
// of the stream that is caught up, at random): one elsewhere folds as
// well, so a slow meta leader does not hold the fold's start for it.
const (
	foldPlaceTries  = 24
	foldPlaceWithin = 2 * time.Second
)

// loop folds batches from cons until ctx ends; a batch that starts past
// the mark (the consumer skipped what retention dropped) rebuilds first.
func (f *Folder) loop(ctx context.Context, cons jetstream.Consumer, inc string, mark uint64) error {
	for ctx.Err() == nil {
		f.retryOwed(ctx)
		msgs, err := f.fetch(cons)
		if err != nil || len(msgs) == 0 {
			if err != nil {
				return err
			}
			continue
		}
		if msgs = unfolded(msgs, mark); len(msgs) == 0 {
			continue
		}
		if first, _ := msgs[0].Metadata(); first != nil && f.hole(mark, first.Sequence.Stream) {
			if err := f.rebuildAll(ctx, inc, mark, false); err != nil {
				return err
			}
		}
		items, last, newer := f.read(msgs)
		if newer != nil && last == 0 {
			return newer
		}
		chunks, marks := foldChunks(items, foldWrite, last)
		if len(chunks) == 0 && last > mark {
			// Only this node's own messages, or unreadable ones: the
			// mark moves past them.
			chunks, marks = [][]foldItem{nil}, []uint64{last}
		}
		for i, chunk := range chunks {
			pruned, err := f.fold(ctx, inc, chunk, marks[i])
			if err != nil {
				return err
			}
			mark = max(mark, marks[i])
			f.newer.Store(nil)
			if err := f.rebuildPruned(ctx, pruned); err != nil {
				return nil // ctx ended
			}
			// The node's own holder calls first: they wait on the one
			// writer while the fold writes.
			if err := f.db.Yield(ctx); err != nil && ctx.Err() != nil {
				return nil
			}
		}
		if newer != nil {
			return newer
		}
		if err := msgs[len(msgs)-1].Ack(); err != nil {
			f.log.Debug("peers: acknowledging folded events", "err", err)
		}
		if md, _ := msgs[len(msgs)-1].Metadata(); md != nil {
			f.lag.Set(float64(md.NumPending))
		}
	}
	return nil
}

// unfolded is msgs without those at or before mark, acknowledging them
// if none is left. A consumer is kept in memory: made again from its
// config when its server restarts, it delivers again from the position
// it was first made at, which the fold has passed.
func unfolded(msgs []jetstream.Msg, mark uint64) []jetstream.Msg {
	i := 0
	for ; i < len(msgs); i++ {
		if md, err := msgs[i].Metadata(); err != nil || md.Sequence.Stream > mark {
			break
		}
	}
	if i == len(msgs) {
		_ = msgs[i-1].Ack()
	}
	return msgs[i:]
}

// fetch reads the next batch, waiting up to 250 ms; an error with some
// messages read keeps those.
func (f *Folder) fetch(cons jetstream.Consumer) ([]jetstream.Msg, error) {
	batch, err := cons.Fetch(foldBatch, jetstream.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) && len(msgs) == 0 {
		return nil, err
	}
	return msgs, nil
}

// rebuildPruned rebuilds the parts of origins that ran alone: they kept
// no outbox meanwhile, so their dumps are newer than anything folded. A
// rebuild that fails is owed and asked again; only ctx's end is an error.
func (f *Folder) rebuildPruned(ctx context.Context, pruned []string) error {
	for _, origin := range pruned {
		if f.rebuilder == nil {
			f.log.Warn("peers: no dump to rebuild a peer's part from", "origin", origin)
			continue
		}
		f.log.Info("peers: a peer ran alone without an outbox: rebuilding its part", "origin", origin)
		if f.owed == nil {
			f.owed = map[string]bool{}
		}
		f.owed[origin] = true // owed in the fold's write
		if err := f.rebuild(ctx, origin); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			f.log.Warn("peers: rebuilding a peer's part from its dump", "origin", origin, "err", err)
		}
	}
	return nil
}

// fold folds items in one catalog write with the mark and returns the
// origins whose outbox was pruned (see store.EventOutboxPruned). A
// message that cannot be folded (bad JSON, a bad row) is logged and
// passed over, never retried forever.
func (f *Folder) fold(ctx context.Context, inc string, items []foldItem, mark uint64) ([]string, error) {
	var pruned []string
	for _, it := range items {
		if it.m.Kind == store.EventOutboxPruned && !slices.Contains(pruned, it.m.Origin) {
			pruned = append(pruned, it.m.Origin)
		}
	}
	_, pruned, err := f.foldItems(ctx, inc, items, pruned, mark)
	return pruned, err
}

// NewerFormatError is a peer's message of a newer FormatVersion than
// this build reads: the fold stops before it.
type NewerFormatError struct {
	Origin string
	Format int
	Seq    uint64
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("peer %q published a message of format %d at stream position %d, newer than this build reads (%d): the fold waits there until this node is upgraded", e.Origin, e.Format, e.Seq, FormatVersion)
}

// foldItems folds items, the batch's messages up to last, in one catalog
// write with the mark (see fold).
func (f *Folder) foldItems(ctx context.Context, inc string, items []foldItem, pruned []string, last uint64) (uint64, []string, error) {
	// The rebuilds the batch calls for are owed in the write that moves the
	// mark past it, so a crash before they are made does not forget them.
	mark := func(tx *store.Tx) error {
		if f.rebuilder != nil {
			for _, origin := range pruned {
				if err := tx.OweRebuild(origin); err != nil {
					return err
				}
			}
		}
		return tx.SetFoldMark(inc, last)
	}
	err := f.db.Write(ctx, func(tx *store.Tx) error {
		for _, it := range coalesce(items) {
			if err := f.apply(tx, it); err != nil {
				return err
			}
		}
		return mark(tx)
	})
	if leasehold.KindOf(err) != leasehold.KindInvalid {
		if err == nil {
			f.folded.Add(float64(len(items)))
		}
		return last, pruned, err
	}
	// One bad message in the batch: fold them one by one, passing it over.
	for _, it := range items {
		err := f.db.Write(ctx, func(tx *store.Tx) error { return f.apply(tx, it) })
		if leasehold.KindOf(err) == leasehold.KindInvalid {
			f.log.Warn("peers: passing over an event that cannot be folded", "origin", it.m.Origin, "event", it.m.Event, "err", err)
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		f.folded.Inc()
	}
	return last, pruned, f.db.Write(ctx, mark)
}

// read is a fetch of stream messages as the items to fold (peers' own
// messages, readable, each stream message's in order), and the stream
// position the fetch reaches, up to a message of a newer format (newer),
// where it stops.
func (f *Folder) read(msgs []jetstream.Msg) (items []foldItem, last uint64, newer *NewerFormatError) {
	items = make([]foldItem, 0, len(msgs))
	for _, jm := range msgs {
		md, err := jm.Metadata()
		if err != nil {
			continue
		}
		subjectNode := strings.TrimPrefix(jm.Subject(), SubjectPrefix)
		if subjectNode == f.node {
			// This node's own: passed over unread (a third of a fleet
			// of three's stream, every message of a fleet of one's).
			last = max(last, md.Sequence.Stream)
			continue
		}
		// Checked before anything else is read of it, so a forged message
		// can neither be folded nor hold the fold (a newer format).
		signer, err := f.ring.VerifyMsg(jm.Subject(), jm.Headers(), jm.Data(), subjectNode)
		if err == nil && signer != subjectNode {
			err = refused(refusedWrongOrigin, signer, "signed by node %q on node %q's subject", signer, subjectNode)
		}
		if err != nil {
			last = max(last, md.Sequence.Stream)
			f.ring.refuse("event", jm.Subject(), err)
			continue
		}
		b, err := readBody(jm.Data())
		if err != nil {
			last = max(last, md.Sequence.Stream)
			f.log.Warn("peers: an event that is not a leasehold message", "subject", jm.Subject(), "seq", md.Sequence.Stream, "err", err)
			continue
		}
		if formatNewer(b.Format) {
			// Folded wrongly it would corrupt the catalog, passed over it
			// would be lost: the fold holds here until this node reads it.
			newer = &NewerFormatError{Origin: b.Origin, Format: b.Format, Seq: md.Sequence.Stream}
			break
		}
		last = max(last, md.Sequence.Stream)
		// Every message of a batch takes the batch's origin (readBody).
		if b.Origin != signer {
			f.ring.refuse("event", jm.Subject(), refused(refusedWrongOrigin, signer, "node %q's message names origin %q", signer, b.Origin))
			continue
		}
		if !leasehold.ValidNodeName(b.Origin) {
			continue // no one's
		}
		for _, m := range b.Messages {
			items = append(items, foldItem{md.Sequence.Stream, m})
		}
	}
	return items, last, newer
}

// apply folds one peer's message into the catalog: its group and ranges,
// its node, a late plan, and the peer's position.
func (f *Folder) apply(tx *store.Tx, it foldItem) error {
	m := it.m
	if gone, err := tx.MemberRemoved(m.Origin); err != nil || gone {
		return err // removed from the fleet: nothing of it is taken (removal.go)
	}
	if g := m.GroupGone; g != nil {
		if err := tx.FoldGroupGone(m.Origin, g.Name, g.ClaimRev); err != nil {
			return err
		}
	}
	if m.Group != nil {
		id, ok, err := tx.FoldGroup(m.Origin, *m.Group, f.maxAttempts)
		if err != nil {
			return err
		}
		if ok && len(m.Ranges) > 0 {
			if err := tx.FoldRanges(id, m.Ranges); err != nil {
				return err
			}
		}
	}
	if m.Node != nil {
		if err := tx.FoldNode(m.Origin, *m.Node, f.maxAttempts); err != nil {
			return err
		}
	}
	if m.NodeGone != "" {
		if err := tx.FoldNodeGone(m.Origin, m.NodeGone, f.maxAttempts); err != nil {
			return err
		}
	}
	if l := m.Late; l != nil {
		if err := tx.ReplayLatePlan(l.Group, l.High, l.Low); err != nil {
			return err
		}
	}
	return tx.FoldPeer(m.Origin, m.Catalog, m.Event, m.At, it.seq)
}

// coalesce merges a batch's messages so the catalog write does each row
// once: a busy peer sends several events a lease cycle, and folding each
// alone would cost this node's writer more than the peer's own work. Per
// origin and group, the last message's group state stands, with the ranges
// of all of them (the later of two for the same start); per origin and
// worker node, the last state or deletion stands; per origin, the last
// event is recorded. Messages carry whole state, so the merge folds to the
// same catalog as folding them one by one.
func coalesce(items []foldItem) []foldItem {
	type key struct{ origin, name string }
	var out []foldItem
	groups := map[key]int{}           // → index in out
	starts := map[key]map[int64]int{} // → range start → index in its ranges
	nodes := map[key]int{}
	peers := map[string]int{}
	for _, it := range items {
		m := it.m
		if m.Late != nil || m.GroupGone != nil {
			// A late plan is replayed alone and in order, and so is a group's deletion (they carry no
			// state to merge).
			out = append(out, foldItem{seq: it.seq, m: Message{Origin: m.Origin, Catalog: m.Catalog, Event: m.Event, At: m.At, Kind: m.Kind, Late: m.Late, GroupGone: m.GroupGone}})
			continue
		}
		if m.Group != nil {
			k := key{m.Origin, m.Group.Name}
			if i, ok := groups[k]; ok {
				cur := &out[i]
				cur.m.Group = m.Group
				idx := starts[k]
				for _, r := range m.Ranges {
					if j, ok := idx[r.Start]; ok {
						cur.m.Ranges[j] = r
					} else {
						idx[r.Start] = len(cur.m.Ranges)
						cur.m.Ranges = append(cur.m.Ranges, r)
					}
				}
				cur.seq, cur.m.Event, cur.m.At = max(cur.seq, it.seq), max(cur.m.Event, m.Event), m.At
			} else {
				g := m
				g.Ranges = append([]store.PeerRange(nil), m.Ranges...)
				idx := map[int64]int{}
				for j, r := range g.Ranges {
					idx[r.Start] = j
				}
				starts[k] = idx
				g.Node, g.NodeGone = nil, "" // folded as a node's own, below
				groups[k] = len(out)
				out = append(out, foldItem{seq: it.seq, m: g})
			}
		}
		if m.Node != nil || m.NodeGone != "" {
			name := m.NodeGone
			if m.Node != nil {
				name = m.Node.Name
			}
			k := key{m.Origin, name}
			n := Message{Origin: m.Origin, Catalog: m.Catalog, Event: m.Event, At: m.At, Kind: m.Kind, Node: m.Node, NodeGone: m.NodeGone}
			if i, ok := nodes[k]; ok {
				cur := &out[i]
				n.Event = max(cur.m.Event, m.Event)
				cur.seq, cur.m = max(cur.seq, it.seq), n
			} else {
				nodes[k] = len(out)
				out = append(out, foldItem{seq: it.seq, m: n})
			}
		}
		if m.Group == nil && m.Node == nil && m.NodeGone == "" {
			// Only what it is: it moves the origin's last event.
			if i, ok := peers[m.Origin]; ok {
				cur := &out[i]
				cur.seq, cur.m.Event, cur.m.At = max(cur.seq, it.seq), max(cur.m.Event, m.Event), m.At
				continue
			}
			peers[m.Origin] = len(out)
			out = append(out, foldItem{seq: it.seq, m: Message{Origin: m.Origin, Catalog: m.Catalog, Event: m.Event, At: m.At, Kind: m.Kind}})
		}
	}
	return out
}

// foldItem is a message read from the stream at seq.
type foldItem struct {
	seq uint64
	m   Message
}

// rebuildAll rebuilds, from its dump, every origin whose publish record
// does not rule out events past mark in the stream incarnation inc (mark
// 0: every origin). seeded says this is a new node's first view, not a
// gap.
func (f *Folder) rebuildAll(ctx context.Context, inc string, mark uint64, seeded bool) error {
	keys, err := f.records.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, origin := range keys {
		if origin == f.node {
			continue
		}
		e, err := f.records.Get(ctx, origin)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return err // asked again from the same mark
		}
		// A record not signed by its origin rules nothing out.
		var rec PublishRecord
		if err := f.ring.openValue(kvSubject(PublishedBucket, origin), e.Value(), &rec); err == nil && rec.Node == origin && rec.RulesOut(inc, mark) {
			continue // published nothing the hole could have held
		}
		if f.rebuilder == nil {
			f.log.Warn("peers: no dump to rebuild a peer's part from", "origin", origin)
			continue
		}
		if err := f.rebuild(ctx, origin); err != nil {
			if _, ok := errors.AsType[*notOwedError](err); ok {
				return err
			}
			// An origin that is down cannot be asked; its part stays as it
			// was, its next events fold on top, and the rebuild is owed.
			f.log.Warn("peers: rebuilding a peer's part from its dump", "origin", origin, "err", err)
			continue
		}
		f.log.Info("peers: rebuilt a peer's part from its dump", "origin", origin, "seeded", seeded)
	}
	return nil
}

// notOwedError is a failed rebuild the catalog could not record as owed
// either: the fold must not move its mark past the hole.
type notOwedError struct{ err error }

func (e *notOwedError) Error() string { return e.err.Error() }
func (e *notOwedError) Unwrap() error { return e.err }

// rebuildRetry is how often an origin whose rebuild failed is asked again.
const rebuildRetry = 30 * time.Second

// rebuild rebuilds origin's part, owing it on failure. What is owed is
// in the catalog before the fold moves its mark past the hole.
func (f *Folder) rebuild(ctx context.Context, origin string) error {
	if err := f.rebuilder.Rebuild(ctx, origin); err != nil {
		f.rebuilds.WithLabelValues("failed").Inc()
		if f.owed == nil {
			f.owed = map[string]bool{}
		}
		f.owed[origin], f.owedTried = true, time.Now()
		if oerr := f.db.OweRebuild(ctx, origin); oerr != nil {
			return &notOwedError{errors.Join(err, oerr)}
		}
		return err
	}
	f.rebuilds.WithLabelValues("ok").Inc()
	if f.owed[origin] {
		if err := f.db.RebuildDone(ctx, origin); err != nil {
			return err
		}
		delete(f.owed, origin)
	}
	return nil
}

// retryOwed asks again the origins whose rebuild failed, at most every
// rebuildRetry.
func (f *Folder) retryOwed(ctx context.Context) {
	if len(f.owed) == 0 || time.Since(f.owedTried) < rebuildRetry {
		return
	}
	f.owedTried = time.Now()
	for origin := range f.owed {
		if err := f.rebuild(ctx, origin); err != nil {
			f.log.Warn("peers: rebuilding a peer's part from its dump, again", "origin", origin, "err", err)
			continue
		}
		f.log.Info("peers: rebuilt a peer's part from its dump", "origin", origin)
	}
}

// consumerName makes a node name fit a consumer name (no dots).
func consumerName(node string) string {
	b := []byte(node)
	for i, c := range b {
		if c == '.' || c == '*' || c == '>' || c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}
