package binaries

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// windowFile is the saved form of a window.
type windowFile struct {
	Version         int              `json:"version"`
	Group           string           `json:"group"`
	ReleaseWindow   int64            `json:"release_window_s"`
	MaxDistance     int64            `json:"max_distance"`
	MaxOpen         int              `json:"max_open"`
	IncompleteAfter int64            `json:"incomplete_after"`
	Read            [][2]int64       `json:"read"`
	Top             int64            `json:"top"`
	Newest          int64            `json:"newest"`
	Missing         [][2]int64       `json:"missing"`
	Counts          map[string]int64 `json:"counts"`
	Files           []fileState      `json:"files"`
	Releases        []releaseState   `json:"releases"`
}

// counts are the window's counters by name, for its saved form.
func (w *Window) counts() map[string]*int64 {
	return map[string]*int64{"headers": &w.Headers, "not_files": &w.NotFiles, "completed": &w.Completed, "expired": &w.Expired,
		"incomplete": &w.Incomplete, "copies": &w.Copies, "undecodable": &w.Undecodable, "retried": &w.Retried, "lost": &w.Lost,
		"blacklisted": &w.Blacklisted}
}

// windowVersion is the version Save writes: 3 keys releases by their
// identity and posted time (2 by subject and group, 1 kept no files).
const windowVersion = 3

