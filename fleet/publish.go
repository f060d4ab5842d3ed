package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
)

// Publisher sends this node's outbox, in order, to the fleet's stream and
// marks rows sent only once the server acknowledged them. A batch that was
// not acknowledged whole is sent again whole; the stream drops what it
// already has by Nats-Msg-Id, and folding state twice changes nothing.
// After each batch it raises this node's publish record, by
// compare-and-set, to the stream position it published at: a peer that
// lost events to the stream's retention asks it whether it missed any.
type Publisher struct {
	js      jetstream.JetStream
	db      *store.DB
	node    string
	catalog string
	records jetstream.KeyValue
	log     *slog.Logger
	// id signs every message published (SignMsg), at the one place they
	// are sent, and the publish record; ring checks the record read.
	id   *Identity
	ring *Keyring

	// Keep is how long sent rows stay in the outbox (the dashboard's feed
	// reads the last hour).
	keep time.Duration
	sent []sentMark // batches sent, oldest first, for pruning

	// snaps, if set, is told the name of every group of this node's
	// whose snapshot_stored event was published: the fleet replicates the
	// snapshot.
	snaps SnapshotQueue

	lastSeq   uint64      // the stream position of the last message acknowledged, in stream
	stream    string      // the stream's incarnation lastSeq is a position in
	streamAt  time.Time   // when stream was last read
	restream  atomic.Bool // the stream may have been made anew: read it again
	published prometheus.Counter
	failures  prometheus.Counter
	acked     atomic.Int64
	at        atomic.Uint64 // lastSeq, for readers outside the publishing loop

	// failing is the run of failed batches going on, for Stuck.
	failingMu sync.Mutex
	failing   failingRun

	service.Base
}

// stuckAfter is how long the outbox may fail to publish before peer sync
// is stuck: a finding, and a WARN line (a variable so a test can wait
// less).
var stuckAfter = time.Minute

// failingRun is a run of failed batches: since the first, the last error,
// and whether the run was told as stuck.
type failingRun struct {
	since time.Time
	err   error
	told  bool
}

// failed records a failed batch at now, and says so once the run is
// longer than stuckAfter.
func (p *Publisher) failed(now time.Time, err error) {
	p.failingMu.Lock()
	defer p.failingMu.Unlock()
	if p.failing.since.IsZero() {
		p.failing.since = now
	}
	p.failing.err = err
	if now.Sub(p.failing.since) >= stuckAfter {
		p.tellStuck(now)
	}
}

// tellStuck logs the run of failures as stuck, once a run; failingMu is
// held.
func (p *Publisher) tellStuck(now time.Time) {
	if p.failing.told {
		return
	}
	p.failing.told = true
	p.log.Warn("peers: peer sync is stuck: the outbox has not been published", "for", now.Sub(p.failing.since).Round(time.Second),
		"since", p.failing.since.UTC().Format(time.RFC3339), "err", p.failing.err)
}

// publishedAgain ends a run of failed batches.
func (p *Publisher) publishedAgain(now time.Time) {
	p.failingMu.Lock()
	defer p.failingMu.Unlock()
	if p.failing.told {
		p.log.Info("peers: peer sync publishes again", "stuck_for", now.Sub(p.failing.since).Round(time.Second))
	}
	p.failing = failingRun{}
}

// Stuck reports whether the outbox has failed to publish for stuckAfter
// or longer at now: since when, and the last error.
func (p *Publisher) Stuck(now time.Time) (since time.Time, err error, ok bool) {
	p.failingMu.Lock()
	defer p.failingMu.Unlock()
	f := p.failing
	if f.since.IsZero() || now.Sub(f.since) < stuckAfter {
		return time.Time{}, nil, false
	}
	// A batch that waits for its acknowledgement may fail long after
	// stuckAfter: whoever sees the run stuck first tells it.
	p.tellStuck(now)
	return f.since, f.err, true
}

// Sent is how many events this publisher has sent and had acknowledged.
func (p *Publisher) Sent() int64 { return p.acked.Load() }

