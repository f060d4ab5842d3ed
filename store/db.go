// Package store keeps leasehold's catalog in SQLite (modernc.org/sqlite).
//
// One writer connection owns every write: callers queue a function of *Tx
// and the writer runs whatever has queued up inside one BEGIN IMMEDIATE
// transaction, each function under its own savepoint, then commits once
// (group commit: one fsync for many requests). A caller is answered only
// after the commit, so with synchronous=FULL an acknowledged write is on
// disk. Reads go to a pool of read-only connections and never wait for the
// writer (WAL). The store knows SQL and nothing of HTTP or NATS.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options tune how the store is opened. The zero value is the durable default.
type Options struct {
	// NowFunc is the clock; nil means time.Now. Tests move it.
	NowFunc func() time.Time
	// Synchronous is the SQLite synchronous mode: "FULL" (default) or
	// "NORMAL". Only benchmarks that show the cost of durability lower it.
	Synchronous string
	// MaxBatch caps how many queued writes share one transaction (default 256).
	MaxBatch int
	// NoGroupCommit gives every write its own transaction and fsync; it
	// exists to measure what group commit buys.
	NoGroupCommit bool
	// BatchFunc, if set, is told the size of every committed batch.
	BatchFunc func(size int)
	// Readers is the size of the reader pool (default 4).
	Readers int
	// AttemptLimitFunc, if set, is told of the ranges a write failed
	// because they had used up their attempts (rule 10) — on a release, a
	// takeover, a node deleted, a window dropped, a group disowned or a
	// range passed over by next — once that write has committed, on the
	// writer's caller's goroutine with the write's context, before Write
	// returns. A write rolled back tells nothing. A worker failing its own
	// range is not told here: that call answers with the range.
	AttemptLimitFunc func(ctx context.Context, failed []leasehold.Range)
	// NoOutbox is for a node running alone (serve without a fleet): no
	// change is written to the outbox, which only peer sync reads, so
	// every write is cheaper and the outbox does not grow without bound.
	// Open empties the outbox and leaves one EventOutboxPruned in it, so
	// peers the node joins later rebuild its part from its dump. It also
	// decides peer sync's indexes (PeerIndexes), here and nowhere else:
	// Open drops them with NoOutbox and makes them without.
	NoOutbox bool
}

// DB is an open catalog.
type DB struct {
	path  string
	w     *sql.DB
	r     *sql.DB
	now   func() time.Time
	opts  Options
	queue chan *write

	catalogID string

	rmu    sync.Mutex
	rstmts map[string]*sql.Stmt

	closeOnce sync.Once
	closing   chan struct{}
	stopped   chan struct{}
	mu        sync.RWMutex // held for reading while enqueueing, for writing by Close
	closed    bool

	commits atomic.Int64
	writes  atomic.Int64

	// Authentications remembered by NodeByTokenHash, and the count of
	// node deletions that ends them.
	auths   sync.Map // string(token hash) → authEntry
	nodeGen atomic.Int64
	// Writer-side memory of nodes: bands (node id → bandEntry, ended by
	// nodeGen like auths) and the last visit recorded (node id → unix ms).
	bands sync.Map
	seen  sync.Map

	// finished is the last hour's finished ranges of a node running alone
	// (NoOutbox), for the throughput chart.
	finished finishedMinutes
}

// Stats are the writer's counters since Open.
type Stats struct {
	Commits int64 // transactions committed
	Writes  int64 // queued writes answered
}

type write struct {
	ctx   context.Context
	fn    func(*Tx) error
	done  chan error
	after []func()
	// atLimit are the ranges fn failed at the attempt limit, for
	// Options.AttemptLimitFunc.
	atLimit []leasehold.Range
	// bare runs fn alone, outside any transaction (writeBare).
	bare bool
	// outbox are the outbox rows fn made, inserted as the batch commits
	// (Tx.event).
	outbox []outboxRow
}

// ownerOnly makes the catalog a file only its owner reads (0600) before
// SQLite opens it: SQLite creates a catalog 0644 and gives its -wal and
// -shm files the catalog's mode, and the catalog holds the node tokens'
// hashes and every group. A catalog made by an older binary, and its
// -wal and -shm, are narrowed to 0600 too.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return mapError(err, "creating the catalog")
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
			return mapError(err, "making the catalog readable by its owner only")
		}
	}
	return nil
}

