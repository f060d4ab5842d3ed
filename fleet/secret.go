package fleet

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold"
)

// LocalSecretFile is the file in a node's data dir holding the token its
// embedded NATS server asks of clients when the node is given no fleet
// secret: the client port is never open, even on loopback, since the
// HTTP API's tokens would mean nothing if NATS let anyone write the
// catalog around them.
const LocalSecretFile = "nats.secret"

// LocalSecret reads the node's own NATS token from dataDir, making one
// (32 random bytes, base64, mode 0600) on the first start. Two nodes
// started at once on one data dir read the same token: the file appears
// whole or not at all. Errors: KindInvalid when the data dir or the file
// cannot be used.
func LocalSecret(dataDir string) (string, error) {
	path := filepath.Join(dataDir, LocalSecretFile)
	if s, err := readLocalSecret(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", leasehold.Wrap(leasehold.KindInvalid, err, "data dir %s is not usable: %v", dataDir, err)
	}
	b := make([]byte, 32)
	rand.Read(b)
	tmp, err := os.CreateTemp(dataDir, ".nats.secret-*")
	if err != nil {
		return "", leasehold.Wrap(leasehold.KindInvalid, err, "data dir %s is not usable: %v", dataDir, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; the secret is written and synced
	// before the file gets its name.
	_, werr := tmp.WriteString(base64.StdEncoding.EncodeToString(b) + "\n")
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return "", leasehold.Wrap(leasehold.KindInvalid, err, "writing %s: %v", path, err)
	}
	// A link, not a rename: it fails if another start made the file first,
	// and that one's secret is then the node's.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", leasehold.Wrap(leasehold.KindInvalid, err, "writing %s: %v", path, err)
	}
	if d, err := os.Open(dataDir); err == nil {
		d.Sync()
		d.Close()
	}
	return readLocalSecret(path)
}

func readLocalSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", leasehold.Wrap(leasehold.KindInvalid, err, "data dir %s is not usable: %v", filepath.Dir(path), err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return "", leasehold.Errorf(leasehold.KindInvalid, "%s holds no usable secret: delete it to have a new one made", path)
	}
	return s, nil
}