// Position is the stream position of the last of this node's events the
// stream acknowledged (0 before the first, or in a stream made anew until
// its first batch): a peer that has folded this node's events up to it has
// every change this node published.
func (p *Publisher) Position() uint64 { return p.at.Load() }

type sentMark struct {
	through int64
	at      time.Time
}

// publishBatch bounds the events read and sent at once.
const publishBatch = 512

// publishAckWait bounds the wait for a batch's acknowledgements. It was
// 30 s for each message: after a partition healed, a node's first batch
// lost its acknowledgements in the streams' elections, and its outbox (the
// plans and finishes it made while cut off) reached its peers half a
// minute late, while they agreed on a state without them.
const publishAckWait = 10 * time.Second

// publishIdle is how often an idle publisher looks at the outbox.
const publishIdle = 50 * time.Millisecond

// publishLinger is how long a publisher that sent less than a full batch
// lets the outbox fill before it reads again. Every batch costs a read of
// the outbox, a state read for each group in it, a catalog write marking
// it sent, a stream message every node stores and folds, and a
// compare-and-set of the publish record, whatever its size; and a range
// leased and finished inside one batch goes out once, finished, where two
// batches send it twice. At 20 ms a fleet of three paid 3.5x a lone
// node's CPU a range, at 50 ms 3.4x (scripts/bench-scaleout.sh); at
// 200 ms a group's state goes out about once for every four times it did,
// and the fold upserts its ranges as seldom (BENCHMARKS.md, issue 45).
// Peers see events at most this much later under load (and a node that
// stops leaves as much unpublished until it starts again); a trickle of
// events (a batch under publishLingerFrom) waits only publishIdle, as it
// did at 50 ms.
const publishLinger = 200 * time.Millisecond

// publishLingerFrom is the batch from which the publisher lingers
// publishLinger: 32 events in the idle look's 50 ms is 640 a second, a
// node under load (a fleet node of the scale-out bench publishes about
// 1,300 a second), while a few events at a time go out as quickly as
// before.
const publishLingerFrom = 32

// SnapshotQueue takes the groups whose newest snapshots are to be
// replicated: *Replicator is one.
type SnapshotQueue interface{ Replicate(group string) }

// NewPublisher returns the publisher of node's outbox, with its publish
// record in records; snaps, if not nil, is told of each snapshot stored
// here once its event is published.
func NewPublisher(js jetstream.JetStream, db *store.DB, node string, records jetstream.KeyValue, snaps SnapshotQueue, log *slog.Logger) *Publisher {
	return &Publisher{js: js, db: db, node: node, catalog: db.CatalogID(), records: records, snaps: snaps, log: log, keep: 2 * time.Hour, id: ephemeralIdentity(node), ring: memoryKeyring(log),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_peer_events_published_total", Help: "Outbox events published to the fleet's stream and acknowledged.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_peer_publish_failures_total", Help: "Outbox batches not acknowledged whole, to be sent again.",
		}),
	}
}

// Collectors are the publisher's metrics.
func (p *Publisher) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.published, p.failures}
}

// Start publishes until ctx ends or Stop, retrying a failed batch with
// backoff. A publisher that cannot follow the stream's advisories ends
// with that error (Err). Errors: service.ErrStarted.
func (p *Publisher) Start(ctx context.Context) error { return p.Begin(ctx, p.run) }