// Open opens (creating if needed) the catalog at path, migrates it to
// leasehold.SchemaVersion and starts the writer. A catalog written by a
// newer binary is refused with an unavailable error.
func Open(path string, o Options) (*DB, error) {
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	if o.Synchronous == "" {
		o.Synchronous = "FULL"
	}
	if o.Synchronous != "FULL" && o.Synchronous != "NORMAL" {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "synchronous must be FULL or NORMAL, not %q", o.Synchronous)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.NoGroupCommit {
		o.MaxBatch = 1
	}
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if err := ownerOnly(path); err != nil {
		return nil, err
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	common := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	// temp_store(MEMORY): every write runs under its own savepoint, and the
	// statement journal that makes it undoable spilled to a temporary file
	// once a batch had changed more than 64 KiB of pages, costing a write
	// syscall per page. It is undo data for the open transaction only, so
	// memory loses nothing on a crash.
	w, err := sql.Open("sqlite", base+"?_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous("+o.Synchronous+")&_pragma=temp_store(MEMORY)&"+common)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	db := &DB{
		path: path, w: w, now: o.NowFunc, opts: o,
		queue:   make(chan *write, 4096),
		rstmts:  map[string]*sql.Stmt{},
		closing: make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if err := db.migrate(); err != nil {
		w.Close()
		return nil, err
	}
	if err := db.identify(); err != nil {
		w.Close()
		return nil, err
	}
	if o.NoOutbox {
		if err := db.pruneOutbox(); err != nil {
			w.Close()
			return nil, err
		}
	}
	// Peer sync's indexes follow the outbox: the publisher reads them, and
	// a node alone would pay for them on every range write. Making one on
	// millions of ranges takes seconds, once, as a node first opens for a
	// fleet.
	if err := db.settlePeerIndexes(!o.NoOutbox); err != nil {
		w.Close()
		return nil, err
	}
	var mode string
	if err := w.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		w.Close()
		return nil, mapError(err, "reading the journal mode")
	}
	if mode != "wal" {
		w.Close()
		return nil, leasehold.Errorf(leasehold.KindUnavailable, "%s: journal mode is %q, not wal (is the file on a filesystem without shared memory?)", path, mode)
	}
	r, err := sql.Open("sqlite", base+"?_pragma=query_only(1)&"+common)
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(o.Readers)
	r.SetMaxIdleConns(o.Readers)
	db.r = r
	conn, err := w.Conn(context.Background())
	if err != nil {
		r.Close()
		w.Close()
		return nil, mapError(err, "opening the writer")
	}
	ready := make(chan error, 1)
	go db.run(conn, ready)
	if err := <-ready; err != nil {
		<-db.stopped
		r.Close()
		w.Close()
		return nil, err
	}
	return db, nil
}

func (db *DB) migrate() error { return migrateSchema(db.w, db.path) }

// migrateSchema brings the catalog w (at path) to SchemaVersion.
func migrateSchema(w *sql.DB, path string) error {
	var version int
	if err := w.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return mapError(err, "opening "+path)
	}
	switch {
	case version > leasehold.SchemaVersion:
		return leasehold.Errorf(leasehold.KindUnavailable,
			"%s has schema version %d, newer than this binary's %d: run a newer leasehold", path, version, leasehold.SchemaVersion)
	case version == leasehold.SchemaVersion:
		return nil
	}
	// A new catalog gets the whole schema; an older one each step after its
	// version, in one transaction, so a failed step changes nothing.
	tx, err := w.Begin()
	if err != nil {
		return mapError(err, "migrating "+path)
	}
	defer tx.Rollback()
	if version == 0 {
		if _, err := tx.Exec(leasehold.Schema); err != nil {
			return fmt.Errorf("store: creating the schema: %w", err)
		}
	} else {
		for v := version + 1; v <= leasehold.SchemaVersion; v++ {
			ddl, err := leasehold.Migration(v)
			if err != nil {
				return fmt.Errorf("store: migration to version %d: %w", v, err)
			}
			if _, err := tx.Exec(ddl); err != nil {
				return fmt.Errorf("store: migrating %s to version %d: %w", path, v, err)
			}
		}
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", leasehold.SchemaVersion)); err != nil {
		return mapError(err, "migrating "+path)
	}
	return mapError(tx.Commit(), "migrating "+path)
}

// identify gives a catalog without an identity a new random one, and reads
// it. A peer's message ids carry it, so they stay unique if a node's
// catalog is made again and its event ids start over.
func (db *DB) identify() error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	if _, err := db.w.Exec(`INSERT OR IGNORE INTO catalog (id, catalog_id, created_at) VALUES (1, ?, ?)`,
		hex.EncodeToString(b[:]), ms(db.now())); err != nil {
		return mapError(err, "identifying "+db.path)
	}
	return mapError(db.w.QueryRow(`SELECT catalog_id FROM catalog WHERE id = 1`).Scan(&db.catalogID), "identifying "+db.path)
}