// Save writes the window as JSON, its files and releases in key order,
// so equal windows save to equal bytes.
func (w *Window) Save(out io.Writer) error {
	f := windowFile{Version: windowVersion, Group: w.Group, ReleaseWindow: w.windowSeconds(), MaxDistance: w.MaxDistance, MaxOpen: w.MaxOpen,
		IncompleteAfter: w.IncompleteAfter, Top: w.Top, Newest: w.Newest, Counts: map[string]int64{}}
	f.Read = make([][2]int64, len(w.Read))
	for i, s := range w.Read {
		f.Read[i] = [2]int64{s.Lo, s.Hi}
	}
	for n, tries := range w.Missing {
		f.Missing = append(f.Missing, [2]int64{n, int64(tries)})
	}
	slices.SortFunc(f.Missing, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	for k, v := range w.counts() {
		f.Counts[k] = *v
	}
	f.Files = make([]fileState, 0, len(w.files))
	for _, o := range w.files {
		f.Files = append(f.Files, *o)
	}
	slices.SortFunc(f.Files, func(a, b fileState) int { return cmp.Compare(a.Key, b.Key) })
	f.Releases = make([]releaseState, 0, len(w.releases))
	for _, r := range w.releases {
		f.Releases = append(f.Releases, *r)
	}
	slices.SortFunc(f.Releases, func(a, b releaseState) int { return cmp.Compare(a.Key, b.Key) })
	return json.NewEncoder(out).Encode(f)
}

// Load replaces the window with one Save wrote. A window of another group,
// of another version or a malformed one is refused and leaves w as it was.
func (w *Window) Load(in io.Reader) error {
	var f windowFile
	data, err := io.ReadAll(in)
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err != nil {
		return fmt.Errorf("binaries: load window: %w", err)
	}
	if f.Version == 1 || f.Version == 2 {
		var v1 windowV1
		if err := json.Unmarshal(data, &v1); err != nil {
			return fmt.Errorf("binaries: load window: %w", err)
		}
		return w.loadOld(f, v1)
	}
	if f.Version != windowVersion {
		return fmt.Errorf("binaries: load window: version %d, this worker reads versions 1 to %d", f.Version, windowVersion)
	}
	if w.Group != "" && f.Group != w.Group {
		return fmt.Errorf("binaries: load window: the window of group %q, not %q", f.Group, w.Group)
	}
	read := make([]Span, len(f.Read))
	for i, s := range f.Read {
		read[i] = Span{s[0], s[1]}
		if s[0] > s[1] || i > 0 && read[i-1].Hi+1 >= s[0] {
			return fmt.Errorf("binaries: load window: read spans out of order at %d", i)
		}
	}
	files := make(map[string]*fileState, len(f.Files))
	for i := range f.Files {
		o := &f.Files[i]
		if o.Key == "" || files[o.Key] != nil || len(o.Groups) == 0 || o.Parts != len(o.Segments) || len(o.Dates) != len(o.Segments) {
			return fmt.Errorf("binaries: load window: file %d is not sound", i)
		}
		files[o.Key] = o
	}
	releases := make(map[string]*releaseState, len(f.Releases))
	open := map[string][]string{}
	for i := range f.Releases {
		r := &f.Releases[i]
		if r.Key == "" || releases[r.Key] != nil || r.First > r.Latest {
			return fmt.Errorf("binaries: load window: release %d is not sound", i)
		}
		open[r.identity()] = append(open[r.identity()], r.Key)
		for _, fk := range r.Files {
			if files[fk] == nil || files[fk].Release != r.Key {
				return fmt.Errorf("binaries: load window: release %d names a file it does not hold", i)
			}
		}
		releases[r.Key] = r
	}
	for k, fs := range files {
		if releases[fs.Release] == nil {
			return fmt.Errorf("binaries: load window: file %s has no release", k)
		}
	}
	missing := make(map[int64]int, len(f.Missing))
	for _, m := range f.Missing {
		missing[m[0]] = int(m[1])
	}
	nw := Window{Group: f.Group, ReleaseWindow: time.Duration(f.ReleaseWindow) * time.Second, MaxDistance: f.MaxDistance, MaxOpen: f.MaxOpen,
		IncompleteAfter: f.IncompleteAfter, Read: read, Top: f.Top, Newest: f.Newest, Missing: missing, files: files, releases: releases,
		open: open, Rules: w.Rules}
	for k, p := range nw.counts() {
		*p = f.Counts[k]
	}
	*w = nw
	return nil
}

// windowV1 is what version 1 (before files and releases) adds to
// windowFile: its counts and open files. Version 2 has its counts in
// windowFile's and its files there too.
type windowV1 struct {
	Headers   int64             `json:"headers"`
	NotFiles  int64             `json:"not_files"`
	Completed int64             `json:"completed"`
	Expired   int64             `json:"expired"`
	Open      []json.RawMessage `json:"open"`
}

// loadOld takes a window saved by version 1 (before files and releases)
// or 2 (releases keyed by subject and group): its spans read and counts
// go on; its files, keyed in a form this version no longer makes, are
// let go, and those not yet written counted expired (their later parts
// start files of their own, written incomplete). Like Load, it changes
// nothing when refused.
func (w *Window) loadOld(f windowFile, v1 windowV1) error {
	read := make([]Span, len(f.Read))
	for i, s := range f.Read {
		read[i] = Span{s[0], s[1]}
		if s[0] > s[1] || i > 0 && read[i-1].Hi+1 >= s[0] {
			return fmt.Errorf("binaries: load window: read spans out of order at %d", i)
		}
	}
	if w.Group != "" && f.Group != w.Group {
		return fmt.Errorf("binaries: load window: the window of group %q, not %q", f.Group, w.Group)
	}
	nw := NewWindow(f.Group)
	nw.MaxDistance, nw.MaxOpen, nw.Read, nw.Top = f.MaxDistance, f.MaxOpen, read, f.Top
	if w.IncompleteAfter > 0 {
		nw.IncompleteAfter = w.IncompleteAfter
	}
	if w.ReleaseWindow > 0 {
		nw.ReleaseWindow = w.ReleaseWindow
	}
	nw.Rules = w.Rules
	if f.Version == 1 {
		nw.Headers, nw.NotFiles, nw.Completed = v1.Headers, v1.NotFiles, v1.Completed
		nw.Expired = v1.Expired + int64(len(v1.Open))
	} else {
		for k, p := range nw.counts() {
			*p = f.Counts[k]
		}
		for _, o := range f.Files {
			if !o.Complete && !o.Written {
				nw.Expired++
			}
		}
	}
	*w = *nw
	return nil
}
