package leasehold

import (
	"strconv"
	"strings"
	"time"
)

// A backup is a directory: the catalog (catalog.db), the window snapshot
// files the catalog records (snapshots/<group>-<seq>.gz) and
// BackupManifestName, written last, listing every file with its sha-256.
// A directory without the manifest is a backup that did not finish.
// It holds no admin token and no NATS state: a restored node makes a new
// admin token on its first start (or is given one), and its workers'
// tokens, kept in the catalog as hashes, work as before.
const (
	BackupManifestName = "manifest.json"
	BackupFormat       = "leasehold-backup"
	BackupVersion      = 1
	BackupCatalogName  = "catalog.db"
	// BackupSignatureName, beside the manifest, holds its HMAC-SHA256 under
	// a key the operator keeps outside the backup (backup --sign-key-file):
	// the manifest's sums catch damage, the signature tampering.
	BackupSignatureName = "manifest.json.hmac"
)

// BackupManifest is a backup's manifest.json.
type BackupManifest struct {
	Format  string    `json:"format"`  // BackupFormat
	Version int       `json:"version"` // BackupVersion
	TakenAt time.Time `json:"taken_at"`
	// Sequence numbers the node's backups, 1 up; a restored node goes on
	// from the restored backup's. Signed with the manifest, it lets
	// restore refuse a backup older than one restored before. 0 in a
	// backup made before it was recorded.
	Sequence uint64 `json:"sequence,omitempty"`
	// SchemaVersion and CatalogID are the backed-up catalog's.
	SchemaVersion int    `json:"schema_version"`
	CatalogID     string `json:"catalog_id"`
	// Files are the catalog first, then the snapshots by group id.
	Files []BackupFile `json:"files"`
}

// BackupFile is one file of a backup: its path inside the backup
// (slash-separated), size and sha-256 (hex).
type BackupFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Check reports whether m is a manifest this binary restores, naming
// only files it would write: the catalog and snapshot files named from
// ids. Errors: unprocessable.
func (m *BackupManifest) Check() error {
	if m.Format != BackupFormat {
		return Errorf(KindUnprocessable, "not a leasehold backup manifest (format %q)", m.Format)
	}
	if m.Version != BackupVersion {
		return Errorf(KindUnprocessable, "backup format version %d; this binary restores version %d", m.Version, BackupVersion)
	}
	if len(m.Files) == 0 || m.Files[0].Path != BackupCatalogName {
		return Errorf(KindUnprocessable, "the manifest does not list %s first", BackupCatalogName)
	}
	seen := map[string]bool{}
	for i, f := range m.Files {
		if i > 0 {
			if _, _, ok := BackupSnapshotIDs(f.Path); !ok {
				return Errorf(KindUnprocessable, "the manifest names %q, which is not a snapshot file named from ids", f.Path)
			}
		}
		if seen[f.Path] {
			return Errorf(KindUnprocessable, "the manifest names %q twice", f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 || len(f.SHA256) != 64 || strings.Trim(f.SHA256, "0123456789abcdef") != "" {
			return Errorf(KindUnprocessable, "the manifest's entry for %q has no valid size and sha-256", f.Path)
		}
	}
	return nil
}

// BackupSnapshotPath is a snapshot file's path inside a backup.
func BackupSnapshotPath(groupID, file int64) string {
	return "snapshots/" + strconv.FormatInt(groupID, 10) + "-" + strconv.FormatInt(file, 10) + ".gz"
}

// BackupSnapshotIDs parses a path made by BackupSnapshotPath; ok is false
// for anything else.
func BackupSnapshotIDs(path string) (groupID, file int64, ok bool) {
	rest, ok := strings.CutPrefix(path, "snapshots/")
	if !ok {
		return 0, 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".gz")
	if !ok {
		return 0, 0, false
	}
	g, f, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	gid, err1 := strconv.ParseInt(g, 10, 64)
	fid, err2 := strconv.ParseInt(f, 10, 64)
	if err1 != nil || err2 != nil || gid < 0 || fid < 0 || BackupSnapshotPath(gid, fid) != path {
		return 0, 0, false
	}
	return gid, fid, true
}
