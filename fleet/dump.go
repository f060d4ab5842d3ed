package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
)

// A full state dump is how a peer that lost events to the stream's
// retention (or a new node on a stream that dropped its start) gets an
// origin's part whole: the origin's own groups with all their ranges, and
// its worker nodes, straight from its catalog. It is served over NATS
// request/reply and streamed as a series of DumpChunk messages to the
// requester's inbox, never buffered whole on either side.
//
// Flow control: every chunk is published with the dumper's ack inbox as
// its reply subject, and the receiver answers each chunk once it has
// folded it. The dumper keeps at most dumpWindow chunks unanswered, so a
// slow receiver slows the dump instead of piling megabytes up in its
// client (4 MiB at most in flight, whatever the dump's size). A receiver
// that went away is noticed by the server's "no responders" answer to the
// next chunk sent, or after dumpWait without an answer.

// DumpRequest is the body of a request on DumpSubjectPrefix+origin.
type DumpRequest struct {
	// Catalog is the asking node's catalog id, for the origin's logs.
	Catalog string `json:"catalog"`
	// Stage is the newest staged dump format the asker reads (0: none);
	// an origin that writes that format sends its groups staged
	// (dumpstage.go).
	Stage int `json:"stage,omitempty"`
}

// DumpChunk is one message of a dump. Seq counts chunks from 0; the last
// has Last set. A group whose ranges do not fit one chunk is split over
// several, each repeating the group; worker nodes follow the groups, and
// a receiver drops the origin's nodes that no chunk named. Err, set on a
// last chunk, says the dump failed there.
type DumpChunk struct {
	// Format is the origin's FormatVersion (0 before versions: 1); a
	// receiver refuses a dump newer than it reads.
	Format  int               `json:"format,omitempty"`
	Seq     int               `json:"seq"`
	Last    bool              `json:"last"`
	Groups  []DumpGroup       `json:"groups,omitempty"`
	Nodes   []store.FleetNode `json:"nodes,omitempty"`
	Catalog string            `json:"catalog"`
	// At is when the origin began the dump, on its clock: the state is at
	// least that new.
	At  time.Time `json:"at"`
	Err string    `json:"err,omitempty"`
	// Stage names the staged file sent as the pieces before this chunk.
	Stage *DumpStage `json:"stage,omitempty"`
}

// DumpGroup is a group of a dump and some (or all) of its ranges.
type DumpGroup struct {
	Group  store.PeerGroup   `json:"group"`
	Ranges []store.PeerRange `json:"ranges"`
}

// dumpChunkBytes bounds a chunk's body, well under the server's default
// max payload of 1 MiB.
const dumpChunkBytes = 512 << 10

// dumpWindow is how many chunks may be unanswered at once.
const dumpWindow = 8

// dumpWait is how long either side waits for the other between chunks.
const dumpWait = 10 * time.Second

// dumpBeat is how often an origin reading its catalog tells the receiver
// the dump goes on: reading a group of 100,000 ranges can take longer than
// dumpWait on a busy machine.
const dumpBeat = dumpWait / 4

// headerDumpAlive marks such a message: no chunk, only a sign of life.
const headerDumpAlive = "Leasehold-Dump-Alive"

// dumpConcurrent bounds the dumps an origin serves at once; a request past
// it is answered with an error, and the asker tries again later.
const dumpConcurrent = 4

// dumpPage is how many groups a dump reads at once, with their ranges.
const dumpPage = 256

// Dumper serves this node's full state dumps on DumpSubjectPrefix+node.
// Each request is served in a goroutine of its service, which Stop ends
// and waits for.
type Dumper struct {
	nc   *nats.Conn
	db   *store.DB
	node string
	log  *slog.Logger
	id   *Identity // signs every chunk

	mu    sync.Mutex
	sub   *nats.Subscription
	slots chan struct{}

	service.Base
}

// NewDumper returns node's dumper of db over nc.
func NewDumper(nc *nats.Conn, db *store.DB, node string, log *slog.Logger) *Dumper {
	if log == nil {
		log = slog.Default()
	}
	return &Dumper{nc: nc, db: db, node: node, log: log, id: ephemeralIdentity(node), slots: make(chan struct{}, dumpConcurrent)}
}

