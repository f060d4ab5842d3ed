package appliance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/leasehold/leasehold"
)

// LockFile is the file in a data dir that its one process holds locked
// (rule 14). It stays after the process: the lock is the kernel's, so it
// ends with the process however it ends (kill -9 too), and the pid in the
// file only names the holder for a second process refused.
const LockFile = "leasehold.lock"

// ErrDataDirInUse is the cause of LockDataDir's refusal (errors.Is).
var ErrDataDirInUse = errors.New("data dir in use")

// DataLock is a process's exclusive hold on a data dir.
type DataLock struct {
	f *os.File
}

// LockDataDir takes the data dir dir (creating it, 0700) for this process:
// an exclusive flock on dir/leasehold.lock, held until Release or the
// process's end. Two nodes on one catalog would each undo the other's
// writes (one drops the indexes the other's peer sync reads), so it is
// taken before anything else in the dir is opened. Errors: conflict when
// another process holds it (the message names the dir and the holder's
// pid), unavailable when the dir cannot be used.
func LockDataDir(dir string) (*DataLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, dirError(dir, err)
	}
	if err := checkDirOwner(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	// Never through a link: a link planted here by whoever can write the
	// dir would have this process (root, say, running restore) truncate
	// and write the file it points to.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "data dir %s: %s is a symbolic link; leasehold follows no link there: remove it", dir, LockFile)
	}
	if err != nil {
		return nil, dirError(dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, leasehold.Wrap(leasehold.KindConflict, ErrDataDirInUse,
				"data dir %s is in use by another leasehold process (%s): stop it, or give this one another --data", dir, holder(f))
		}
		return nil, dirError(dir, err)
	}
	// The holder's pid, for the message of the next one refused. Written
	// after the lock is ours, so it never overwrites a live holder's.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, dirError(dir, err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, dirError(dir, err)
	}
	return &DataLock{f: f}, nil
}

// holder says who holds the lock f could not take: its pid, as written.
func holder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && pid > 0 {
		return fmt.Sprintf("pid %d", pid)
	}
	// Taken a moment ago, its pid not written yet.
	return "pid unknown"
}

// Release ends the hold; the file stays for the next process.
func (l *DataLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// statDir is dir's file info and, where the system has them, its owner
// and mode bits (nil elsewhere: nothing to check).
func statDir(dir string) (os.FileInfo, *syscall.Stat_t, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, nil, dirError(dir, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	return fi, st, nil
}

// checkDirOwner refuses a data dir another user owns: its owner can plant
// files and links in it for this process to write through. Only the
// process's own user may own it (root may run on root's dirs only).
func checkDirOwner(dir string) error {
	_, st, err := statDir(dir)
	if err != nil || st == nil {
		return err
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return leasehold.Errorf(leasehold.KindInvalid, "data dir %s is owned by uid %d, not by this process's user (uid %d): another user could plant files in it for this node to write through; chown it to uid %d, or give another --data",
			dir, st.Uid, euid, euid)
	}
	return nil
}

// CheckTokenDir refuses to keep a token at path (the admin token file:
// --admin-token-file, or <data>/admin.token) when the file's directory
// is owned by another user than this process's or root, or when users
// other than its owner can write it (without the sticky bit, which keeps
// them from renaming or removing this process's files). Whoever can write
// the directory can replace the token file with one holding a token of
// their choosing, which this node then takes as its admin token at its
// next start, or swap it between a rotation's write and rename. The
// rotation's <file>.tmp is opened without following links and only when
// new (replaceFile), so a link planted there only fails the rotation;
// this check refuses the directory itself, as LockDataDir refuses a data
// dir another user owns. Root's directories are taken: root can read
// and write every file anyway. Errors: invalid (the message names the
// directory, its owner or mode, and what to do), unavailable (it cannot
// be read).
func CheckTokenDir(path string) error {
	dir := filepath.Dir(path)
	fi, st, err := statDir(dir)
	if err != nil || st == nil {
		return err
	}
	if euid := os.Geteuid(); int(st.Uid) != euid && st.Uid != 0 {
		return leasehold.Errorf(leasehold.KindInvalid, "the admin token's directory %s is owned by uid %d, not by this process's user (uid %d) or root: that user could replace the token file with a token of their choosing; chown it to uid %d, or keep the token in a directory of uid %d's",
			dir, st.Uid, euid, euid, euid)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return leasehold.Errorf(leasehold.KindInvalid, "the admin token's directory %s can be written by other users (mode %#o): they could replace the token file with a token of their choosing; chmod go-w it, or keep the token in a directory only its owner writes",
			dir, fi.Mode().Perm())
	}
	return nil
}