// run publishes (see Start) until ctx ends.
func (p *Publisher) run(ctx context.Context) error {
	// The server advises when the stream is made or deleted: the record's
	// incarnation is read again before the next batch.
	for _, what := range []string{"CREATED", "DELETED"} {
		sub, err := p.js.Conn().Subscribe("$JS.EVENT.ADVISORY.STREAM."+what+"."+StreamName, func(*nats.Msg) { p.restream.Store(true) })
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		n, err := p.publishOnce(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.failures.Inc()
			p.failed(time.Now(), err)
			p.log.Warn("peers: publishing the outbox", "err", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		p.publishedAgain(time.Now())
		switch {
		case n < publishLingerFrom:
			sleep(ctx, publishIdle)
		case n < publishBatch:
			sleep(ctx, publishLinger)
		}
	}
	return nil
}

// publishOnce sends one batch of the outbox and reports how many events
// it sent.
func (p *Publisher) publishOnce(ctx context.Context) (int, error) {
	events, err := p.db.Unsent(ctx, 0, publishBatch)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	if err := p.replayOwnPlans(ctx, events); err != nil {
		return 0, err
	}
	msgs, snapshots, err := p.messages(ctx, events)
	if err != nil {
		return 0, err
	}
	// The batch goes out in as few stream messages as fit (Batch).
	stream, err := p.pack(msgs)
	if err != nil {
		return 0, err
	}
	labeled := true
	if err := p.label(ctx); err != nil {
		labeled = false
		p.log.Warn("peers: reading the stream's incarnation for the publish record", "err", err)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(stream))
	for _, m := range stream {
		p.id.SignMsg(m)
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return 0, fmt.Errorf("publishing event %s: %w", m.Header.Get(nats.MsgIdHdr), err)
		}
		futures = append(futures, f)
	}
	var last uint64
	// One deadline for the batch: an acknowledgement lost in a leader
	// election (a heal, a node killed) is not waited for longer than it
	// takes to send the batch again, which the stream deduplicates by the
	// events' ids.
	timeout := time.NewTimer(publishAckWait)
	defer timeout.Stop()
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			last = max(last, ack.Sequence)
		case err := <-f.Err():
			return 0, fmt.Errorf("publishing event %s: %w", f.Msg().Header.Get(nats.MsgIdHdr), err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timeout.C:
			return 0, fmt.Errorf("no acknowledgement within %s", publishAckWait)
		}
	}
	// Where the batch stands, whether or not the stream's incarnation could
	// be read for the publish record: what peers fold is this stream.
	p.at.Store(last)
	// The snapshots are queued before the events are marked sent, so a
	// group never looks settled (nothing unsent, nothing pending upload)
	// while its newest window is in neither place.
	if p.snaps != nil {
		for _, g := range snapshots {
			p.snaps.Replicate(g)
		}
	}
	through := events[len(events)-1].ID
	if err := p.db.Write(ctx, func(tx *store.Tx) error { return tx.MarkSent(through) }); err != nil {
		return 0, err
	}
	p.published.Add(float64(len(events)))
	p.acked.Add(int64(len(events)))
	if !labeled || !p.position(last) {
		// The next batch raises it; a peer that asks meanwhile may rebuild
		// needlessly, never miss.
	} else if err := p.raiseRecord(ctx, p.lastSeq); err != nil {
		// The next batch raises it again; a peer that asks meanwhile sees
		// an older position and may rebuild needlessly, never miss.
		p.log.Warn("peers: raising the publish record", "err", err)
	}
	p.prune(ctx, through)
	return len(events), nil
}

