package appliance_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/appliance"
)

// TestDataDirLinksRefused: a symbolic link planted at the data dir's lock
// file, or at the admin token's .tmp, is never written through: the lock
// is refused naming the link, the token is written beside it, and the
// file each pointed to is untouched.
func TestDataDirLinksRefused(t *testing.T) {
	t.Parallel()
	victim := filepath.Join(t.TempDir(), "victim.txt")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	untouched := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
			t.Fatalf("%s: the link's target now holds %q (%v)", what, b, err)
		}
	}

	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(data, appliance.LockFile)); err != nil {
		t.Fatal(err)
	}
	l, err := appliance.LockDataDir(data)
	if err == nil {
		l.Release()
		untouched("the lock taken through a link")
		t.Fatal("the data dir was locked through a link at its lock file")
	}
	if !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("lock through a link: %v, want it named", err)
	}
	untouched("the lock refused")

	dir := t.TempDir()
	token := filepath.Join(dir, "admin.token")
	if err := os.Symlink(victim, token+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := appliance.WriteAdminToken(token, "lha_new_token_0123456789"); err != nil {
		t.Fatal(err)
	}
	untouched("the token written with a link at its .tmp")
	if b, err := os.ReadFile(token); err != nil || strings.TrimSpace(string(b)) != "lha_new_token_0123456789" {
		t.Fatalf("the token file: %q (%v)", b, err)
	}
	if fi, err := os.Lstat(token); err != nil || fi.Mode()&os.ModeSymlink != 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file is %v (%v), want a plain 0600 file", fi.Mode(), err)
	}
}

// TestDataDirOfAnotherUserRefused: a data dir another user owns is
// refused, naming its owner; nothing is made in it.
func TestDataDirOfAnotherUserRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a dir to another user")
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	l, err := appliance.LockDataDir(data)
	if err == nil {
		l.Release()
		t.Fatal("a data dir owned by uid 65534 was taken by uid 0")
	}
	if !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("refusal: %v, want the owner named", err)
	}
	if _, err := os.Lstat(filepath.Join(data, appliance.LockFile)); !os.IsNotExist(err) {
		t.Errorf("the lock file was made in the refused dir (%v)", err)
	}
}
