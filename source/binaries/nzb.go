package binaries

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// NZBWriter writes the NZB of each release that has one (USENET.md
// "NZB") under Dir: Dir/<group>/<release name>.nzb, NZB 1.1, made
// without a name and linked in (a new one) or written to a temporary
// name and renamed (one replaced), so a reader never sees half of one,
// and synced at the next Flush.
//
// Writing stays linear in what is read: a release's NZB is written when
// it first becomes due (complete, or a file of it written incomplete),
// and a later change only marks it for the next Flush of the group that
// read it, which writes it once however many batches changed it. Flush
// must come before the group's window is saved: a window saved past an
// NZB it changed would leave that NZB behind after a takeover.
//
// Names are made safe for file systems and kept apart within a group's
// directory by a suffix of the release key; which key holds which name is
// kept in the directory's .names file (a line "key<TAB>name" a claim), so
// a release keeps its name across restarts and takeovers.
//
// A worker killed between writing a temporary name and renaming it
// leaves the file behind (a file without a name goes with the
// process). The name carries the writing process's id (.nzb-<pid>-*),
// so the first write into a group's directory removes those of
// processes that are gone, and never one another worker sharing the
// directory is writing.
//
// An NZB costs four system calls (create, write, link or rename, close),
// and the new names of one Write one more (their lines appended to the
// names file, kept open): a group's directory is made, listed and swept
// once, when its names are first read.
//
// The NZBs themselves, and the names' lines before them, are written by
// a goroutine of the writer's, in the order Write and Flush hand them
// over, while the reading goes on: making a file can cost far more than
// reading the release (a file system without a journal looks over every
// inode deleted in the last minutes before it gives one out). Write
// decides the names and sets each record's nzb at once; Wait waits until
// every NZB handed over is written and starts syncing them in the
// background, and Flush waits, then syncs what that sync did not cover.
// At most
// maxQueued NZBs wait; Write waits for room beyond that. An NZB that
// fails to write fails the next Write, Wait or Flush of the group that
// read it, and every one after until the group's Reset, so its window
// never goes up past it.
type NZBWriter struct {
	Dir string

	mu      sync.Mutex
	names   map[string]*nzbNames    // by group directory
	reading map[string]*nzbReadings // by the group whose window changed them
	bytes   atomic.Int64
	files   atomic.Int64
	// temps numbers this process's temporary NZBs.
	temps atomic.Uint64

	// The NZBs handed to the writing goroutine, which runs while any
	// wait and ends when none is left. Lock order: mu, then qmu.
	qmu     sync.Mutex
	qcond   *sync.Cond // the queue shrank or the goroutine ended
	queue   []nzbJob
	writing bool
	// failed is the first error of an NZB of each reading group, until
	// the group's Reset.
	failed map[string]error
	// body is the writing goroutine's NZB, its buffer kept.
	body []byte
	// noTmpfile is set once a file without a name (O_TMPFILE) could not
	// be made or linked in: every NZB goes by a temporary name after.
	noTmpfile atomic.Bool

	// What is written and not yet known durable. Lock order: mu, then
	// smu; qmu and smu are never held together.
	smu   sync.Mutex
	scond *sync.Cond // a background sync ended
	// unsynced are the group directories written since their last
	// sync, each with the count of dirtied when it was last written.
	unsynced map[string]uint64
	dirtied  uint64
	// syncing is set while a background sync runs (Wait starts one).
	syncing bool
}

// maxQueued bounds the NZBs waiting for the writing goroutine: the
// reading runs at most that far ahead of the writing.
const maxQueued = 512

// nzbJob is one NZB for the writing goroutine: rendered and written to
// path, or, when remove is set, path removed; or, when names is set,
// claims appended to that names file.
type nzbJob struct {
	group  string // the group whose reading made it
	path   string
	remove bool
	names  *os.File
	claims []byte
	// fresh is an NZB whose name no file had when it was handed over.
	fresh bool
	rel   Release
	files []File
}

