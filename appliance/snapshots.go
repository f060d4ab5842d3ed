package appliance

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Snapshots keeps window snapshots on disk, one gzip file per group named
// from the group's id and a sequence number only ("<group>-<seq>.gz").
//
// An upload streams through sha-256 into "<group>-<seq>.part", is fsynced
// and renamed to its final name, the directory fsynced, and only then is it
// recorded in the catalog; the file the catalog pointed at before is removed
// after that commit. So the recorded snapshot is always whole: a broken
// upload, a bad digest, a full disk or a lost lease leaves it untouched.
type Snapshots struct {
	dir      string
	db       *store.DB
	maxBytes int64
	// maxExpanded is the most a gzip upload may expand to.
	maxExpanded int64
	now         func() time.Time
	log         *slog.Logger
	seq         atomic.Int64
	// fence is rule 6 in a fleet: a snapshot is recorded only under this
	// node's claim on its group, an operator's upload too.
	claims claimCheck
	// storing is Config.UploadStoring, or nil.
	storing func(groupID int64)

	mu        sync.Mutex
	uploading map[int64]*uploadSlot
	// pins counts backups under way; while there is one, a file the
	// catalog stopped pointing at waits in unpinned for the backup to end,
	// since the backup's copy of the catalog may still point at it.
	pins     int
	unpinned []string
}

// remove removes a snapshot file the catalog no longer points at, or
// keeps it until the last backup under way ends.
func (s *Snapshots) remove(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins > 0 {
		s.unpinned = append(s.unpinned, path)
		return
	}
	os.Remove(path)
}

// pin keeps every snapshot file until the returned unpin is called, which
// removes those the catalog stopped pointing at meanwhile.
func (s *Snapshots) pin() (unpin func()) {
	s.mu.Lock()
	s.pins++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pins--; s.pins > 0 {
				return
			}
			for _, p := range s.unpinned {
				os.Remove(p)
			}
			s.unpinned = nil
		})
	}
}

// Upload is one snapshot upload.
type Upload struct {
	GroupID int64
	// NodeID and Fence name the holder; NodeID 0 is an operator's upload,
	// refused while the group is held.
	NodeID, Fence int64
	Next          int64
	Body          io.Reader
	// Gzip says the body is gzip already and is stored as is; otherwise the
	// node compresses it.
	Gzip bool
	// Digest, if set, is the sha-256 the body as sent must have.
	Digest []byte
	// Force lets an operator's upload stand even where it makes rule 2
	// plan finished work again (done ranges ending at or after Next);
	// without it such an upload is a conflict naming how many.
	Force bool
	// Adopting marks the fleet's import of a group's replicated window by
	// the node that has just won the group's claim, before it owns the
	// group (the window must be in place when its first lease is
	// granted): the fleet fence, which asks that the group be owned here,
	// is not asked. The group must still be unheld here.
	Adopting bool
	// VerifyFunc, if set, is asked once the whole body is stored and its
	// digest matched, before it is made durable: its error refuses the
	// upload. The web checks a gzip body is whole with it, after the
	// digest, so a wrong digest is told first, and the body is hashed once.
	VerifyFunc func() error
	// StopFunc, if set, cuts the body off: it is called from another
	// goroutine when the uploader has lost the group (its fence moved) and
	// another upload of the group asks for the slot. The body's reads must
	// then fail soon. Without it, such an upload keeps its slot to the end.
	StopFunc func()
}

// uploadSlot is the one upload of a group under way: who sends it, how
// to cut it off, and a channel closed once it has let the slot go.
type uploadSlot struct {
	node, fence int64
	stop        func()
	done        chan struct{}
}

const copyBuffer = 1 << 20

