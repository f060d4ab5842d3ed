package binaries

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NZBWriter writes the NZB of each release that has one (USENET.md
// "NZB") under Dir: Dir/<group>/<release key>.nzb, NZB 1.1, written to a
// temporary name, synced and renamed, so a reader never sees half of one.
//
// A worker killed between the two leaves its temporary file behind. The
// name carries the writing process's id (.nzb-<pid>-*), so the first
// write into a group's directory removes those of processes that are
// gone, and never one another worker sharing the directory is writing.
type NZBWriter struct {
	Dir string

	mu    sync.Mutex
	swept map[string]bool // group directories already swept
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
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("binaries: --nzb %s cannot be written: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return &NZBWriter{Dir: dir}, nil
}

// NZBPath is where a release's NZB goes, relative to the NZB directory.
func NZBPath(group, key string) string { return group + "/" + key + ".nzb" }

// Write writes the NZB of each update's release that is complete or has
// a file written incomplete, and sets the release's NZB to its path. A
// release that is neither (a file written incomplete before a takeover
// was completed by its replay) has its NZB removed, so the NZBs are
// those of its last records, as one uninterrupted pass leaves them.
func (n *NZBWriter) Write(updates []Update) error {
	for i := range updates {
		u := &updates[i]
		if u.FilesOnly {
			continue // the release's home group's window writes its NZB
		}
		due := u.Release.Complete
		for _, f := range u.Files {
			due = due || !f.Complete
		}
		if !safeGroup(u.Release.Group) {
			return fmt.Errorf("binaries: group %q cannot name a directory", u.Release.Group)
		}
		rel := NZBPath(u.Release.Group, u.Release.Key)
		if !due || len(u.Files) == 0 {
			if err := os.Remove(filepath.Join(n.Dir, filepath.FromSlash(rel))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		if err := n.write(filepath.Join(n.Dir, filepath.FromSlash(rel)), NZB(u.Release, u.Files)); err != nil {
			return err
		}
		u.Release.NZB = &rel
	}
	return nil
}

func (n *NZBWriter) write(path string, body []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	n.sweep(dir)
	tmp, err := os.CreateTemp(dir, fmt.Sprintf("%s%d-*", nzbTempPrefix, os.Getpid()))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// nzbTempPrefix starts the name of an NZB being written, before the
// writer's process id.
const nzbTempPrefix = ".nzb-"

// sweep removes, once per directory, the temporary NZBs of writers whose
// process is gone (killed before their rename). A failure to list or
// remove leaves them: they are hidden files, and the next start tries
// again.
func (n *NZBWriter) sweep(dir string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.swept[dir] {
		return
	}
	if n.swept == nil {
		n.swept = map[string]bool{}
	}
	n.swept[dir] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := tempWriter(e.Name())
		if ok && pid != os.Getpid() && !processAlive(pid) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

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

// NZB is the NZB 1.1 document of a release's files: one <file> a file
// (by file counter, then name), its segments by part number.
func NZB(r Release, files []File) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?>` + "\n")
	b.WriteString(`<!DOCTYPE nzb PUBLIC "-//newzBin//DTD NZB 1.1//EN" "http://www.newzbin.com/DTD/nzb/nzb-1.1.dtd">` + "\n")
	b.WriteString(`<nzb xmlns="http://www.newzbin.com/DTD/2003/nzb">` + "\n")
	b.WriteString(` <head>` + "\n" + `  <meta type="title">` + esc(r.Name) + `</meta>` + "\n" + ` </head>` + "\n")
	for _, f := range sortedFiles(files) {
		if len(f.Segments) == 0 {
			continue
		}
		date := "0"
		if t, err := time.Parse(time.RFC3339, f.Posted); err == nil {
			date = strconv.FormatInt(t.Unix(), 10)
		}
		fmt.Fprintf(&b, ` <file poster="%s" date="%s" subject="%s">`+"\n", esc(f.Poster), date, esc(f.Subject))
		b.WriteString("  <groups>\n")
		for _, g := range f.Groups {
			b.WriteString("   <group>" + esc(g) + "</group>\n")
		}
		b.WriteString("  </groups>\n  <segments>\n")
		for _, s := range f.Segments {
			id := strings.TrimSuffix(strings.TrimPrefix(s.MessageID, "<"), ">")
			fmt.Fprintf(&b, `   <segment bytes="%d" number="%d">%s</segment>`+"\n", s.Bytes, s.Number, esc(id))
		}
		b.WriteString("  </segments>\n </file>\n")
	}
	b.WriteString("</nzb>\n")
	return b.Bytes()
}

// sortedFiles orders a release's files by file counter, then name, then
// key.
func sortedFiles(files []File) []File {
	out := append([]File(nil), files...)
	num := func(f File) int {
		if f.File == nil {
			return -1
		}
		return *f.File
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0; j-- {
			a, b := out[j-1], out[j]
			if num(a) < num(b) || num(a) == num(b) && (a.Name < b.Name || a.Name == b.Name && a.Key <= b.Key) {
				break
			}
			out[j-1], out[j] = b, a
		}
	}
	return out
}

// esc escapes text for XML, dropping characters XML 1.0 cannot hold.
func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF {
			return r
		}
		return -1
	}, s)))
	return b.String()
}