// messages builds the batch's messages, in order (pack makes them stream
// messages). State is read once a group: the
// batch's last event of a group carries it, with every range of the group
// changed since the batch's first event of it. It also names the groups
// whose snapshots were stored.
func (p *Publisher) messages(ctx context.Context, events []leasehold.Event) ([]Message, []string, error) {
	var snapshots []string
	first, last, lastNode := batchMarks(events)
	var out []Message
	for i, e := range events {
		m := Message{Format: FormatVersion, Origin: p.node, Catalog: p.catalog, Event: e.ID, Parts: 1, At: e.At, Kind: e.Kind}
		var ranges []store.PeerRange
		if e.GroupID != nil && last[*e.GroupID] == i {
			g, rs, mirrored, err := p.db.OwnState(ctx, *e.GroupID, first[*e.GroupID])
			switch {
			case leasehold.KindOf(err) == leasehold.KindNotFound:
			case err != nil:
				return nil, nil, err
			case !mirrored:
				m.Group, ranges = &g, rs
			}
		}
		if m.Group == nil && e.GroupID != nil && (e.Kind == store.EventTailPlanned || e.Kind == store.EventHistoryPlanned) {
			late, err := p.latePlan(ctx, e)
			if err != nil {
				return nil, nil, err
			}
			m.Late = late
		}
		if e.Kind == store.EventGroupDeleted {
			m.GroupGone = groupGone(e)
		}
		if e.Kind == store.EventSnapshotStored && e.GroupID != nil {
			if g, err := p.db.OwnStateName(ctx, *e.GroupID); err == nil && g != "" {
				snapshots = append(snapshots, g)
			}
		}
		// A node's state is read as it is now, so only the last of its
		// events in the batch carries it, as a group's does.
		if e.NodeID != nil && movesNode(e.Kind) && (e.Kind == store.EventNodeDeleted || lastNode[*e.NodeID] == i) {
			if err := p.nodeState(ctx, &m, e); err != nil {
				return nil, nil, err
			}
		}
		out = append(out, parts(m, ranges)...)
	}
	return out, snapshots, nil
}

// batchMarks reads a batch of events for what messages carries: each
// group's first event's time (zero from a claim just won, whose first
// state carries every range), each group's last event, and each node's
// last event moving it, by index.
func batchMarks(events []leasehold.Event) (first map[int64]time.Time, last, lastNode map[int64]int) {
	first = map[int64]time.Time{} // group → its first event's time
	last = map[int64]int{}        // group → index of its last event
	lastNode = map[int64]int{}    // node → index of its last event moving it
	for i, e := range events {
		if e.NodeID != nil && movesNode(e.Kind) {
			lastNode[*e.NodeID] = i
		}
		if e.GroupID == nil {
			continue
		}
		if _, ok := first[*e.GroupID]; !ok {
			first[*e.GroupID] = e.At
		}
		if e.Kind == store.EventGroupOwned || e.Kind == store.EventGroupAdopted {
			// The first state under a claim this node has just won
			// carries every range of the group, not only those changed
			// in the batch: a peer's copy may have lost some, or never
			// had them. A peer folding a newer claim drops the ranges
			// outside that owner's plan, and when the group comes back
			// with a longer plan, ranges done before it changed hands
			// and untouched since would otherwise stay missing there
			// (the long fault run of 2026-12-06: two finishes lost, and
			// the nodes disagreeing, at one peer).
			first[*e.GroupID] = time.Time{}
		}
		last[*e.GroupID] = i
	}
	return first, last, lastNode
}

// nodeState puts into m the state of the node e moves: its name when e
// deleted it, else the node as it is now (none when it is gone since).
func (p *Publisher) nodeState(ctx context.Context, m *Message, e leasehold.Event) error {
	if e.Kind == store.EventNodeDeleted {
		var body struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(e.Body, &body)
		m.NodeGone = body.Name
		return nil
	}
	n, _, err := p.db.FleetNode(ctx, *e.NodeID)
	switch {
	case leasehold.KindOf(err) == leasehold.KindNotFound:
	case err != nil:
		return err
	default:
		m.Node = &n
	}
	return nil
}

// parts is m as the messages that carry it, ranges split
// MaxRangesPerMessage a part.
func parts(m Message, ranges []store.PeerRange) []Message {
	parts := max(1, (len(ranges)+MaxRangesPerMessage-1)/MaxRangesPerMessage)
	m.Parts = parts
	out := make([]Message, 0, parts)
	for part := range parts {
		m.Part = part
		m.Ranges = ranges[min(len(ranges), part*MaxRangesPerMessage):min(len(ranges), (part+1)*MaxRangesPerMessage)]
		out = append(out, m)
		// Later parts carry the group (its ranges are folded under it)
		// and more ranges.
		m.Node, m.NodeGone = nil, ""
	}
	return out
}

