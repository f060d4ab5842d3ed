// Package appliance is the leasehold node's behaviour: the coordinator's
// leasing rules and planner, window snapshots on disk, and the watchman,
// wired together over one catalog by Appliance. It knows the store and the
// domain, and nothing of HTTP.
package appliance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Config is how a node runs. Zero fields take the defaults below.
type Config struct {
	// DataDir holds the catalog, the snapshots and the admin token.
	DataDir string
	// LeaseTTL is how long a holder may be quiet before its group is free.
	LeaseTTL time.Duration
	// MaxAttempts fails a range leased this many times without finishing.
	MaxAttempts int64
	// SnapshotMaxBytes is the largest snapshot accepted.
	SnapshotMaxBytes int64
	// SnapshotMaxExpandedBytes is the most a gzip snapshot may expand to:
	// an upload checked as whole gzip past it is refused as too large.
	SnapshotMaxExpandedBytes int64
	// HistoryMinFreeBytes: below this much free space on the data disk only
	// tail work is leased. 0 turns the cap off.
	HistoryMinFreeBytes int64
	// NodeUnseen is how long a node may go unseen before it is a finding
	// (default 10 lease TTLs).
	NodeUnseen time.Duration
	// SnapshotMaxAge makes a held group's snapshot older than this a
	// finding; 0 turns that finding off.
	SnapshotMaxAge time.Duration
	// NowFunc is the clock (default time.Now).
	NowFunc func() time.Time
	// Store tunes the catalog (synchronous mode, group commit); its
	// AttemptLimitFunc is the Recorder's RangesFailedAtLimit.
	Store store.Options
	// Recorder is told what the node did once it is committed (the
	// metrics' counters); nil tells nobody.
	Recorder Recorder
	// Fleet is the fleet the node is part of; nil runs it alone (Alone).
	Fleet  Fleet
	Logger *slog.Logger
	// UploadStoring, when set, is told on the upload's goroutine once a
	// snapshot upload has passed its early checks and its body begins to
	// be stored (its .part file is made): a test waits on it for an
	// upload under way, instead of looking for the file.
	UploadStoring func(groupID int64)
}

// Recorder is told what the node did, once it is committed, so the
// metrics can count it (web.Metrics is one). Its methods are called on
// the request's goroutine after the commit and must not block.
type Recorder interface {
	// LeaseGranted is a group leased, taken over from a quiet holder or not.
	LeaseGranted(takeover bool)
	// RangeFinished is a range done, with the headers its holder indexed.
	RangeFinished(headers int64)
	// RangeFailed is a worker failing a range (rule 10): failed says it
	// is failed for good (no retry, or its attempts used up), else it is
	// planned again.
	RangeFailed(failed bool)
	// GroupQuarantined is a group quarantined because its window would
	// not load (rule 10).
	GroupQuarantined()
	// RangesFailedAtLimit are ranges a write of this node's catalog
	// failed because they had used up their attempts (rule 10): on a
	// release, a takeover, a node deleted, a window dropped, a group
	// disowned or a range passed over by next — every path but a
	// worker's own fail, told by RangeFailed. ctx is the write's: a
	// request's, when a request caused it. Only the node whose write
	// failed a range is told; a peer folding that range's state is not,
	// so a fleet counts each failure once.
	RangesFailedAtLimit(ctx context.Context, failed []leasehold.Range)
}

// NoRecorder is told everything and keeps nothing.
type NoRecorder struct{}

func (NoRecorder) LeaseGranted(bool)   {}
func (NoRecorder) RangeFinished(int64) {}
func (NoRecorder) RangeFailed(bool)    {}
func (NoRecorder) GroupQuarantined()   {}

func (NoRecorder) RangesFailedAtLimit(context.Context, []leasehold.Range) {}

// Defaults.
const (
	DefaultLeaseTTL         = 60 * time.Second
	DefaultMaxAttempts      = 5
	DefaultSnapshotMaxBytes = 64 << 30
	// DefaultSnapshotMaxExpandedBytes is twice the largest window the
	// benchmarks upload (1 GiB, scripts/bench-kept.sh) and several times
	// a Usenet window at its bounds (a few hundred MB: 200,000 open files,
	// segments no further than 200,000 articles back), yet no more than a
	// worker can hold in memory: 1 MB of gzip can say 1 GiB, checking a
	// snapshot costs a node CPU for every byte it expands, and a worker
	// loads a window whole. An operator with larger windows raises it
	// (serve --snapshot-max-expanded-bytes, and the workers' own bound).
	DefaultSnapshotMaxExpandedBytes = 2 << 30
)

// Appliance is a running node's behaviour over its catalog. It runs no
// goroutine of its own (the coordinator, the snapshots and the watchman
// answer when called), so it is no service: the node closes it (Close)
// after every part that reads or writes through it has stopped.
type Appliance struct {
	Config      Config
	Coordinator *Coordinator
	Snapshots   *Snapshots
	Watchman    *Watchman

	// db is the catalog; the floors above reach it through the
	// appliance's methods, never directly.
	db *store.DB

	closeMu  sync.Mutex
	closed   bool
	closeErr error // the catalog's close, once closed

	freeMu    sync.Mutex
	freeAt    time.Time
	freeBytes int64

	// backupMu lets one backup of the node run at a time: each one costs
	// a catalog's size of disk while it runs. It is the node's, not the
	// process's, so nodes in one test process back up apart.
	backupMu sync.Mutex
}