// openSnapshots opens the snapshot store in dir, its uploads and
// downloads fenced by claims, its limits from cfg.
func openSnapshots(dir string, db *store.DB, claims claimCheck, cfg Config) (*Snapshots, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Snapshots{dir: dir, db: db, claims: claims, maxBytes: cfg.SnapshotMaxBytes, maxExpanded: cfg.SnapshotMaxExpandedBytes,
		now: cfg.NowFunc, log: cfg.Logger, uploading: map[int64]*uploadSlot{}, storing: cfg.UploadStoring}
	// Part of appliance.Open, before any context exists: the sweep of what
	// a crash left is local files and one catalog read, and must finish
	// before uploads are taken.
	last, err := s.sweep(context.Background())
	if err != nil {
		return nil, err
	}
	s.seq.Store(max(time.Now().UnixNano(), last))
	return s, nil
}

// MaxBytes is the largest snapshot accepted, as sent and as stored.
func (s *Snapshots) MaxBytes() int64 { return s.maxBytes }

// MaxExpandedBytes is the most a gzip upload may expand to.
func (s *Snapshots) MaxExpandedBytes() int64 { return s.maxExpanded }

// UploadGroup finds the named group for an operator's upload (an Upload
// with NodeID 0). A peer's group takes snapshots at its owner only: a copy
// here would be overwritten by the owner's and never replicated, so it is
// refused, naming the owner. Errors: not found, conflict, unavailable,
// internal.
func (s *Snapshots) UploadGroup(ctx context.Context, name string) (leasehold.Group, error) {
	g, err := s.db.GroupByName(ctx, name)
	if err != nil {
		return leasehold.Group{}, err
	}
	origin, err := s.db.GroupOrigin(ctx, g.ID)
	if err != nil {
		return leasehold.Group{}, err
	}
	if origin != "" {
		return leasehold.Group{}, leasehold.Errorf(leasehold.KindConflict, "group %q is owned by node %q: upload its snapshot there", name, origin)
	}
	return g, nil
}

func (s *Snapshots) path(groupID, seq int64, ext string) string {
	return filepath.Join(s.dir, strconv.FormatInt(groupID, 10)+"-"+strconv.FormatInt(seq, 10)+ext)
}

// sweep removes what a crash may have left: .part files and snapshot files
// the catalog does not point at. It returns the highest sequence seen.
func (s *Snapshots) sweep(ctx context.Context) (int64, error) {
	recorded, err := s.db.SnapshotFiles(ctx)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	var last int64
	for _, e := range entries {
		name := e.Name()
		base, ext, _ := strings.Cut(name, ".")
		g, q, ok := strings.Cut(base, "-")
		gid, err1 := strconv.ParseInt(g, 10, 64)
		seq, err2 := strconv.ParseInt(q, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			continue // not ours
		}
		last = max(last, seq)
		if ext == "gz" && recorded[gid] == seq {
			continue
		}
		if ext == "gz" || ext == "part" {
			if err := os.Remove(filepath.Join(s.dir, name)); err == nil {
				s.log.Info("removed a snapshot file the catalog does not point at", "file", name)
			}
		}
	}
	return last, nil
}

// Put stores an upload as the group's snapshot, by who sends it: the
// fleet's adoption (Adopting), the holder (NodeID set) or an operator.
// Errors as PutHeld, PutOperator and Adopt say.
func (s *Snapshots) Put(ctx context.Context, u Upload) (leasehold.Snapshot, error) {
	switch {
	case u.Adopting:
		return s.Adopt(ctx, u)
	case u.NodeID > 0:
		return s.PutHeld(ctx, u)
	default:
		return s.PutOperator(ctx, u)
	}
}

// PutHeld stores the window the group's holder uploads, under its lease
// (u.NodeID at u.Fence). Errors: not found, lease lost, conflict (another
// upload of the group is under way), too large, unprocessable (the digest
// does not match), no space, invalid (the body broke off).
func (s *Snapshots) PutHeld(ctx context.Context, u Upload) (leasehold.Snapshot, error) {
	return s.put(ctx, u, uploadChecks{
		// Refuse early, before reading gigabytes, if the caller cannot
		// write; the record checks again inside the transaction.
		before: func(ctx context.Context) error {
			if err := s.claims.early(ctx, s.db, u.GroupID, true); err != nil {
				return err
			}
			return s.db.CheckHolder(ctx, u.GroupID, u.NodeID, u.Fence)
		},
		record:  func(tx *store.Tx) (holding, error) { return s.claims.check(tx, u.GroupID) },
		claimed: true,
	})
}

