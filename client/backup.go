package client

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
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/leasehold/leasehold"
)

// BackupFunc is told how many of a backup's bytes have arrived, of total
// (-1 when the node did not say).
type BackupFunc func(done, total int64)

// Backup takes a consistent backup of the node (GET /api/v1/backup) into
// dir, which must not exist or be empty: the catalog as of one commit,
// the window snapshot files it records, and, once every file is written,
// fsynced and matches the node's sha-256, manifest.json. A backup that
// fails is removed; one cut off harder (the process killed) has no
// manifest, which `leasehold restore` refuses. It is not retried: a
// backup is one stream. Errors: conflict (dir is not empty, or another
// backup runs on the node), unavailable, unprocessable (the stream was
// damaged or cut off), and the node's.
func (c *Client) Backup(ctx context.Context, dir string, progress BackupFunc) (m leasehold.BackupManifest, err error) {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	if err := emptyDir(dir); err != nil {
		return m, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o700); err != nil {
		return m, leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	defer func() {
		if err != nil {
			removeBackup(dir)
		}
	}()
	once := *c
	once.Retry.Attempts = 1
	h := http.Header{}
	h.Set("Accept", "application/x-tar")
	resp, err := once.send(ctx, request{method: http.MethodGet, path: "/api/v1/backup", header: h})
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	total, perr := strconv.ParseInt(resp.Header.Get("X-Backup-Bytes"), 10, 64)
	if perr != nil {
		total = -1
	}
	got := map[string]leasehold.BackupFile{}
	var done int64
	tr := tar.NewReader(resp.Body)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return m, cutOff(ctx, err)
		}
		if hdr.Name == leasehold.BackupManifestName {
			if m, err = readManifest(tr, got); err != nil {
				return m, err
			}
			break
		}
		if _, _, ok := leasehold.BackupSnapshotIDs(hdr.Name); !ok && hdr.Name != leasehold.BackupCatalogName || got[hdr.Name].Path != "" {
			return m, leasehold.Errorf(leasehold.KindUnprocessable, "the backup stream holds %q, which is no file of a backup", hdr.Name)
		}
		f, err := writeFile(filepath.Join(dir, filepath.FromSlash(hdr.Name)), tr, func(n int64) { progress(done+n, total) })
		if err != nil {
			return m, cutOff(ctx, err)
		}
		f.Path = hdr.Name
		got[f.Path] = f
		done += f.Size
	}
	if err := syncDir(filepath.Join(dir, "snapshots")); err != nil {
		return m, err
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	tmp := filepath.Join(dir, leasehold.BackupManifestName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return m, leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	if err := syncFile(tmp); err != nil {
		return m, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, leasehold.BackupManifestName)); err != nil {
		return m, leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	return m, syncDir(dir)
}

// readManifest reads the stream's manifest and checks it names exactly
// the files received, with their sizes and sums.
func readManifest(r io.Reader, got map[string]leasehold.BackupFile) (leasehold.BackupManifest, error) {
	var m leasehold.BackupManifest
	if err := json.NewDecoder(io.LimitReader(r, 64<<20)).Decode(&m); err != nil {
		return m, leasehold.Errorf(leasehold.KindUnprocessable, "the backup's manifest is not JSON: %v", err)
	}
	if err := m.Check(); err != nil {
		return m, err
	}
	if len(m.Files) != len(got) {
		return m, leasehold.Errorf(leasehold.KindUnprocessable, "the backup's manifest lists %d files, the stream held %d", len(m.Files), len(got))
	}
	for _, f := range m.Files {
		if g := got[f.Path]; g != f {
			return m, leasehold.Errorf(leasehold.KindUnprocessable, "%s arrived as %d bytes with sha-256 %s; the node sent %d bytes with %s", f.Path, g.Size, g.SHA256, f.Size, f.SHA256)
		}
	}
	return m, nil
}

// cutOff says what a stream that ended early means.
func cutOff(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var le *leasehold.Error
	if errors.As(err, &le) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return leasehold.Wrap(leasehold.KindUnprocessable, err, "the backup stream ended before its manifest: the node stopped it (its log says why) or the connection broke")
	}
	return leasehold.Wrap(leasehold.KindUnavailable, err, "the backup stream broke off: %v", err)
}

// writeFile writes r to a new file at path, fsynced, and returns its size
// and sha-256.
func writeFile(path string, r io.Reader, progress func(int64)) (leasehold.BackupFile, error) {
	var f leasehold.BackupFile
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return f, leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	defer out.Close()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(out, h), 1<<20)
	buf := make([]byte, 1<<20)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := bw.Write(buf[:n]); err != nil {
				return f, leasehold.Wrap(leasehold.KindInternal, err, "writing %s: %v", path, err)
			}
			f.Size += int64(n)
			progress(f.Size)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return f, rerr
		}
	}
	if err := bw.Flush(); err != nil {
		return f, leasehold.Wrap(leasehold.KindInternal, err, "writing %s: %v", path, err)
	}
	if err := out.Sync(); err != nil {
		return f, leasehold.Wrap(leasehold.KindInternal, err, "writing %s: %v", path, err)
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	return f, out.Close()
}

// emptyDir refuses a dir that exists with anything in it.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	if len(entries) > 0 {
		return leasehold.Errorf(leasehold.KindConflict, "%s is not empty: a backup goes into a new or empty directory", dir)
	}
	return nil
}

// removeBackup removes what a failed backup wrote into dir (which was
// empty or did not exist), leaving dir itself.
func removeBackup(dir string) {
	os.RemoveAll(filepath.Join(dir, "snapshots"))
	for _, n := range []string{leasehold.BackupCatalogName, leasehold.BackupManifestName, leasehold.BackupManifestName + ".tmp"} {
		os.Remove(filepath.Join(dir, n))
	}
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "syncing %s: %v", path, err)
	}
	return nil
}

func syncDir(dir string) error { return syncFile(dir) }