// nzbNames are the names claimed in a group's directory.
type nzbNames struct {
	byKey  map[string]string // release key → file name
	byName map[string]string // file name → release key
	// present are the directory's files as listed when its names were
	// read, less those removed here: a name among them that the names
	// file does not give out belongs to no release of this writer.
	present map[string]bool
	// file is the names file, open for appending, made at the first
	// claim.
	file *os.File
	// claims are the lines claimed by the Write under way, appended to
	// the file by the writing goroutine before the NZBs that bear them.
	claims []byte
}

// nzbReadings is what the reading of one group left to write.
type nzbReadings struct {
	// written are the releases whose NZB was written since the group's
	// Reset: a later change to one is deferred to Flush.
	written map[string]bool
	// pending are the releases changed since their NZB was written, by
	// path, as their last update has them.
	pending map[string]Update
}

// NewNZBWriter makes dir (0700) and proves it can be written, so a worker
// whose --nzb cannot be written stops before it leases anything.
func NewNZBWriter(dir string) (*NZBWriter, error) {
	if dir == "" {
		return nil, errors.New("binaries: --nzb names no directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("binaries: --nzb %s: %w", dir, err)
	}
	spreadGroups(dir)
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("binaries: --nzb %s cannot be written: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return &NZBWriter{Dir: dir}, nil
}

// topDirFlag is ext2/3/4's FS_TOPDIR_FL, chattr +T.
const topDirFlag = 0x00020000

// spreadGroups marks dir the top of a directory hierarchy (chattr +T)
// where the file system knows the mark (ext2/3/4): the group directories
// made in it are then placed apart, each where the disk has more free
// inodes and fewer directories than most, not beside dir among every
// temporary directory of the machine. There, on an ext4 without a
// journal, making a file passes over every inode deleted nearby in the
// last minutes, and an NZB cost up to four times the CPU. Best effort:
// elsewhere dir is left as it is.
func spreadGroups(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil || flags&topDirFlag != 0 {
		return
	}
	unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|topDirFlag))
}

// Written is the bytes and files of NZBs written so far.
func (n *NZBWriter) Written() (bytes, files int64) { return n.bytes.Load(), n.files.Load() }

// Reset forgets what reading group left to write and the names of its
// directory as known here, as a new lease of the group starts: the
// window it starts from, maybe another worker's, says what is to come.
func (n *NZBWriter) Reset(group string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// What an earlier lease handed over is on disk before the directory
	// is listed again.
	n.drain()
	n.qmu.Lock()
	delete(n.failed, group)
	n.qmu.Unlock()
	delete(n.reading, group)
	if nm := n.names[group]; nm != nil && nm.file != nil {
		nm.file.Close()
	}
	delete(n.names, group)
}