// Start subscribes to this node's dump subject; the dumps served end with
// ctx. Every node answers only for itself, so there is no queue group.
// Errors: conflict when started already, unavailable when the
// subscription cannot be made.
func (d *Dumper) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Begin(ctx); err != nil {
		return leasehold.Errorf(leasehold.KindConflict, "the dumper of %q is started already", d.node)
	}
	sub, err := d.nc.Subscribe(DumpSubjectPrefix+d.node, d.serve)
	if err != nil {
		d.Base.Stop()
		return leasehold.Wrap(leasehold.KindUnavailable, err, "serving dumps of %q: %v", d.node, err)
	}
	d.sub = sub
	removeStaged(d.db.StageDir(), "dump-") // left by a dump that did not end
	// The subscription reaches the server now if it can; if not, the
	// client sends it again when it reconnects.
	_ = d.nc.FlushTimeout(5 * time.Second)
	return nil
}

// Stop stops answering, ends the dumps in progress and waits for them.
func (d *Dumper) Stop() {
	d.mu.Lock()
	sub := d.sub
	d.sub = nil
	d.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	d.Base.Stop()
}

// serve starts the dump a request asks for, or answers that this node is
// busy.
func (d *Dumper) serve(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var req DumpRequest
	_ = json.Unmarshal(m.Data, &req)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub == nil {
		return
	}
	select {
	case d.slots <- struct{}{}:
	default:
		d.refuse(m.Reply, "busy serving other dumps")
		return
	}
	served := d.Go(func(ctx context.Context) error {
		defer func() { <-d.slots }()
		start := time.Now()
		chunks, err := d.dump(ctx, m.Reply, req.Stage >= store.StageFormat)
		if err != nil {
			d.log.Warn("peers: serving a state dump", "to", req.Catalog, "chunks", chunks, "err", err)
			return nil // logged; the dumper goes on serving
		}
		d.log.Info("peers: served a state dump", "to", req.Catalog, "chunks", chunks, "took", time.Since(start))
		return nil
	})
	if !served {
		<-d.slots // stopping
	}
}

// refuse answers a request with a failed last chunk.
func (d *Dumper) refuse(reply, why string) {
	body, _ := json.Marshal(DumpChunk{Format: FormatVersion, Last: true, Catalog: d.db.CatalogID(), Err: why})
	m := &nats.Msg{Subject: reply, Data: body}
	d.id.SignMsg(m)
	_ = d.nc.PublishMsg(m)
}

// dumpWriter builds and sends a dump's chunks. The chunk is kept in its
// wire form (each group and range encoded once, as it is added), so its
// size is known exactly before it is sent.
type dumpWriter struct {
	nc      *nats.Conn
	id      *Identity
	reply   string
	acks    *nats.Subscription
	limit   int
	catalog string
	at      time.Time

	seq    int // of the chunk being built
	acked  int // chunks answered
	size   int
	groups []wireGroup
	nodes  []json.RawMessage
	stage  *DumpStage
}

// wireChunk and wireGroup are DumpChunk and DumpGroup with their rows
// already encoded.
type wireChunk struct {
	Format  int               `json:"format"`
	Seq     int               `json:"seq"`
	Last    bool              `json:"last"`
	Groups  []wireGroup       `json:"groups,omitempty"`
	Nodes   []json.RawMessage `json:"nodes,omitempty"`
	Catalog string            `json:"catalog"`
	At      time.Time         `json:"at"`
	Err     string            `json:"err,omitempty"`
	Stage   *DumpStage        `json:"stage,omitempty"`
}

type wireGroup struct {
	Group  json.RawMessage   `json:"group"`
	Ranges []json.RawMessage `json:"ranges"`
}

// chunkOverhead is room for a chunk's own fields.
const chunkOverhead = 256

func (d *Dumper) dump(ctx context.Context, reply string, staged bool) (int, error) {
	acks, err := d.nc.SubscribeSync(d.nc.NewInbox())
	if err != nil {
		return 0, err
	}
	defer acks.Unsubscribe()
	w := &dumpWriter{nc: d.nc, id: d.id, reply: reply, acks: acks, catalog: d.db.CatalogID(), at: d.db.Now(),
		limit: dumpChunkBytes, size: chunkOverhead}
	if half := int(d.nc.MaxPayload()) / 2; half > 0 && half < w.limit {
		w.limit = half // a server configured for smaller messages
	}
	if err := d.write(ctx, w, staged); err != nil {
		// Tell the receiver, so it need not wait out its timeout.
		w.groups, w.nodes = nil, nil
		_ = w.send(ctx, true, err.Error())
		return w.seq, err
	}
	err = w.send(ctx, true, "")
	return w.seq, err
}

