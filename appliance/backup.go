package appliance

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Backup is a consistent backup of a running node, ready to be streamed:
// a copy of the catalog as of one commit and the window snapshot files
// that copy records, kept on disk (not removed by newer uploads) until
// Close. Make one with Appliance.Backup.
type Backup struct {
	// Manifest lists the files with their sizes; each SHA256 is the one
	// the catalog records for a snapshot file, and empty for the catalog
	// until WriteTar has hashed it.
	Manifest leasehold.BackupManifest

	paths   []string // on disk, in Manifest.Files' order
	catalog string   // the catalog copy, removed by Close
	unpin   func()
	done    func()
}

// backupPrefix names the catalog copy of a backup under way in the data
// dir; Open removes what a crash left of one.
const backupPrefix = "backup-"

// Backup copies the catalog (store.DB.Backup, beside it in the data dir)
// and pins the snapshot files that copy records. The copy is taken after
// the pin, so every file it records is still on disk: a file a newer
// upload replaces meanwhile waits until Close. Close it. Errors: conflict
// (a backup is under way), no space, unavailable, internal.
func (a *Appliance) Backup(ctx context.Context) (*Backup, error) {
	if !a.backupMu.TryLock() {
		return nil, leasehold.Errorf(leasehold.KindConflict, "a backup of this node is under way already; wait for it to finish")
	}
	b := &Backup{done: a.backupMu.Unlock, unpin: a.Snapshots.pin()}
	b.catalog = filepath.Join(a.Config.DataDir, backupPrefix+strconv.FormatInt(time.Now().UnixNano(), 10)+".db")
	taken := a.Config.NowFunc().UTC().Truncate(time.Millisecond)
	if err := a.db.Backup(ctx, b.catalog); err != nil {
		b.Close()
		return nil, a.WithDiskCause(err)
	}
	cf, err := store.InspectCatalog(ctx, b.catalog)
	if err != nil {
		b.Close()
		return nil, leasehold.Wrap(leasehold.KindInternal, err, "checking the catalog's copy: %s", leasehold.ErrorMessage(err))
	}
	fi, err := os.Stat(b.catalog)
	if err != nil {
		b.Close()
		return nil, fileError(err, "backing up the catalog")
	}
	seq, err := nextBackupSequence(a.Config.DataDir)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.Manifest = leasehold.BackupManifest{Format: leasehold.BackupFormat, Version: leasehold.BackupVersion, TakenAt: taken, Sequence: seq,
		SchemaVersion: cf.SchemaVersion, CatalogID: cf.CatalogID,
		Files: []leasehold.BackupFile{{Path: leasehold.BackupCatalogName, Size: fi.Size()}}}
	b.paths = []string{b.catalog}
	for _, s := range cf.Snapshots {
		b.Manifest.Files = append(b.Manifest.Files, leasehold.BackupFile{Path: leasehold.BackupSnapshotPath(s.GroupID, s.File), Size: s.Size, SHA256: s.SHA256})
		b.paths = append(b.paths, a.Snapshots.path(s.GroupID, s.File, ".gz"))
	}
	return b, nil
}

// Bytes is the size of the files a backup holds.
func (b *Backup) Bytes() int64 {
	var n int64
	for _, f := range b.Manifest.Files {
		n += f.Size
	}
	return n
}