// CatalogID is this catalog's identity, made once with it: 32 hex digits.
func (db *DB) CatalogID() string { return db.catalogID }

// Close stops taking writes, lets the queued ones commit, and closes the
// database. It is safe to call more than once.
func (db *DB) Close() error {
	var err error
	db.closeOnce.Do(func() {
		db.mu.Lock()
		db.closed = true
		db.mu.Unlock()
		close(db.closing)
		<-db.stopped
		db.rmu.Lock()
		for _, st := range db.rstmts {
			st.Close()
		}
		db.rmu.Unlock()
		err = errors.Join(db.r.Close(), db.w.Close())
	})
	return err
}

// Stats returns the writer's counters.
func (db *DB) Stats() Stats {
	return Stats{Commits: db.commits.Load(), Writes: db.writes.Load()}
}

// Now is the store's clock.
func (db *DB) Now() time.Time { return db.now() }

// Ping checks that the catalog can be read and written: it runs an empty
// write through the writer (a real commit).
func (db *DB) Ping(ctx context.Context) error {
	return db.Write(ctx, func(tx *Tx) error {
		_, err := tx.exec(qPing)
		return err
	})
}

// Write queues fn to run inside the writer's next transaction and waits for
// that transaction to commit. fn's error rolls back fn's own work only and is
// returned; a failed commit is returned to every write of its batch. fn must
// not keep tx past its return.
func (db *DB) Write(ctx context.Context, fn func(tx *Tx) error) error {
	w := &write{ctx: ctx, fn: fn, done: make(chan error, 1)}
	if err := db.enqueue(ctx, w); err != nil {
		return err
	}
	// Once queued, wait for the answer even if ctx ends: the write may be
	// committing, and the caller must not be told it did not happen.
	err := <-w.done
	if err == nil {
		for _, f := range w.after {
			f()
		}
		if len(w.atLimit) > 0 && db.opts.AttemptLimitFunc != nil {
			db.opts.AttemptLimitFunc(ctx, w.atLimit)
		}
	}
	return err
}

// Yield waits, when other writes are queued, until they are committed:
// a background writer (the fold of peers' events) calls it between its
// writes, so the writes queued behind one of its own (holder calls) go
// in a batch without it, and the background writer gets at most every
// other batch while they wait. With nothing queued it returns at once.
func (db *DB) Yield(ctx context.Context) error {
	if len(db.queue) == 0 {
		return nil
	}
	// An empty write joins their batch and is answered with it.
	return db.Write(ctx, func(*Tx) error { return nil })
}

// run owns the writer's connection for the life of the DB: it prepares the
// writer's statements, reports on ready, then commits batches until Close.
func (db *DB) run(conn *sql.Conn, ready chan<- error) {
	defer close(db.stopped)
	sent := false
	err := conn.Raw(func(dc any) error {
		wc, err := prepareWriter(context.Background(), dc)
		sent = true
		ready <- err
		if err != nil {
			return err
		}
		defer wc.close()
		db.loop(wc)
		return nil
	})
	if !sent {
		ready <- mapError(err, "opening the writer")
	}
	conn.Close()
}

func (db *DB) loop(wc *wconn) {
	batch := make([]*write, 0, db.opts.MaxBatch)
	var next *write // a bare write that ended the batch before it
	for {
		first := next
		next = nil
		if first == nil {
			select {
			case first = <-db.queue:
			case <-db.closing:
				// Drain what was queued before Close took the lock.
				for {
					select {
					case w := <-db.queue:
						if w.bare {
							db.runBare(wc, w)
						} else {
							db.commit(wc, append(batch[:0], w))
						}
					default:
						return
					}
				}
			}
		}
		if first.bare {
			db.runBare(wc, first)
			continue
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < db.opts.MaxBatch {
			select {
			case w := <-db.queue:
				if w.bare {
					next = w
					break fill
				}
				batch = append(batch, w)
			default:
				break fill
			}
		}
		db.commit(wc, batch)
	}
}

// writeBare is Write for fn run alone on the writer's connection outside
// any transaction, for what SQLite refuses inside one (ATTACH, DETACH).
func (db *DB) writeBare(ctx context.Context, fn func(tx *Tx) error) error {
	w := &write{ctx: ctx, fn: fn, done: make(chan error, 1), bare: true}
	if err := db.enqueue(ctx, w); err != nil {
		return err
	}
	return <-w.done
}

// enqueue hands w to the writer, unless the catalog is closing or ctx
// ends first.
func (db *DB) enqueue(ctx context.Context, w *write) error {
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return leasehold.Errorf(leasehold.KindUnavailable, "the catalog is closing")
	}
	select {
	case db.queue <- w:
	case <-ctx.Done():
		db.mu.RUnlock()
		return ctx.Err()
	}
	db.mu.RUnlock()
	return nil
}