// write adds the node's own groups with all their ranges (as staged
// files when staged), then its worker nodes.
func (d *Dumper) write(ctx context.Context, w *dumpWriter, staged bool) error {
	if staged {
		if err := d.writeStaged(ctx, w); err != nil {
			return err
		}
	}
	var after int64
	for !staged {
		stop := w.keepAlive()
		page, err := d.db.OwnStates(ctx, after, dumpPage)
		stop()
		if err != nil {
			return err
		}
		for _, g := range page {
			if err := w.addGroup(ctx, g.Group, g.Ranges); err != nil {
				return err
			}
		}
		if len(page) < dumpPage {
			break
		}
		after = page[len(page)-1].Group.ID
	}
	nodes, err := d.db.FleetNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		n.Token = ""
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		if w.size+len(b)+1 > w.limit && !w.empty() {
			if err := w.send(ctx, false, ""); err != nil {
				return err
			}
		}
		w.nodes = append(w.nodes, b)
		w.size += len(b) + 1
	}
	return nil
}

// addGroup adds g and its ranges, splitting them over as many chunks as
// they need, each repeating the group.
func (w *dumpWriter) addGroup(ctx context.Context, g store.PeerGroup, ranges []store.PeerRange) error {
	head, err := json.Marshal(g)
	if err != nil {
		return err
	}
	open := func() error {
		if w.size+len(head)+32 > w.limit && !w.empty() {
			if err := w.send(ctx, false, ""); err != nil {
				return err
			}
		}
		w.groups = append(w.groups, wireGroup{Group: head, Ranges: []json.RawMessage{}})
		w.size += len(head) + 32
		return nil
	}
	if err := open(); err != nil {
		return err
	}
	for _, r := range ranges {
		b, err := appendRange(nil, r)
		if err != nil {
			return err
		}
		cur := &w.groups[len(w.groups)-1]
		if w.size+len(b)+1 > w.limit && len(cur.Ranges) > 0 {
			if err := w.send(ctx, false, ""); err != nil {
				return err
			}
			if err := open(); err != nil {
				return err
			}
			cur = &w.groups[len(w.groups)-1]
		}
		cur.Ranges = append(cur.Ranges, b)
		w.size += len(b) + 1
	}
	return nil
}

// keepAlive tells the receiver every dumpBeat, until stop is called, that
// the dump goes on. It is used only around reads of the catalog, so an
// origin stuck on something else (an unanswered window) still times out.
func (w *dumpWriter) keepAlive() (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(dumpBeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m := nats.NewMsg(w.reply)
				m.Header.Set(headerDumpAlive, "1")
				_ = w.nc.PublishMsg(m)
			}
		}
	}()
	return func() { close(done); <-ended }
}

func (w *dumpWriter) empty() bool { return len(w.groups) == 0 && len(w.nodes) == 0 }

// send sends the chunk being built, after waiting until fewer than
// dumpWindow chunks are unanswered, and starts the next. A failure is
// sent at once: it is small, and the wait may be what failed.
func (w *dumpWriter) send(ctx context.Context, last bool, failed string) error {
	for failed == "" && w.seq-w.acked >= dumpWindow {
		if err := w.awaitAck(ctx); err != nil {
			return err
		}
	}
	body, err := w.body(last, failed)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: w.reply, Reply: w.acks.Subject, Data: body}
	w.id.SignMsg(m)
	if err := w.nc.PublishMsg(m); err != nil {
		return err
	}
	w.seq++
	w.groups, w.nodes, w.size = nil, nil, chunkOverhead
	return nil
}