// PutOperator stores a window an operator uploads, refused while the group
// is held, and, unless u.Force, where it would plan finished work again
// (rule 2). Errors: as PutHeld, with conflict for a held group or undone
// work.
func (s *Snapshots) PutOperator(ctx context.Context, u Upload) (leasehold.Snapshot, error) {
	return s.put(ctx, u, uploadChecks{
		before: func(ctx context.Context) error {
			if err := s.claims.early(ctx, s.db, u.GroupID, false); err != nil {
				return err
			}
			if err := s.unheld(ctx, u.GroupID); err != nil || u.Force {
				return err
			}
			done, err := s.db.DoneFrom(ctx, u.GroupID, u.Next)
			if err != nil {
				return err
			}
			return undoesWork(u, done)
		},
		record: func(tx *store.Tx) (holding, error) {
			h, err := s.claims.check(tx, u.GroupID)
			if err != nil || u.Force {
				return h, err
			}
			// Asked again: a range may have been finished meanwhile.
			done, err := tx.DoneFrom(u.GroupID, u.Next)
			if err != nil {
				return h, err
			}
			return h, undoesWork(u, done)
		},
		claimed: true,
	})
}

// Adopt stores a group's replicated window for the node that has just won
// the group's claim, before it owns the group (the window must be in place
// when its first lease is granted): the fleet fence, which asks that the
// group be owned here, is not asked. The group must be unheld here.
// Errors: as PutOperator.
func (s *Snapshots) Adopt(ctx context.Context, u Upload) (leasehold.Snapshot, error) {
	return s.put(ctx, u, uploadChecks{
		before: func(ctx context.Context) error { return s.unheld(ctx, u.GroupID) },
		record: func(*store.Tx) (holding, error) { return holding{}, nil },
	})
}

// uploadChecks are what one kind of upload asks of the group: before its
// body is read, and inside the write that records it (returning the claim
// it was recorded under). claimed asks that the claim is still held once
// the record is committed.
type uploadChecks struct {
	before  func(ctx context.Context) error
	record  func(tx *store.Tx) (holding, error)
	claimed bool
}

// unheld refuses a group that a worker holds.
func (s *Snapshots) unheld(ctx context.Context, groupID int64) error {
	holder, fence, err := s.db.HolderOf(ctx, groupID)
	if err != nil {
		return err
	}
	if holder != 0 {
		return leasehold.Errorf(leasehold.KindConflict, "group %d is held by node %d at fence %d; release it first", groupID, holder, fence)
	}
	return nil
}

// put is every upload's core: one upload of a group at a time, the body
// written to a new file, and the file recorded as the group's window.
func (s *Snapshots) put(ctx context.Context, u Upload, checks uploadChecks) (leasehold.Snapshot, error) {
	if u.Next < 0 {
		return leasehold.Snapshot{}, leasehold.Errorf(leasehold.KindInvalid, "next must be 0 or more")
	}
	slot := &uploadSlot{node: u.NodeID, fence: u.Fence, stop: u.StopFunc, done: make(chan struct{})}
	if err := s.takeSlot(ctx, u.GroupID, slot); err != nil {
		return leasehold.Snapshot{}, err
	}
	defer s.freeSlot(u.GroupID, slot)
	if err := checks.before(ctx); err != nil {
		return leasehold.Snapshot{}, err
	}
	snap, err := s.storeFile(u)
	if err != nil {
		return leasehold.Snapshot{}, err
	}
	final := s.path(u.GroupID, snap.File, ".gz")
	// fence.write, written out: the new file is removed only if the record
	// was not committed. Once it is, the catalog points at the new file and
	// the old one is gone, so a claim that lapsed before the answer
	// refuses the call but must leave the file, or the group's recorded
	// window would point at nothing.
	var h holding
	err = s.db.Write(ctx, func(tx *store.Tx) error {
		var err error
		if h, err = checks.record(tx); err != nil {
			return err
		}
		old, err := tx.SetSnapshot(u.GroupID, u.NodeID, u.Fence, snap)
		if err == nil && old != nil && old.File != snap.File {
			oldPath := s.path(u.GroupID, old.File, ".gz")
			tx.AfterCommit(func() { s.remove(oldPath) })
		}
		return err
	})
	if err != nil {
		os.Remove(final)
		return leasehold.Snapshot{}, err
	}
	if checks.claimed {
		if err := s.claims.still(h); err != nil {
			return leasehold.Snapshot{}, err
		}
	}
	return snap, nil
}