// Write writes or marks for the next Flush the NZB of each update's
// release that is complete or has a file written incomplete, and sets
// the release's NZB to its path; group is the group whose window made the
// updates. A release that is neither (a file written incomplete before a
// takeover was completed by its replay) has its NZB removed, so the NZBs
// are those of its last records, as one uninterrupted pass leaves them.
func (n *NZBWriter) Write(group string, updates []Update) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failure(group); err != nil {
		return err
	}
	rd := n.readingOf(group)
	// What this Write makes is handed over at its end, even when it
	// fails part way (what it told the sink before is on disk alike):
	// each names file's new claims first, in one write(2), then the
	// NZBs that bear them.
	var jobs []nzbJob
	var claimed []*nzbNames
	defer func() {
		for _, nm := range claimed {
			n.enqueue(nzbJob{group: group, path: nm.file.Name(), names: nm.file, claims: nm.claims})
			nm.claims = nil
		}
		for _, job := range jobs {
			n.enqueue(job)
		}
	}()
	for i := range updates {
		u := &updates[i]
		if u.FilesOnly {
			continue // the release's home group's window writes its NZB
		}
		due := u.Release.Complete
		for _, f := range u.Files {
			due = due || !f.Complete
		}
		dir := u.Release.Group
		if !safeGroup(dir) {
			return fmt.Errorf("binaries: group %q cannot name a directory", dir)
		}
		names, err := n.namesOf(dir)
		if err != nil {
			return err
		}
		if !due || len(u.Files) == 0 {
			if name, ok := names.byKey[u.Release.Key]; ok {
				delete(rd.pending, dir+"/"+name)
				jobs = append(jobs, n.remove(group, names, dir, name))
			}
			delete(rd.written, u.Release.Key)
			continue
		}
		old := names.byKey[u.Release.Key]
		had := len(names.claims)
		name, err := n.claim(dir, names, u.Release.Key, u.Release.Name)
		if err != nil {
			return err
		}
		if had == 0 && len(names.claims) > 0 {
			claimed = append(claimed, names)
		}
		rel := dir + "/" + name
		u.Release.NZB = &rel
		if rd.written[u.Release.Key] && name == old {
			rd.pending[rel] = *u
			continue
		}
		jobs = append(jobs, nzbJob{group: group, path: filepath.Join(n.Dir, dir, name), rel: u.Release, files: u.Files, fresh: !names.present[name]})
		names.present[name] = true
		rd.written[u.Release.Key] = true
		delete(rd.pending, rel)
		if old != "" && old != name {
			// Renamed (its name changed with a file that came later):
			// the old file goes, so each release has one NZB.
			delete(rd.pending, dir+"/"+old)
			jobs = append(jobs, n.remove(group, names, dir, old))
		}
	}
	return nil
}

// Flush writes the NZBs that changed since they were written by the
// reading of group, waits until every NZB handed over is written, and
// makes them and every name given out durable (syncfs): a window saved
// after a Flush never runs ahead of its NZBs, even through a power cut.
func (n *NZBWriter) Flush(group string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if rd := n.reading[group]; rd != nil {
		for _, rel := range slices.Sorted(maps.Keys(rd.pending)) {
			u := rd.pending[rel]
			n.enqueue(nzbJob{group: group, path: filepath.Join(n.Dir, filepath.FromSlash(rel)), rel: u.Release, files: u.Files})
			delete(rd.pending, rel)
		}
	}
	n.drain()
	if err := n.failure(group); err != nil {
		return err
	}
	return n.sync()
}

// Wait waits until every NZB handed over is written, and returns the
// error of group's first NZB that failed since its Reset. It does not
// wait for them to be durable, but starts syncing them in the
// background (unless a sync runs already), so that the next Flush, on
// the reading's path, has only what was written since to wait for: a
// sync writes back every file of the file system changed meanwhile,
// other processes' too, and on a busy machine that takes a second.
func (n *NZBWriter) Wait(group string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.drain()
	if err := n.failure(group); err != nil {
		return err
	}
	n.syncBehind()
	return nil
}

// Close waits until every NZB handed over is written and closes the
// names files; the writer can be used again after.
func (n *NZBWriter) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.drain()
	n.smu.Lock()
	n.waitSync()
	n.smu.Unlock()
	for dir, nm := range n.names {
		if nm.file != nil {
			nm.file.Close()
		}
		delete(n.names, dir)
	}
	n.qmu.Lock()
	defer n.qmu.Unlock()
	for _, g := range slices.Sorted(maps.Keys(n.failed)) {
		return n.failed[g]
	}
	return nil
}

// enqueue hands job to the writing goroutine, started when none runs,
// after waiting while maxQueued wait. The caller holds n.mu.
func (n *NZBWriter) enqueue(job nzbJob) {
	n.dirty(filepath.Dir(job.path))
	n.qmu.Lock()
	defer n.qmu.Unlock()
	if n.qcond == nil {
		n.qcond = sync.NewCond(&n.qmu)
	}
	for len(n.queue) >= maxQueued {
		n.qcond.Wait()
	}
	n.queue = append(n.queue, job)
	if !n.writing {
		n.writing = true
		go n.writeQueued()
	}
}