// runBare runs a bare write.
func (db *DB) runBare(wc *wconn, w *write) {
	if err := w.ctx.Err(); err != nil {
		w.done <- err
		return
	}
	tx := &Tx{w: wc, db: db, ctx: context.Background(), now: db.now(), cur: w}
	func() {
		defer func() {
			if p := recover(); p != nil {
				w.done <- leasehold.Wrap(leasehold.KindInternal, fmt.Errorf("panic in write: %v\n%s", p, debug.Stack()), "internal error")
			}
		}()
		w.done <- w.fn(tx)
	}()
	db.writes.Add(1)
}

// commit runs one batch in one transaction.
func (db *DB) commit(wc *wconn, batch []*write) {
	results := make([]error, len(batch))
	ctx := context.Background()
	if _, err := wc.exec(ctx, qBegin); err != nil {
		err = mapError(err, "starting a transaction")
		for _, w := range batch {
			w.done <- err
		}
		return
	}
	tx := &Tx{w: wc, db: db, ctx: ctx}
	ran := 0
	for i, w := range batch {
		if err := w.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		tx.now = db.now()
		tx.cur = w
		results[i] = db.runOne(tx, w)
		ran++
	}
	tx.cur = nil
	var err error
	if ran == 0 {
		_, err = wc.exec(ctx, qRollback)
	} else if err = tx.insertOutbox(batch, results); err != nil {
		wc.exec(ctx, qRollback)
	} else if _, err = wc.exec(ctx, qCommit); err != nil {
		// A failed COMMIT may leave the transaction open (busy) or have
		// rolled it back (I/O error, full disk); either way end it, so the
		// next batch starts clean.
		wc.exec(ctx, qRollback)
	}
	if err != nil {
		err = mapError(err, "committing")
		for i := range results {
			if results[i] == nil {
				results[i] = err
			}
		}
	} else if ran > 0 {
		db.commits.Add(1)
		if db.opts.BatchFunc != nil {
			db.opts.BatchFunc(ran)
		}
	}
	db.writes.Add(int64(len(batch)))
	for i, w := range batch {
		w.done <- results[i]
	}
}

// runOne runs a write under its own savepoint, so its error or panic undoes
// only its own statements.
func (db *DB) runOne(tx *Tx, w *write) (err error) {
	if _, err := tx.exec(qSavepoint); err != nil {
		return mapError(err, "starting a savepoint")
	}
	defer func() {
		if p := recover(); p != nil {
			err = leasehold.Wrap(leasehold.KindInternal, fmt.Errorf("panic in write: %v\n%s", p, debug.Stack()), "internal error")
		}
		if err != nil {
			w.after, w.atLimit, w.outbox = nil, nil, nil
			if _, rerr := tx.exec(qRollbackTo); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		if _, rerr := tx.exec(qRelease); rerr != nil && err == nil {
			err = mapError(rerr, "releasing a savepoint")
		}
	}()
	return w.fn(tx)
}

// readStmt returns the reader pool's prepared statement for q.
func (db *DB) readStmt(q string) (*sql.Stmt, error) {
	db.rmu.Lock()
	defer db.rmu.Unlock()
	if st, ok := db.rstmts[q]; ok {
		return st, nil
	}
	st, err := db.r.Prepare(q)
	if err != nil {
		return nil, err
	}
	db.rstmts[q] = st
	return st, nil
}

func (db *DB) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := db.readStmt(q)
	if err != nil {
		return nil, mapError(err, "reading")
	}
	rows, err := st.QueryContext(ctx, args...)
	return rows, mapError(err, "reading")
}

func (db *DB) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := db.readStmt(q)
	if err != nil {
		// A statement that does not prepare is a programming error; let the
		// scan report it through a row that fails.
		return db.r.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// mapError turns SQLite errors into leasehold error kinds by their code.
func mapError(err error, doing string) error {
	if err == nil {
		return nil
	}
	var le *leasehold.Error
	if errors.As(err, &le) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return leasehold.Wrap(leasehold.KindNoSpace, err, "%s: the data disk is full", doing)
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOTADB,
			sqlite3.SQLITE_CORRUPT:
			return leasehold.Wrap(leasehold.KindUnavailable, err, "%s: the catalog is unavailable: %v", doing, se.Error())
		}
	}
	return leasehold.Wrap(leasehold.KindInternal, err, "%s: %v", doing, err)
}

// isUnique reports whether err is a UNIQUE constraint failure.
func isUnique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}