// storeFile writes the body to the group's next snapshot file, durably, and
// describes it; nothing of it is left on an error.
func (s *Snapshots) storeFile(u Upload) (leasehold.Snapshot, error) {
	seq := s.seq.Add(1)
	part := s.path(u.GroupID, seq, ".part")
	final := s.path(u.GroupID, seq, ".gz")
	size, sum, err := s.write(part, u)
	if err != nil {
		os.Remove(part)
		return leasehold.Snapshot{}, err
	}
	if err := os.Rename(part, final); err != nil {
		os.Remove(part)
		return leasehold.Snapshot{}, fileError(err, "storing the snapshot")
	}
	if err := syncDir(s.dir); err != nil {
		os.Remove(final)
		return leasehold.Snapshot{}, fileError(err, "storing the snapshot")
	}
	return leasehold.Snapshot{Next: u.Next, Size: size, SHA256: sum, At: s.now().UTC().Truncate(time.Millisecond), File: seq}, nil
}

// takeSlot makes slot the group's one upload under way. An upload by a
// holder whose fence has moved since it began (it released the group,
// or lost it) could never be recorded, so it does not keep the slot: it
// is cut off and the slot taken once it lets go. Any other upload under
// way is a conflict.
func (s *Snapshots) takeSlot(ctx context.Context, groupID int64, slot *uploadSlot) error {
	for {
		s.mu.Lock()
		cur := s.uploading[groupID]
		if cur == nil {
			s.uploading[groupID] = slot
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
		busy := leasehold.Errorf(leasehold.KindConflict, "a snapshot of group %d is being uploaded already", groupID)
		if cur.node == 0 || cur.stop == nil {
			return busy
		}
		if err := s.db.CheckHolder(ctx, groupID, cur.node, cur.fence); !errors.Is(err, leasehold.ErrLeaseLost) {
			return busy
		}
		s.log.Info("cutting off a snapshot upload by a former holder of the group", "group", groupID, "node", cur.node, "fence", cur.fence)
		cur.stop()
		select {
		case <-cur.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// freeSlot lets the group's upload slot go, if slot still has it.
func (s *Snapshots) freeSlot(groupID int64, slot *uploadSlot) {
	s.mu.Lock()
	if s.uploading[groupID] == slot {
		delete(s.uploading, groupID)
	}
	s.mu.Unlock()
	close(slot.done)
}

// undoesWork refuses an operator's upload that would plan done ranges
// again, naming how many: the design's rule that operator writes undoing
// finished work ask for force.
func undoesWork(u Upload, done int64) error {
	if done == 0 {
		return nil
	}
	return leasehold.Errorf(leasehold.KindConflict,
		"a window covering ids below %d makes %d done range(s) of group %d be indexed again (rule 2); force the upload to do it", u.Next, done, u.GroupID)
}

// write streams the body into path, compressing it unless it is gzip, and
// returns the stored size and sha-256. The file is fsynced before it returns.
func (s *Snapshots) write(path string, u Upload) (int64, string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, "", fileError(err, "storing the snapshot")
	}
	defer f.Close()
	if s.storing != nil {
		s.storing(u.GroupID)
	}
	stored := sha256.New()
	counted := &countingWriter{w: f}
	bw := bufio.NewWriterSize(io.MultiWriter(counted, stored), copyBuffer)

	var sent hash.Hash
	body := u.Body
	if u.Digest != nil {
		if u.Gzip {
			sent = stored // the body as sent is what is stored
		} else {
			sent = sha256.New()
			body = io.TeeReader(body, sent)
		}
	}
	var dst io.Writer = bw
	var zw *gzip.Writer
	if !u.Gzip {
		zw, _ = gzip.NewWriterLevel(bw, gzip.BestSpeed)
		dst = zw
	}
	buf := make([]byte, copyBuffer)
	if _, err := io.CopyBuffer(onlyWriter{dst}, onlyReader{body}, buf); err != nil {
		return 0, "", bodyError(err, s.maxBytes)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return 0, "", fileError(err, "compressing the snapshot")
		}
	}
	if err := bw.Flush(); err != nil {
		return 0, "", fileError(err, "storing the snapshot")
	}
	if counted.n > s.maxBytes {
		return 0, "", leasehold.Errorf(leasehold.KindTooLarge, "the stored snapshot would be %d bytes, over the limit of %d", counted.n, s.maxBytes)
	}
	if u.Digest != nil {
		if got := sent.Sum(nil); string(got) != string(u.Digest) {
			return 0, "", leasehold.Errorf(leasehold.KindUnprocessable, "the body's sha-256 is %x, not the %x its digest header names", got, u.Digest)
		}
	}
	if u.VerifyFunc != nil {
		if err := u.VerifyFunc(); err != nil {
			return 0, "", err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, "", fileError(err, "storing the snapshot")
	}
	if err := f.Close(); err != nil {
		return 0, "", fileError(err, "storing the snapshot")
	}
	return counted.n, hex.EncodeToString(stored.Sum(nil)), nil
}

// Open opens the group's stored snapshot for reading; a nil file means the
// group has none. Errors: not found (no such group).
func (s *Snapshots) Open(ctx context.Context, groupID int64) (*os.File, *leasehold.Snapshot, error) {
	for try := 0; ; try++ {
		snap, err := s.db.Snapshot(ctx, groupID)
		if err != nil || snap == nil {
			return nil, nil, err
		}
		f, err := os.Open(s.path(groupID, snap.File, ".gz"))
		if err == nil {
			return f, snap, nil
		}
		// A new upload may have replaced it between the read and the open.
		if !errors.Is(err, fs.ErrNotExist) || try > 0 {
			return nil, nil, fileError(err, "opening the snapshot")
		}
	}
}

// Path is the stored file of a recorded snapshot (for checks and tools).
func (s *Snapshots) Path(groupID int64, snap leasehold.Snapshot) string {
	return s.path(groupID, snap.File, ".gz")
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// onlyWriter and onlyReader hide ReadFrom/WriteTo so io.CopyBuffer uses
// the one buffer it is given.
type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fileError maps a disk error to its kind: a full disk is no space, a
// read-only one unavailable.
func fileError(err error, doing string) error {
	switch {
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return leasehold.Wrap(leasehold.KindNoSpace, err, "%s: the data disk is full", doing)
	case errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EIO):
		return leasehold.Wrap(leasehold.KindUnavailable, err, "%s: the data disk cannot be written: %v", doing, err)
	}
	return leasehold.Wrap(leasehold.KindInternal, err, "%s: %v", doing, err)
}

// bodyError maps a failed copy of an upload: the limit is too large, the
// disk is as fileError says, and anything else is a body that broke off.
func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return leasehold.Errorf(leasehold.KindTooLarge, "the snapshot is over the limit of %d bytes", limit)
	}
	var le *leasehold.Error
	if errors.As(err, &le) {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EIO) {
		return fileError(err, "storing the snapshot")
	}
	return leasehold.Wrap(leasehold.KindInvalid, err, "the upload broke off: %v", err)
}

// ErrSnapshotTooLarge is returned for a declared Content-Length over the limit.
func ErrSnapshotTooLarge(n, limit int64) error {
	return leasehold.Errorf(leasehold.KindTooLarge, "the snapshot is %d bytes, over the limit of %d", n, limit)
}