// writeQueued writes the queue's NZBs in order until it is empty. After
// a group's first failure, its later NZBs are left unwritten: its window
// will not go up past them, and a takeover writes them again.
func (n *NZBWriter) writeQueued() {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	for len(n.queue) > 0 {
		job := n.queue[0]
		n.queue[0] = nzbJob{}
		n.queue = n.queue[1:]
		n.qcond.Broadcast()
		failed := n.failed[job.group] != nil
		n.qmu.Unlock()
		var err error
		switch {
		case failed:
		case job.names != nil:
			if _, err = job.names.Write(job.claims); err != nil {
				err = fmt.Errorf("binaries: claiming NZB names in %s: %w", job.path, err)
			}
		case job.remove:
			if err = os.Remove(job.path); errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		default:
			n.body = appendNZB(n.body[:0], job.rel, job.files)
			if job.fresh {
				err = n.writeNew(job.path, n.body)
			} else {
				err = n.write(job.path, n.body)
			}
		}
		n.qmu.Lock()
		if err != nil {
			if n.failed == nil {
				n.failed = map[string]error{}
			}
			n.failed[job.group] = err
		}
	}
	n.queue = nil
	n.writing = false
	n.qcond.Broadcast()
}

// drain waits until the writing goroutine has written everything handed
// over.
func (n *NZBWriter) drain() {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	for n.writing {
		n.qcond.Wait()
	}
}

// failure is the error of group's first NZB that failed since its Reset.
func (n *NZBWriter) failure(group string) error {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	if err := n.failed[group]; err != nil {
		return fmt.Errorf("binaries: an NZB of %s was not written: %w", group, err)
	}
	return nil
}

// readingOf is group's reading state, made when missing.
func (n *NZBWriter) readingOf(group string) *nzbReadings {
	if n.reading == nil {
		n.reading = map[string]*nzbReadings{}
	}
	rd := n.reading[group]
	if rd == nil {
		rd = &nzbReadings{written: map[string]bool{}, pending: map[string]Update{}}
		n.reading[group] = rd
	}
	return rd
}

// namesFile is the file of a group directory's claimed names.
const namesFile = ".names"