// Open opens the node's data directory (creating it), its catalog and its
// snapshot store: OpenCatalog, then New. Errors: invalid config,
// unavailable data dir or catalog.
func Open(cfg Config) (*Appliance, error) {
	db, err := OpenCatalog(cfg)
	if err != nil {
		return nil, err
	}
	return New(cfg, db)
}

// withDefaults checks cfg and fills its zero fields. Errors: invalid.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.DataDir == "" {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "no data directory given")
	}
	if cfg.LeaseTTL < 0 {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "lease TTL %s is negative", cfg.LeaseTTL)
	}
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, DefaultLeaseTTL)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	if cfg.MaxAttempts < 1 {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "max attempts must be at least 1")
	}
	cfg.SnapshotMaxBytes = cmp.Or(cfg.SnapshotMaxBytes, DefaultSnapshotMaxBytes)
	cfg.SnapshotMaxExpandedBytes = cmp.Or(cfg.SnapshotMaxExpandedBytes, DefaultSnapshotMaxExpandedBytes)
	if cfg.SnapshotMaxBytes < 0 || cfg.SnapshotMaxExpandedBytes < 0 || cfg.HistoryMinFreeBytes < 0 {
		return cfg, leasehold.Errorf(leasehold.KindInvalid, "byte sizes must not be negative")
	}
	cfg.NodeUnseen = cmp.Or(cfg.NodeUnseen, 10*cfg.LeaseTTL)
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = NoRecorder{}
	}
	cfg.Store.NowFunc = cfg.NowFunc
	cfg.Store.AttemptLimitFunc = cfg.Recorder.RangesFailedAtLimit
	return cfg, nil
}