// latePlan is the plan of a tail or history event of a group whose state
// here is a peer's by the time the event is published: this node made the
// plan (and acknowledged it, and maybe finishes in it) while it owned the
// group, and took a newer owner's state before the stream took the event.
// Sent as a late plan, every node replays it; without it no node would
// learn of the plan. nil when the group is this node's own (its state
// carries the plan) or gone.
func (p *Publisher) latePlan(ctx context.Context, e leasehold.Event) (*LatePlan, error) {
	name, err := p.db.MirroredName(ctx, *e.GroupID)
	if err != nil || name == "" {
		return nil, err
	}
	high, low, err := planOf(e)
	if err != nil || (high == nil && low == nil) {
		return nil, err
	}
	return &LatePlan{Group: name, High: high, Low: low}, nil
}

// planOf is the plan a tail or history event made: the tail's new end
// (high), or the history's new floor (low).
func planOf(e leasehold.Event) (high, low *int64, err error) {
	var body struct {
		High *int64 `json:"high"`
		Low  *int64 `json:"low"`
	}
	if err := json.Unmarshal(e.Body, &body); err != nil {
		return nil, nil, fmt.Errorf("reading event %d: %w", e.ID, err)
	}
	if e.Kind == store.EventTailPlanned {
		return body.High, nil, nil
	}
	return nil, body.Low, nil
}

// replayOwnPlans plans again, in this node's own state, the plans among
// events that the state of their group no longer carries: the node made
// them under an earlier claim, lost the group before the stream took them
// (cut off, or paused, with the outbox stuck behind an election), folded
// the new owner's state, and won the group back before they went out
// (store.Tx.ReplayOwnPlan). Sent with the state as it is now, they would
// tell no node of the plan, and the finishes this node acknowledged in it
// would be lost to the fleet; replayed, the ranges are done again. One read
// a plan event; a write only for a lost plan, which is rare. A plan that
// cannot be replayed is logged and passed over, as the fold does, so one
// group never stops the outbox.
func (p *Publisher) replayOwnPlans(ctx context.Context, events []leasehold.Event) error {
	for _, e := range events {
		if e.GroupID == nil || (e.Kind != store.EventTailPlanned && e.Kind != store.EventHistoryPlanned) {
			continue
		}
		high, low, err := planOf(e)
		if err != nil {
			return err
		}
		lost, err := p.db.OwnPlanLost(ctx, *e.GroupID, high, low)
		if err != nil || !lost {
			if err != nil {
				return err
			}
			continue
		}
		var replayed bool
		err = p.db.Write(ctx, func(tx *store.Tx) error {
			var err error
			replayed, err = tx.ReplayOwnPlan(*e.GroupID, high, low)
			return err
		})
		switch {
		case leasehold.KindOf(err) == leasehold.KindInvalid:
			p.log.Warn("peers: a plan this node made under an earlier claim cannot be planned again", "group_id", *e.GroupID, "event", e.ID, "err", err)
		case err != nil:
			return err
		case replayed:
			p.log.Info("peers: planned again a plan this node made under an earlier claim, lost from its state before the stream took it; its ranges are done again",
				"group_id", *e.GroupID, "event", e.ID, "kind", e.Kind)
		}
	}
	return nil
}

// movesNode reports whether an event of kind changes its node's state: the
// node's own events, and leases, which move its worker node's held count
// and last visit.
func movesNode(kind string) bool {
	return isNodeEvent(kind) || kind == store.EventLeaseGranted || kind == store.EventLeaseReleased
}

func isNodeEvent(kind string) bool {
	switch kind {
	case store.EventNodeRegistered, store.EventNodePaused, store.EventNodeResumed, store.EventNodeDeleted, store.EventNodeChanged, store.EventNodeToken:
		return true
	}
	return false
}