// namesOf is the names claimed in a group directory, read from its names
// file when not known here. Reading them makes the directory, lists its
// files and removes the temporary NZBs of writers that are gone, once
// for every NZB written there until the next Reset.
func (n *NZBWriter) namesOf(dir string) (*nzbNames, error) {
	if nm := n.names[dir]; nm != nil {
		return nm, nil
	}
	path := filepath.Join(n.Dir, dir)
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	nm := &nzbNames{byKey: map[string]string{}, byName: map[string]string{}, present: map[string]bool{}}
	for _, e := range entries {
		if pid, ok := tempWriter(e.Name()); ok {
			// A failure to remove leaves it: it is a hidden file, and
			// the next listing tries again.
			if pid != os.Getpid() && !processAlive(pid) {
				os.Remove(filepath.Join(path, e.Name()))
			}
			continue
		}
		nm.present[e.Name()] = true
	}
	raw, err := os.ReadFile(filepath.Join(path, namesFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		key, name, ok := strings.Cut(line, "\t")
		if !ok {
			continue // a line cut short by a crash: its claim is made again
		}
		if old, ok := nm.byKey[key]; ok && nm.byName[old] == key {
			delete(nm.byName, old)
		}
		nm.byKey[key], nm.byName[name] = name, key
	}
	if n.names == nil {
		n.names = map[string]*nzbNames{}
	}
	n.names[dir] = nm
	return nm, nil
}

// claim is the file name of release key named name in dir: the one it
// holds when its name has not changed, else name made safe, with a suffix
// of the key when another release (or a file not claimed here) has it.
// A new claim is appended to the names file before any NZB bears it.
func (n *NZBWriter) claim(dir string, nm *nzbNames, key, name string) (string, error) {
	base := safeName(name)
	if held, ok := nm.byKey[key]; ok && nzbBase(held, key) == base {
		return held, nil
	}
	var file string
	for _, cand := range []string{base + ".nzb", base + "." + key[:min(8, len(key))] + ".nzb", base + "." + key + ".nzb"} {
		if owner, ok := nm.byName[cand]; ok && owner != key {
			continue
		}
		if nm.present[cand] && nm.byName[cand] != key {
			continue // a file this directory's names do not give out
		}
		file = cand
		break
	}
	if file == "" {
		return "", fmt.Errorf("binaries: no free NZB name for release %s (%q) in %s", key, name, dir)
	}
	if nm.file == nil {
		f, err := os.OpenFile(filepath.Join(n.Dir, dir, namesFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return "", err
		}
		nm.file = f
	}
	// Appended by the writing goroutine, a Write's claims in one
	// write(2) (O_APPEND): a kill cuts at most the last line short, and
	// reading skips a line without its tab.
	nm.claims = append(append(append(append(nm.claims, key...), '\t'), file...), '\n')
	if old, ok := nm.byKey[key]; ok {
		delete(nm.byName, old)
	}
	nm.byKey[key], nm.byName[file] = file, key
	return file, nil
}

// nzbBase is the safe release name a claimed file name was made from.
func nzbBase(file, key string) string {
	base := strings.TrimSuffix(file, ".nzb")
	for _, suffix := range []string{"." + key, "." + key[:min(8, len(key))]} {
		if b, ok := strings.CutSuffix(base, suffix); ok {
			return b
		}
	}
	return base
}

// safeName is a release name as a file name on common file systems: no
// path separators, control characters or characters Windows refuses, no
// leading dot (the directory's own files start with one), not a device
// name of Windows, at most 200 bytes; "release" when nothing is left.
func safeName(name string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			return -1
		case strings.ContainsRune(`/\:*?"<>|`, r):
			return '_'
		}
		return r
	}, name)
	s = strings.TrimRight(strings.TrimSpace(s), ". ")
	s = strings.TrimLeft(s, ". ")
	for len(s) > 200 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	s = strings.TrimRight(s, ". ")
	if s == "" {
		return "release"
	}
	stem, _, _ := strings.Cut(strings.ToUpper(s), ".")
	switch stem {
	case "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9",
		"LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9":
		s = "_" + s
	}
	return s
}

// remove is the job that has the writing goroutine remove a group
// directory's NZB file name, gone or not, after what it was handed
// before.
func (n *NZBWriter) remove(group string, nm *nzbNames, dir, name string) nzbJob {
	delete(nm.present, name)
	return nzbJob{group: group, path: filepath.Join(n.Dir, dir, name), remove: true}
}

// write writes body to path through a temporary file renamed over it, in
// four system calls made directly (create, write, close, rename): an
// *os.File would add the poller's and the cleanup's. The directory is
// made and swept by namesOf. Only the writing goroutine calls it.
func (n *NZBWriter) write(path string, body []byte) error {
	dir := filepath.Dir(path)
	var tmp string
	var fd int
	for {
		tmp = filepath.Join(dir, nzbTempPrefix+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(n.temps.Add(1), 10))
		var err error
		fd, err = unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) { // else left by an earlier process of this id: the next number
			return &fs.PathError{Op: "open", Path: tmp, Err: err}
		}
	}
	err := writeAll(fd, body)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, path)
	}
	if err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("binaries: writing NZB %s: %w", path, err)
	}
	n.bytes.Add(int64(len(body)))
	n.files.Add(1)
	return nil
}

// writeNew writes body to path, a name no file had when it was handed
// over, as a file without a name (O_TMPFILE) linked in whole: the same
// four system calls as write (open, write, link, close), but one
// directory entry made where write makes two and removes one, and a
// kill leaves no temporary file. A file system without O_TMPFILE, no
// /proc, or a file there after all goes by write.
func (n *NZBWriter) writeNew(path string, body []byte) error {
	if n.noTmpfile.Load() {
		return n.write(path, body)
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		n.noTmpfile.Store(true)
		return n.write(path, body)
	}
	defer unix.Close(fd)
	if err := writeAll(fd, body); err != nil {
		return fmt.Errorf("binaries: writing NZB %s: %w", path, err)
	}
	// linkat(AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH; the file's
	// link in /proc needs nothing.
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	switch {
	case err == nil:
	case errors.Is(err, unix.EEXIST):
		return n.write(path, body)
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EXDEV):
		n.noTmpfile.Store(true)
		return n.write(path, body)
	default:
		return fmt.Errorf("binaries: writing NZB %s: %w", path, err)
	}
	n.bytes.Add(int64(len(body)))
	n.files.Add(1)
	return nil
}

