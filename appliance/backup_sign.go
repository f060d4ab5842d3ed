package appliance

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
)

// backupKeyMin is the shortest signing key taken: a guessable key signs
// nothing.
const backupKeyMin = 16

// signaturePrefix names the signature's algorithm in its file.
const signaturePrefix = "hmac-sha256:"

// ReadBackupKey reads a backup signing key from path (its bytes, without
// surrounding whitespace). flag names the flag in errors. Errors: invalid
// (missing, unreadable or shorter than 16 bytes).
func ReadBackupKey(flag, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInvalid, err, "%s: %v", flag, err)
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < backupKeyMin {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "%s %s: the key is %d bytes, want at least %d (for example: head -c 32 /dev/urandom | base64 > %s)",
			flag, path, len(key), backupKeyMin, path)
	}
	return key, nil
}

func manifestMAC(manifest, key []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(manifest)
	return mac.Sum(nil)
}

// SignBackup signs the manifest of the finished backup in dir with key,
// into BackupSignatureName (0600, fsynced). The manifest lists every
// file's sha-256, so the signature covers the whole backup. Errors:
// unprocessable (no manifest), internal.
func SignBackup(dir string, key []byte) error {
	manifest, err := os.ReadFile(filepath.Join(dir, leasehold.BackupManifestName))
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnprocessable, err, "signing the backup: %v", err)
	}
	path := filepath.Join(dir, leasehold.BackupSignatureName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fileError(err, "signing the backup")
	}
	_, werr := f.WriteString(signaturePrefix + hex.EncodeToString(manifestMAC(manifest, key)) + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(path)
		return fileError(err, "signing the backup")
	}
	return syncDir(dir)
}

// verifyBackup checks manifest, as read from dir, against its signature
// under key. Errors: unprocessable (unsigned, or signed otherwise).
func verifyBackup(dir string, manifest, key []byte) error {
	path := filepath.Join(dir, leasehold.BackupSignatureName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return leasehold.Errorf(leasehold.KindUnprocessable, "%s is not signed (no %s), and a verify key was given: refused", dir, leasehold.BackupSignatureName)
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnprocessable, err, "%v", err)
	}
	text, ok := strings.CutPrefix(strings.TrimSpace(string(b)), signaturePrefix)
	sig, herr := hex.DecodeString(text)
	if !ok || herr != nil || !hmac.Equal(sig, manifestMAC(manifest, key)) {
		return leasehold.Errorf(leasehold.KindUnprocessable, "%s: the manifest's signature does not match under the verify key: the backup was changed, or signed with another key; refused", dir)
	}
	return nil
}

// RestoredRecordFile is the file, beside a --verify-key-file, recording
// the sequence of the newest backup restored with that key: restore
// refuses an older one (a signed backup swapped for an older signed one).
func RestoredRecordFile(verifyKeyFile string) string { return verifyKeyFile + ".restored" }

// ReadRestoredRecord reads the sequence recorded at path
// (RestoredRecordFile); 0 when there is none yet. Errors: invalid (the
// file cannot be read or holds no sequence).
func ReadRestoredRecord(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, leasehold.Wrap(leasehold.KindInvalid, err, "the record of backups restored: %v", err)
	}
	seq, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "%s holds no backup sequence (%q): remove it to accept any backup once", path, strings.TrimSpace(string(b)))
	}
	return seq, nil
}

// RecordRestored records seq at path (RestoredRecordFile), 0600, replaced
// whole.
func RecordRestored(path string, seq uint64) error {
	return replaceFile(path, []byte(strconv.FormatUint(seq, 10)+"\n"))
}