// OpenCatalog makes the node's data directory usable (creating it,
// finishing what a crash left of a restore or a backup) and opens its
// catalog, for New and for the fleet, which folds into it. Errors:
// invalid config, unavailable data dir or catalog, no space.
func OpenCatalog(cfg Config) (*store.DB, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// The catalog and windows are 0600, but a data dir open to others
	// lets them list it, and an operator who made it so should hear.
	if fi, err := os.Stat(cfg.DataDir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		cfg.Logger.Warn("the data dir is open to other users: chmod 700 it", "data", cfg.DataDir, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, dirError(cfg.DataDir, err)
	}
	// A full disk may still start and serve reads; Ready tells it is full.
	if err := probeWritable(cfg.DataDir, 0); err != nil {
		return nil, err
	}
	if err := unfinishedRestore(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := sweepBackups(cfg.DataDir); err != nil {
		return nil, dirError(cfg.DataDir, err)
	}
	return store.Open(filepath.Join(cfg.DataDir, "catalog.db"), cfg.Store)
}

// New is the node's behaviour over db, the catalog OpenCatalog opened
// with the same cfg: the appliance owns db from then on, and closes it
// at Stop (or Close), and on New's error. Errors: invalid config,
// unavailable data dir or catalog.
func New(cfg Config, db *store.DB) (*Appliance, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		db.Close()
		return nil, err
	}
	fleet, alone := cfg.Fleet, cfg.Fleet == nil
	if alone {
		fleet = Alone{}
	}
	claims := claimCheck{fleet: fleet, alone: alone}
	snaps, err := openSnapshots(filepath.Join(cfg.DataDir, "snapshots"), db, claims, cfg)
	if err != nil {
		db.Close()
		return nil, dirError(cfg.DataDir, err)
	}
	a := &Appliance{Config: cfg, db: db, Snapshots: snaps}
	a.Coordinator = &Coordinator{db: db, ttl: cfg.LeaseTTL, maxAttempts: cfg.MaxAttempts, tailOnlyFunc: a.historyCapped, recorder: cfg.Recorder,
		fleet: fleet, alone: alone, claims: claims, now: cfg.NowFunc, unseen: cfg.NodeUnseen, deleteOwned: snaps.deleteOwned}
	// New runs before the node has a context to give (serve opens the
	// appliance, then runs it under one): a catalog just opened answers
	// this read at once.
	rules, err := db.Rules(context.Background())
	if err != nil {
		db.Close()
		return nil, err
	}
	a.Coordinator.setRules(rules)
	a.Watchman = &Watchman{db: db, now: cfg.NowFunc, fleet: fleet, bounds: store.FindingBounds{
		RangeHeartbeat: cfg.LeaseTTL, LeaseQuiet: cfg.LeaseTTL, NodeUnseen: cfg.NodeUnseen, SnapshotAge: cfg.SnapshotMaxAge,
	}}
	return a, nil
}

// Close flushes the writer and closes the catalog, once; later calls
// return the first's error.
func (a *Appliance) Close() error {
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if !a.closed {
		a.closed, a.closeErr = true, a.db.Close()
	}
	return a.closeErr
}

// Ready reports whether the catalog can be written, the data disk has
// room, the node has joined its fleet and the fleet's streams are served
// (Engine): nil when ready. Errors:
// unavailable, no space.
func (a *Appliance) Ready(ctx context.Context) error {
	if err := probeWritable(a.Config.DataDir, probeBytes); err != nil {
		return err
	}
	if err := a.db.Ping(ctx); err != nil {
		return err
	}
	if err := a.Coordinator.fleet.Ready(); err != nil {
		return err
	}
	if e, ok := a.Coordinator.fleet.(Engine); ok {
		return e.EngineOffline(ctx)
	}
	return nil
}

// Troubles are the findings of the node's fleet outside the catalog (a
// peer sync that cannot publish), none for a node alone: /readyz tells
// them while the node's own API works.
func (a *Appliance) Troubles() []leasehold.Finding {
	return a.Watchman.troubles(a.Watchman.Now())
}

// WithDiskCause returns err with what is wrong with the data disk added to
// its message, when the disk has a trouble err does not name already:
// SQLite reports a disk turned read-only as a bare I/O error. The kind
// stays err's.
func (a *Appliance) WithDiskCause(err error) error {
	derr := probeWritable(a.Config.DataDir, probeBytes)
	if derr == nil {
		return err
	}
	var errno syscall.Errno
	if errors.As(derr, &errno) && errors.Is(err, errno) {
		return err
	}
	return leasehold.Wrap(leasehold.KindOf(err), err, "%s; %s", leasehold.ErrorMessage(err), leasehold.ErrorMessage(derr))
}

// historyCapped reports whether the data disk is short of space, so only
// tail work may be leased. The free space is read at most once a second.
func (a *Appliance) historyCapped() bool {
	if a.Config.HistoryMinFreeBytes <= 0 {
		return false
	}
	a.freeMu.Lock()
	defer a.freeMu.Unlock()
	if now := time.Now(); now.Sub(a.freeAt) > time.Second {
		var st syscall.Statfs_t
		if err := syscall.Statfs(a.Config.DataDir, &st); err == nil {
			a.freeBytes = int64(st.Bavail) * int64(st.Bsize)
		}
		a.freeAt = now
	}
	return a.freeBytes < a.Config.HistoryMinFreeBytes
}

// AdminToken returns the admin token: the given one, else the one in
// <data>/admin.token, else a new one written there with mode 0600.
func AdminToken(dataDir, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	path := filepath.Join(dataDir, "admin.token")
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", leasehold.Errorf(leasehold.KindInvalid, "%s is empty: delete it to have a new token made, or give --admin-token", path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", dirError(dataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", dirError(dataDir, err)
	}
	t, err := NewToken("lha_")
	if err != nil {
		return "", err
	}
	return t, WriteAdminToken(path, t)
}

// WriteAdminToken replaces the file at path with token, mode 0600: a new
// file beside it, fsynced and renamed over it, the directory fsynced, so
// the file holds the old token or the new one, whole, whatever happens.
// Errors: unavailable (the directory cannot be written).
func WriteAdminToken(path, token string) error {
	return replaceFile(path, []byte(token+"\n"))
}

// replaceFile replaces the file at path with content, mode 0600, as
// WriteAdminToken does.
func replaceFile(path string, content []byte) error {
	dir := filepath.Dir(path)
	tmp := path + ".tmp"
	// A new file, never through a link: whoever can write the dir could
	// plant a link at tmp to read the token through its target. A stale
	// tmp (or a link) is removed first; the removal acts on the link, not
	// what it points to, and one planted again after it makes the open
	// fail rather than follow it.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return dirError(dir, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return dirError(dir, err)
	}
	_, werr := f.Write(content)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return dirError(dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return dirError(dir, err)
	}
	return syncDir(dir)
}

// probeWritable checks that the data dir takes a new file with size bytes
// in it. An empty file (size 0) shows the directory is usable; to show the
// disk has room it takes a block (probeBytes), since a full disk still has
// inodes: it takes empty files and refuses every byte.
func probeWritable(dir string, size int) error {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return dirError(dir, err)
	}
	name := f.Name()
	_, werr := f.Write(make([]byte, size))
	cerr := f.Close()
	return dirError(dir, errors.Join(werr, cerr, os.Remove(name)))
}

// probeBytes is one filesystem block, the least any write needs.
const probeBytes = 4096

func dirError(dir string, err error) error {
	if err == nil {
		return nil
	}
	var le *leasehold.Error
	if errors.As(err, &le) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) {
		return leasehold.Wrap(leasehold.KindNoSpace, err, "data dir %s: the disk is full", dir)
	}
	return leasehold.Wrap(leasehold.KindUnavailable, err, "data dir %s is not usable: %v", dir, unwrapPath(err))
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// DataFreeBytes is the room left on the data disk for this process (the
// blocks available to it), read now; -1 when the disk cannot be read.
func (a *Appliance) DataFreeBytes() int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(a.Config.DataDir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