// writeAll writes body to fd whole, retrying a short or interrupted
// write.
func writeAll(fd int, body []byte) error {
	for len(body) > 0 {
		w, err := unix.Write(fd, body)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		body = body[w:]
	}
	return nil
}

// dirty notes a directory written since the last sync.
func (n *NZBWriter) dirty(dir string) {
	n.smu.Lock()
	defer n.smu.Unlock()
	if n.unsynced == nil {
		n.unsynced = map[string]uint64{}
	}
	n.dirtied++
	n.unsynced[dir] = n.dirtied
}

// sync makes what was written since the last sync durable: one syncfs a
// file system written (a directory each, in practice one), not an fsync
// an NZB, which cost a release's NZB more than all its reading. A sync
// Wait started is waited for first, so that this one has less left to
// write back. The caller holds n.mu and has drained the queue.
func (n *NZBWriter) sync() error {
	n.smu.Lock()
	n.waitSync()
	dirs := maps.Clone(n.unsynced)
	n.smu.Unlock()
	return n.syncDirs(dirs)
}

// syncBehind starts syncing in the background what was written so far,
// unless a sync runs already. Its failure leaves the directories
// unsynced: the next Flush syncs them again, and says so. The caller
// holds n.mu and has drained the queue.
func (n *NZBWriter) syncBehind() {
	n.smu.Lock()
	defer n.smu.Unlock()
	if n.syncing || len(n.unsynced) == 0 {
		return
	}
	if n.scond == nil {
		n.scond = sync.NewCond(&n.smu)
	}
	n.syncing = true
	dirs := maps.Clone(n.unsynced)
	go func() {
		n.syncDirs(dirs)
		n.smu.Lock()
		n.syncing = false
		n.scond.Broadcast()
		n.smu.Unlock()
	}()
}

// waitSync waits until no background sync runs. The caller holds n.smu.
func (n *NZBWriter) waitSync() {
	if n.scond == nil {
		n.scond = sync.NewCond(&n.smu)
	}
	for n.syncing {
		n.scond.Wait()
	}
}

// syncDirs syncs the file system of each directory of dirs (taken from
// unsynced) and forgets those not written again since: what they had
// then is durable.
func (n *NZBWriter) syncDirs(dirs map[string]uint64) error {
	for _, dir := range slices.Sorted(maps.Keys(dirs)) {
		err := syncfs(dir)
		if errors.Is(err, fs.ErrNotExist) {
			// Gone with its NZBs: the NZB that failed there fails
			// its own group, not the others.
			err = nil
		}
		if err != nil {
			return fmt.Errorf("binaries: syncing the NZBs of %s: %w", dir, err)
		}
		n.smu.Lock()
		if n.unsynced[dir] == dirs[dir] {
			delete(n.unsynced, dir)
		}
		n.smu.Unlock()
	}
	return nil
}

// syncfs syncs the file system dir is on.
func syncfs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// nzbTempPrefix starts the name of an NZB being written, before the
// writer's process id.
const nzbTempPrefix = ".nzb-"

// tempWriter is the process id in a temporary NZB's name.
func tempWriter(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, nzbTempPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

// processAlive reports whether a process of that id runs on this host.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// safeGroup reports whether a group name is a plain directory name.
func safeGroup(g string) bool {
	if g == "" || g == "." || g == ".." || len(g) > 255 {
		return false
	}
	for _, c := range g {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".+-_", c)) {
			return false
		}
	}
	return true
}