// WriteTar streams the backup to w as a tar: the catalog, the snapshot
// files, and last manifest.json with the sha-256 of every file as sent.
// A snapshot file that no longer matches the size and sha-256 its
// catalog records is not a backup of it: the stream stops there with an
// internal error naming it, and has no manifest. Errors: internal, and
// w's.
func (b *Backup) WriteTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, copyBuffer)
	for i := range b.Manifest.Files {
		f := &b.Manifest.Files[i]
		sum, err := b.send(tw, f, b.paths[i], buf)
		if err != nil {
			return err
		}
		if f.SHA256 != "" && f.SHA256 != sum {
			return leasehold.Errorf(leasehold.KindInternal, "snapshot file %s has sha-256 %s, the catalog records %s: the data disk damaged it; not backed up", b.paths[i], sum, f.SHA256)
		}
		f.SHA256 = sum
	}
	m, err := json.MarshalIndent(b.Manifest, "", "  ")
	if err != nil {
		return err
	}
	m = append(m, '\n')
	if err := tw.WriteHeader(&tar.Header{Name: leasehold.BackupManifestName, Mode: 0o600, Size: int64(len(m)), ModTime: b.Manifest.TakenAt, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(m); err != nil {
		return err
	}
	return tw.Close()
}

// send writes one file into tw and returns its sha-256.
func (b *Backup) send(tw *tar.Writer, f *leasehold.BackupFile, path string, buf []byte) (string, error) {
	src, err := os.Open(path)
	if err != nil {
		return "", fileError(err, "backing up "+f.Path)
	}
	defer src.Close()
	if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: 0o600, Size: f.Size, ModTime: b.Manifest.TakenAt, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(onlyWriter{io.MultiWriter(tw, h)}, onlyReader{io.LimitReader(src, f.Size)}, buf)
	if err != nil {
		return "", err
	}
	if n != f.Size {
		return "", leasehold.Errorf(leasehold.KindInternal, "%s is %d bytes, the catalog records %d: the data disk damaged it; not backed up", path, n, f.Size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Close removes the catalog's copy and lets go of the snapshot files.
func (b *Backup) Close() error {
	var err error
	if b.catalog != "" {
		if err = os.Remove(b.catalog); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		b.catalog = ""
	}
	if b.unpin != nil {
		b.unpin()
		b.unpin = nil
	}
	if b.done != nil {
		b.done()
		b.done = nil
	}
	return err
}

// sweepBackups removes the catalog copies (and their SQLite journals) a
// backup left in dataDir when the node died during it.
func sweepBackups(dataDir string) error {
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), backupPrefix)
		if !ok {
			continue
		}
		seq, suffix, ok := strings.Cut(rest, ".db")
		if _, err := strconv.ParseInt(seq, 10, 64); !ok || err != nil {
			continue
		}
		switch suffix {
		case "", "-journal", "-wal", "-shm":
			if err := os.Remove(filepath.Join(dataDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// RestoreStaging is the directory inside a data dir that `leasehold
// restore` fills before it moves the files into place. A data dir that
// has it and no catalog is a restore that did not finish: Open refuses
// it, and restore starts that restore over.
const RestoreStaging = ".restore"

// RestoreFunc is told, as Restore goes, what it does and how many of the
// backup's bytes it has read for it.
type RestoreFunc func(stage string, done, total int64)

// RestoreOptions are how Restore goes.
type RestoreOptions struct {
	// Progress, if set, is told how far it is.
	Progress RestoreFunc
	// VerifyKey, if set, is the key the backup's manifest must be signed
	// with (SignBackup): an unsigned backup, or one signed otherwise, is
	// refused before anything else is read.
	VerifyKey []byte
	// NewestRestored, if set, is the sequence of the newest backup
	// restored before: a backup whose signed manifest has an older one is
	// refused as a rollback (ErrOlderBackup). It needs VerifyKey: an
	// unsigned sequence proves nothing.
	NewestRestored uint64
}

// ErrOlderBackup is the cause of Restore's refusal of a backup older
// than RestoreOptions.NewestRestored (errors.Is).
var ErrOlderBackup = errors.New("backup older than one restored before")

// BackupSequenceFile is the file in a data dir holding the sequence of
// the node's last backup (BackupManifest.Sequence).
const BackupSequenceFile = "backup.seq"

// nextBackupSequence counts a new backup of the node in dataDir: the
// sequence after the last one, written (0600, fsynced) before the backup
// is handed out, so no two backups of a data dir share one.
func nextBackupSequence(dataDir string) (uint64, error) {
	last, err := readBackupSequence(dataDir)
	if err != nil {
		return 0, err
	}
	return last + 1, writeBackupSequence(dataDir, last+1)
}

func readBackupSequence(dataDir string) (uint64, error) {
	path := filepath.Join(dataDir, BackupSequenceFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, dirError(dataDir, err)
	}
	seq, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "%s holds no backup sequence (%q): write the sequence of the node's last backup into it", path, strings.TrimSpace(string(b)))
	}
	return seq, nil
}

func writeBackupSequence(dataDir string, seq uint64) error {
	return replaceFile(filepath.Join(dataDir, BackupSequenceFile), []byte(strconv.FormatUint(seq, 10)+"\n"))
}

// Restore restores the backup in dir into dataDir, which must not exist,
// be empty, or hold only what an unfinished restore left. It checks every
// file's size and sha-256 against the manifest, and the catalog with
// SQLite's quick_check, its schema against the one this binary embeds,
// and against the snapshots it records, before it writes anything into
// dataDir (a catalog of an older version is checked in the stage, once
// migrated, and nothing is moved into place unless it passes); it then copies into dataDir/.restore,
// checking the sums again, fsyncs, and moves the snapshots and then the
// catalog into place. The catalog's move is the commit: until it, a node
// refuses to start on dataDir, and a failure removes what was staged.
// The restored data dir has no admin token: the node makes one on its
// first start. Errors: not found, unprocessable (a damaged or incomplete
// backup), conflict (dataDir is in use), no space, internal.
func Restore(ctx context.Context, dir, dataDir string, opts RestoreOptions) (leasehold.BackupManifest, error) {
	progress := opts.Progress
	if progress == nil {
		progress = func(string, int64, int64) {}
	}
	// One process a data dir (rule 14): a dir that exists is taken first,
	// so a node running on it is named at once; a new one only once the
	// backup is checked, so a refused restore makes nothing.
	var lock *DataLock
	var m leasehold.BackupManifest
	if _, err := os.Stat(dataDir); err == nil {
		if lock, err = LockDataDir(dataDir); err != nil {
			return m, err
		}
		defer lock.Release()
	}
	m, cf, total, err := checkBackup(ctx, dir, opts.VerifyKey, progress)
	if err != nil {
		return m, err
	}
	if opts.VerifyKey != nil && m.Sequence < opts.NewestRestored {
		return m, leasehold.Wrap(leasehold.KindConflict, ErrOlderBackup,
			"%s is backup %d (taken %s), older than backup %d restored before: a rollback is refused", dir, m.Sequence, m.TakenAt.Format(time.RFC3339), opts.NewestRestored)
	}
	if lock == nil {
		if lock, err = LockDataDir(dataDir); err != nil {
			return m, err
		}
		defer lock.Release()
	}
	if err := readyForRestore(dataDir); err != nil {
		return m, err
	}
	stage := filepath.Join(dataDir, RestoreStaging)
	if err := os.MkdirAll(filepath.Join(stage, "snapshots"), 0o700); err != nil {
		return m, dirError(dataDir, err)
	}
	committed, moved := false, false
	defer func() {
		if !committed {
			os.RemoveAll(stage)
			if moved { // dataDir had no snapshots before: these are the stage's
				os.RemoveAll(filepath.Join(dataDir, "snapshots"))
			}
		}
	}()
	if err := stageBackup(ctx, dir, stage, m, cf.SchemaVersion, total, progress); err != nil {
		return m, err
	}
	if err := syncDir(filepath.Join(stage, "snapshots")); err != nil {
		return m, fileError(err, "restoring")
	}
	if err := os.Rename(filepath.Join(stage, "snapshots"), filepath.Join(dataDir, "snapshots")); err != nil {
		return m, fileError(err, "restoring")
	}
	moved = true
	if err := os.Rename(filepath.Join(stage, leasehold.BackupCatalogName), filepath.Join(dataDir, leasehold.BackupCatalogName)); err != nil {
		return m, fileError(err, "restoring")
	}
	committed = true
	if err := syncDir(dataDir); err != nil {
		return m, fileError(err, "restoring")
	}
	if err := os.RemoveAll(stage); err != nil {
		return m, fileError(err, "restoring: removing "+stage)
	}
	// The restored node's backups go on from this one's sequence.
	if m.Sequence > 0 {
		if err := writeBackupSequence(dataDir, m.Sequence); err != nil {
			return m, err
		}
	}
	return m, syncDir(dataDir)
}

// stageBackup copies backup dir's files into stage, checked as they are
// copied, and readies the staged catalog: migrated when older than this
// build's schema, then given a new identity.
func stageBackup(ctx context.Context, dir, stage string, m leasehold.BackupManifest, schema int, total int64, progress func(string, int64, int64)) error {
	var done int64
	for _, f := range m.Files {
		dst := filepath.Join(stage, filepath.FromSlash(f.Path))
		if err := checkFile(ctx, filepath.Join(dir, filepath.FromSlash(f.Path)), f, &dst, func(n int64) { progress("copying", done+n, total) }); err != nil {
			return err
		}
		done += f.Size
	}
	if schema < leasehold.SchemaVersion {
		// Migrated as the node's first start would, then held to the
		// embedded schema before anything (Reidentify's write) can fire
		// what it holds on the real catalog.
		if err := store.CheckSchema(ctx, filepath.Join(stage, leasehold.BackupCatalogName)); err != nil {
			return err
		}
	}
	return store.Reidentify(ctx, filepath.Join(stage, leasehold.BackupCatalogName))
}

// checkBackup reads dir's manifest and checks the backup whole before
// anything is written: the signature (with verifyKey), every file's size
// and sum, and the catalog against the manifest and the snapshots it
// records. It returns the manifest, what the catalog holds and the bytes
// to copy.
func checkBackup(ctx context.Context, dir string, verifyKey []byte, progress func(string, int64, int64)) (leasehold.BackupManifest, store.CatalogFile, int64, error) {
	var none store.CatalogFile
	m, raw, err := readBackupManifest(dir)
	if err != nil {
		return m, none, 0, err
	}
	if verifyKey != nil {
		if err := verifyBackup(dir, raw, verifyKey); err != nil {
			return m, none, 0, err
		}
	}
	var total int64
	for _, f := range m.Files {
		total += f.Size
	}
	// Every sum first: nothing is written for a damaged backup.
	var done int64
	for _, f := range m.Files {
		if err := checkFile(ctx, filepath.Join(dir, filepath.FromSlash(f.Path)), f, nil, func(n int64) { progress("checking", done+n, total) }); err != nil {
			return m, none, 0, err
		}
		done += f.Size
	}
	cf, err := store.InspectCatalog(ctx, filepath.Join(dir, leasehold.BackupCatalogName))
	if err != nil {
		return m, none, 0, err
	}
	if cf.CatalogID != m.CatalogID {
		return m, none, 0, leasehold.Errorf(leasehold.KindUnprocessable, "the backup's catalog is %s, its manifest names %s", cf.CatalogID, m.CatalogID)
	}
	listed := map[string]leasehold.BackupFile{}
	for _, f := range m.Files {
		listed[f.Path] = f
	}
	for _, s := range cf.Snapshots {
		p := leasehold.BackupSnapshotPath(s.GroupID, s.File)
		f, ok := listed[p]
		if !ok || f.SHA256 != s.SHA256 || f.Size != s.Size {
			return m, none, 0, leasehold.Errorf(leasehold.KindUnprocessable, "the backup's catalog records window snapshot %s (group %d), which the backup does not hold as recorded", p, s.GroupID)
		}
	}
	if len(cf.Snapshots) != len(m.Files)-1 {
		return m, none, 0, leasehold.Errorf(leasehold.KindUnprocessable, "the backup holds %d snapshot files, its catalog records %d", len(m.Files)-1, len(cf.Snapshots))
	}
	return m, cf, total, nil
}

// ReadBackupManifest reads and checks dir's manifest. Errors: not found,
// unprocessable.
func ReadBackupManifest(dir string) (leasehold.BackupManifest, error) {
	m, _, err := readBackupManifest(dir)
	return m, err
}

// readBackupManifest is ReadBackupManifest with the manifest's bytes, the
// ones a signature covers.
func readBackupManifest(dir string) (leasehold.BackupManifest, []byte, error) {
	var m leasehold.BackupManifest
	b, err := os.ReadFile(filepath.Join(dir, leasehold.BackupManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return m, nil, leasehold.Wrap(leasehold.KindNotFound, serr, "%v", serr)
		}
		return m, nil, leasehold.Errorf(leasehold.KindUnprocessable, "%s has no %s: it is not a backup, or its backup did not finish", dir, leasehold.BackupManifestName)
	}
	if err != nil {
		return m, nil, leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, nil, leasehold.Errorf(leasehold.KindUnprocessable, "%s: %v", filepath.Join(dir, leasehold.BackupManifestName), err)
	}
	return m, b, m.Check()
}

// readyForRestore refuses a data dir that holds anything but what an
// unfinished restore left (its stage, and snapshots moved in before the
// catalog), which it clears.
func readyForRestore(dataDir string) error {
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return dirError(dataDir, os.MkdirAll(dataDir, 0o700))
	}
	if err != nil {
		return dirError(dataDir, err)
	}
	unfinished := false
	var names []string
	for _, e := range entries {
		if e.Name() == LockFile {
			continue // restore's own hold on the dir
		}
		names = append(names, e.Name())
		if e.Name() == RestoreStaging {
			unfinished = true
		}
	}
	if len(names) == 0 {
		return nil
	}
	for _, n := range names {
		if !unfinished || n != RestoreStaging && n != "snapshots" {
			return leasehold.Errorf(leasehold.KindConflict, "%s is not empty (it has %s): restore only into a new or empty data directory, with no node running on it", dataDir, n)
		}
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dataDir, n)); err != nil {
			return dirError(dataDir, err)
		}
	}
	return nil
}

// checkFile reads path, checking its size and sha-256 against f, and
// copies it to *dst (fsynced, mode 0600) when dst is not nil. progress is
// told the bytes read so far.
func checkFile(ctx context.Context, path string, f leasehold.BackupFile, dst *string, progress func(int64)) error {
	src, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return leasehold.Errorf(leasehold.KindUnprocessable, "the backup lacks %s, which its manifest lists", f.Path)
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	defer src.Close()
	h := sha256.New()
	var w io.Writer = h
	var out *os.File
	var bw *bufio.Writer
	if dst != nil {
		if out, err = os.OpenFile(*dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return fileError(err, "restoring "+f.Path)
		}
		defer out.Close()
		bw = bufio.NewWriterSize(out, copyBuffer)
		w = io.MultiWriter(h, bw)
	}
	buf := make([]byte, copyBuffer)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, rerr := src.Read(buf)
		if k > 0 {
			if _, err := w.Write(buf[:k]); err != nil {
				return fileError(err, "restoring "+f.Path)
			}
			n += int64(k)
			progress(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return leasehold.Wrap(leasehold.KindInternal, rerr, "reading %s: %v", path, rerr)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != f.Size || got != f.SHA256 {
		return leasehold.Errorf(leasehold.KindUnprocessable, "%s is damaged: %d bytes with sha-256 %s, the manifest says %d bytes with %s", f.Path, n, got, f.Size, f.SHA256)
	}
	if out != nil {
		if err := bw.Flush(); err != nil {
			return fileError(err, "restoring "+f.Path)
		}
		if err := out.Sync(); err != nil {
			return fileError(err, "restoring "+f.Path)
		}
		if err := out.Close(); err != nil {
			return fileError(err, "restoring "+f.Path)
		}
	}
	return nil
}

// unfinishedRestore refuses a data dir an interrupted restore left, and
// removes the stage a finished one could not.
func unfinishedRestore(dataDir string) error {
	stage := filepath.Join(dataDir, RestoreStaging)
	if _, err := os.Stat(stage); err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dataDir, leasehold.BackupCatalogName)); err == nil {
		// Committed: only the stage's removal was cut off.
		return dirError(dataDir, os.RemoveAll(stage))
	}
	return leasehold.Errorf(leasehold.KindUnavailable, "%s holds a restore that did not finish: run leasehold restore into it again", dataDir)
}