// PublishRecord is the value of an origin's key in PublishedBucket: the
// last position it published at, in which incarnation of the stream.
type PublishRecord struct {
	Seq     uint64    `json:"seq"`
	Stream  string    `json:"stream"` // the stream's incarnation (its creation time)
	Catalog string    `json:"catalog"`
	At      time.Time `json:"at"`
	// Node and Key name the origin and its public key: the record is
	// signed inside its value, as a life is (signValue), and one not
	// signed by its origin vouches for nothing.
	Node string `json:"node,omitempty"`
	Key  string `json:"key,omitempty"`
}

// Rules out reports whether the record rules out events of its origin
// past mark in the stream incarnation inc: only a record of that same
// incarnation at or below mark does. A record of an earlier stream (or one
// written before records named theirs) vouches for nothing: its sequence
// numbers count another stream's messages.
func (r PublishRecord) RulesOut(inc string, mark uint64) bool {
	return r.Stream == inc && r.Seq <= mark
}

// publishStreamCheck is how often a publisher reads the stream's
// incarnation again without being told it changed.
const publishStreamCheck = time.Minute

// label reads the stream's incarnation, which the next batch's record
// names, when it may have changed: at start, once the server advised that
// the stream was made or deleted, and every publishStreamCheck. It is read
// before the batch is sent, so a stream made anew while the batch is in
// flight leaves the record naming the earlier stream, which vouches for
// nothing, rather than the new stream with an old position.
func (p *Publisher) label(ctx context.Context) error {
	if p.stream != "" && !p.restream.Swap(false) && time.Since(p.streamAt) < publishStreamCheck {
		return nil
	}
	stream, err := p.js.Stream(ctx, StreamName)
	if err == nil {
		var info *jetstream.StreamInfo
		if info, err = stream.Info(ctx); err == nil {
			if inc := incarnation(info); inc != p.stream {
				p.stream, p.lastSeq = inc, 0
				p.at.Store(0)
			}
			p.streamAt = time.Now()
			return nil
		}
	}
	p.restream.Store(true)
	return err
}

// position moves lastSeq to last, the highest position the batch was
// acknowledged at, and reports whether the record may be raised to it. A
// position below the last one is a stream made anew under the batch: the
// record waits for the next batch's label.
func (p *Publisher) position(last uint64) bool {
	if last < p.lastSeq {
		p.restream.Store(true)
		return false
	}
	p.lastSeq = last
	return true
}

// raiseRecord raises this node's publish record to seq in the stream's
// current incarnation by compare-and-set; a record of that incarnation
// already at or past seq is left as it is, one of an earlier stream is
// replaced.
func (p *Publisher) raiseRecord(ctx context.Context, seq uint64) error {
	subject := kvSubject(PublishedBucket, p.node)
	val, err := p.id.signValue(subject, PublishRecord{Seq: seq, Stream: p.stream, Catalog: p.catalog, At: time.Now().UTC(), Node: p.node, Key: p.id.PublicKey()})
	if err != nil {
		return err
	}
	for range 5 {
		e, err := p.records.Get(ctx, p.node)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := p.records.Create(ctx, p.node, val); err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		// A record not signed by this node (forged over it) is written
		// over, whatever it says.
		var cur PublishRecord
		if p.ring.openValue(subject, e.Value(), &cur) == nil && cur.Stream == p.stream && cur.Seq >= seq {
			return nil
		}
		_, err = p.records.Update(ctx, p.node, val, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return err
	}
	return errors.New("publish record keeps changing")
}

// prune removes outbox rows sent longer than keep ago.
func (p *Publisher) prune(ctx context.Context, through int64) {
	now := time.Now()
	p.sent = append(p.sent, sentMark{through: through, at: now})
	cut := int64(0)
	for len(p.sent) > 0 && now.Sub(p.sent[0].at) > p.keep {
		cut = p.sent[0].through
		p.sent = p.sent[1:]
	}
	if cut == 0 {
		return
	}
	if err := p.db.Write(ctx, func(tx *store.Tx) error {
		_, err := tx.PruneSent(cut, 10000)
		return err
	}); err != nil {
		p.log.Warn("peers: pruning the outbox", "err", err)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