// body is the chunk being built in its wire form, a DumpChunk. Its groups
// and nodes are joined as encoded: json.Marshal of the wireChunk would
// check and compact every one of them again, a third of the dumper's
// cost.
func (w *dumpWriter) body(last bool, failed string) ([]byte, error) {
	head, err := json.Marshal(wireChunk{Format: FormatVersion, Seq: w.seq, Last: last, Catalog: w.catalog, At: w.at, Err: failed, Stage: w.stage})
	if err != nil {
		return nil, err
	}
	if w.empty() {
		return head, nil
	}
	b := make([]byte, 0, w.size+len(head))
	b = append(b, head[:len(head)-1]...) // without its closing brace
	if len(w.groups) > 0 {
		b = append(b, `,"groups":[`...)
		for i, g := range w.groups {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"group":`...)
			b = append(b, g.Group...)
			b = append(b, `,"ranges":[`...)
			b = appendJoined(b, g.Ranges)
			b = append(b, "]}"...)
		}
		b = append(b, ']')
	}
	if len(w.nodes) > 0 {
		b = append(b, `,"nodes":[`...)
		b = appendJoined(b, w.nodes)
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// appendJoined appends the encoded values comma-separated.
func appendJoined(b []byte, vs []json.RawMessage) []byte {
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v...)
	}
	return b
}

// awaitAck waits for the receiver's answer to a chunk.
func (w *dumpWriter) awaitAck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dumpWait)
	defer cancel()
	m, err := w.acks.NextMsgWithContext(ctx)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return errors.New("the receiver went away")
	case errors.Is(err, context.DeadlineExceeded):
		return errors.New("the receiver answered no chunk for " + dumpWait.String())
	case err != nil:
		return err
	}
	seq, err := strconv.Atoi(string(m.Data))
	if err != nil {
		return errors.New("the receiver's answer is not a chunk number")
	}
	w.acked = max(w.acked, seq+1)
	return nil
}

// Rebuild rebuilds origin's part of db from origin's full state dump,
// folding it chunk by chunk as it arrives (the chunks arrived together,
// up to dumpFoldBatch, in one catalog write):
// its groups (under the same claim rule as events: a newer claim wins),
// their ranges, its worker nodes; at the end, the origin's nodes the dump
// did not name are removed and the peer is recorded and its rebuild
// counted. A chunk's groups are folded before its arrival is answered,
// which is what paces the origin. It asks for the groups as staged files
// (dumpstage.go); an origin of a build before sends JSON chunks, folded
// as above. Errors: unavailable when origin serves
// no dump (no responders), a chunk is missing or does not come within
// 10 s, or the origin reports a failure; the store's errors otherwise.
func Rebuild(ctx context.Context, nc *nats.Conn, db *store.DB, origin string, maxAttempts int64) error {
	return rebuild(ctx, nc, db, origin, maxAttempts, memoryKeyring(nil))
}

// rebuild is Rebuild believing only chunks signed by origin with the key
// ring knows for it; others are passed over (counted and logged).
func rebuild(ctx context.Context, nc *nats.Conn, db *store.DB, origin string, maxAttempts int64, ring *Keyring) error {
	return rebuildAsking(ctx, nc, db, origin, maxAttempts, ring, store.StageFormat)
}

// rebuildAsking is rebuild asking for a staged dump of format stage (0:
// JSON chunks only, as a build before staged dumps asks).
func rebuildAsking(ctx context.Context, nc *nats.Conn, db *store.DB, origin string, maxAttempts int64, ring *Keyring, stage int) error {
	if !leasehold.ValidNodeName(origin) {
		return leasehold.Errorf(leasehold.KindInvalid, "peer %q is not a node name", origin)
	}
	inbox, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "asking %q for its dump: %v", origin, err)
	}
	defer inbox.Unsubscribe()
	// Chunks are paced by the answers, so the defaults are never reached;
	// no limit keeps a burst from being dropped as a slow consumer.
	_ = inbox.SetPendingLimits(-1, -1)
	files, err := newStageReceiver(db, origin)
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "receiving %q's dump: %v", origin, err)
	}
	body, _ := json.Marshal(DumpRequest{Catalog: db.CatalogID(), Stage: stage})
	if err := nc.PublishMsg(&nats.Msg{Subject: DumpSubjectPrefix + origin, Reply: inbox.Subject, Data: body}); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "asking %q for its dump: %v", origin, err)
	}
	// A chunk is decoded while the one before it is folded: decoding is a
	// third of a chunk's cost, and the fold (the catalog's one writer) is
	// the critical path, so on two cores the decoding is nearly free.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan arrived, dumpWindow)
	received := make(chan struct{})
	go func() { defer close(received); receiveChunks(ctx, inbox, chunks, origin, ring, files) }()
	defer func() { cancel(); <-received; files.close() }()
	in := &chunkBatches{chunks: chunks, origin: origin}
	var names []string
	var folded int64
	for {
		batch, err := in.next(ctx)
		if err != nil {
			return err
		}
		if a := batch[0]; a.stage != nil {
			err := foldStaged(ctx, db, origin, a.stage, a.msg, a.chunk.Seq, maxAttempts, &folded)
			files.done(a.stage)
			if err != nil {
				return stageError(origin, err)
			}
			_ = a.msg.Respond([]byte(strconv.Itoa(a.chunk.Seq)))
			continue
		}
		for _, a := range batch {
			for _, n := range a.chunk.Nodes {
				names = append(names, n.Name)
			}
		}
		err = db.Write(ctx, func(tx *store.Tx) error {
			for _, a := range batch {
				if err := foldChunk(tx, origin, a.chunk, names, maxAttempts); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, a := range batch {
			if a.msg.Reply != "" {
				_ = a.msg.Respond([]byte(strconv.Itoa(a.chunk.Seq)))
			}
		}
		if batch[len(batch)-1].chunk.Last {
			return nil
		}
	}
}

// foldBatch is how many decoded chunks a rebuild folds in one catalog
// write when they are there to be had: one commit (its WAL pages, its
// fsync) for several, while the writer is held no more than a few tens
// of milliseconds longer.
const dumpFoldBatch = 4

// chunkBatches hands a rebuild the chunks of a dump in order, checked,
// as many as have arrived up to dumpFoldBatch.
type chunkBatches struct {
	chunks <-chan arrived
	origin string
	want   int      // the next chunk's Seq
	held   *arrived // taken while gathering, not checked yet
}

// next waits for the next chunk and takes those arrived behind it, up to
// foldBatch and the last. A chunk that fails its checks ends the batch
// before it and is the error of the next call.
func (b *chunkBatches) next(ctx context.Context) ([]arrived, error) {
	var batch []arrived
	for len(batch) < dumpFoldBatch {
		a := b.held
		b.held = nil
		if a == nil && len(batch) == 0 {
			select {
			case got := <-b.chunks:
				a = &got
			case <-ctx.Done():
				return nil, leasehold.Wrap(leasehold.KindUnavailable, ctx.Err(), "receiving %q's dump: %v", b.origin, ctx.Err())
			}
		} else if a == nil {
			select {
			case got := <-b.chunks:
				a = &got
			default:
				return batch, nil // no more arrived yet
			}
		}
		b.want += a.skip // the pieces of a staged file before it
		a.skip = 0
		if err := b.check(ctx, *a); err != nil || (a.stage != nil && len(batch) > 0) {
			if len(batch) > 0 {
				b.held = a
				return batch, nil
			}
			return nil, err
		}
		b.want++
		batch = append(batch, *a)
		if a.chunk.Last || a.stage != nil {
			break // a staged file is folded alone
		}
	}
	return batch, nil
}

// check is the error a chunk as arrived makes, nil when it is the next
// chunk of a dump this build reads.
func (b *chunkBatches) check(ctx context.Context, a arrived) error {
	origin, c, err := b.origin, a.chunk, a.err
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return leasehold.Wrap(leasehold.KindUnavailable, err, "peer %q serves no dump (it is not connected)", origin)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return leasehold.Wrap(leasehold.KindUnavailable, err, "peer %q sent no dump chunk for %s", origin, dumpWait)
	case leasehold.KindOf(err) == leasehold.KindUnprocessable:
		return stageError(origin, err) // a staged file of a newer format
	case errors.Is(err, errNotChunk):
		return leasehold.Wrap(leasehold.KindUnavailable, err, "peer %q's dump chunk %d is not a dump chunk", origin, b.want)
	case err != nil:
		return leasehold.Wrap(leasehold.KindUnavailable, err, "receiving %q's dump: %v", origin, err)
	}
	if formatNewer(c.Format) {
		return leasehold.Errorf(leasehold.KindUnprocessable, "peer %q's dump is of format %d, newer than this build reads (%d): upgrade this node", origin, c.Format, FormatVersion)
	}
	if c.Stage != nil && c.Stage.Format > store.StageFormat {
		return leasehold.Errorf(leasehold.KindUnprocessable, "peer %q's staged dump is of format %d, newer than this build reads (%d): upgrade this node", origin, c.Stage.Format, store.StageFormat)
	}
	if c.Err != "" {
		return leasehold.Errorf(leasehold.KindUnavailable, "peer %q could not dump its state: %s", origin, c.Err)
	}
	if c.Seq != b.want {
		return leasehold.Errorf(leasehold.KindUnavailable, "peer %q's dump: chunk %d came where %d was due", origin, c.Seq, b.want)
	}
	return nil
}

// foldChunk folds one chunk of origin's dump: its groups and their
// ranges, its nodes, and, with the last chunk, the peer rebuilt with
// names, every node the dump named.
func foldChunk(tx *store.Tx, origin string, c DumpChunk, names []string, maxAttempts int64) error {
	gs := make([]store.PeerGroupState, len(c.Groups))
	for i, g := range c.Groups {
		gs[i] = store.PeerGroupState{Group: g.Group, Ranges: g.Ranges}
	}
	if err := tx.FoldPeerGroups(origin, gs, maxAttempts); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := tx.FoldNode(origin, n, maxAttempts); err != nil {
			return err
		}
	}
	if !c.Last {
		return nil
	}
	// Event 0 and position 0 leave what folding recorded: the dump is at
	// no stream position.
	if err := tx.FoldPeer(origin, c.Catalog, 0, c.At, 0); err != nil {
		return err
	}
	return tx.PeerRebuilt(origin, names, maxAttempts)
}

// arrived is a dump chunk as received and decoded, or why none was.
type arrived struct {
	msg   *nats.Msg
	chunk DumpChunk
	err   error
	stage *stagedFile // the staged file the chunk names, received
	skip  int         // the pieces received before it
}

var errNotChunk = errors.New("not a dump chunk")

// receiveChunks decodes the dump's chunks as they arrive, in order, until
// an error (passed on, then it stops) or ctx ends. The origin sends at
// most dumpWindow chunks ahead of the answers, so what waits here is
// bounded.
func receiveChunks(ctx context.Context, inbox *nats.Subscription, out chan<- arrived, origin string, ring *Keyring, stage *stageReceiver) {
	skip := 0
	for {
		var a arrived
		a.msg, a.err = nextChunk(ctx, inbox)
		if a.err == nil {
			signer, err := ring.VerifyMsg(a.msg.Subject, a.msg.Header, a.msg.Data, origin)
			if err == nil && signer != origin {
				err = refused(refusedWrongOrigin, signer, "node %q answered for node %q's dump", signer, origin)
			}
			if err != nil {
				// Anyone on NATS may answer on the inbox: only the
				// origin's own chunks are taken.
				ring.refuse("dump", a.msg.Subject, err)
				continue
			}
		}
		if a.err == nil && a.msg.Header.Get(headerDumpPiece) != "" {
			if a.err = stage.piece(ctx, a.msg); a.err == nil {
				_ = a.msg.Respond([]byte(strconv.Itoa(stage.next - 1)))
				skip++
				continue
			}
		}
		if a.err == nil {
			if err := json.Unmarshal(a.msg.Data, &a.chunk); err != nil {
				a.err = fmt.Errorf("%w: %v", errNotChunk, err)
			}
		}
		if a.err == nil && a.chunk.Stage != nil {
			a.stage, a.err = stage.finish(ctx, a.chunk)
		}
		if a.err == nil {
			stage.next = a.chunk.Seq + 1
		}
		a.skip, skip = skip, 0
		select {
		case out <- a:
		case <-ctx.Done():
			return
		}
		if a.err != nil || a.chunk.Last {
			return
		}
	}
}

// nextChunk waits up to dumpWait for the next chunk, or for a sign of
// life from the origin, which starts the wait again.
func nextChunk(ctx context.Context, sub *nats.Subscription) (*nats.Msg, error) {
	for {
		wait, cancel := context.WithTimeout(ctx, dumpWait)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		if err != nil || m.Header.Get(headerDumpAlive) == "" {
			return m, err
		}
	}
}
