package binaries

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/mail"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/source/nntp"
)

// Segment is one part of a file: its part number, the article that
// carries it (in the file's group), its Message-ID and size.
type Segment struct {
	Number    int    `json:"number"`
	Article   int64  `json:"article"`
	MessageID string `json:"message_id"`
	Bytes     int64  `json:"bytes"`
}

// File is the record of a file (USENET.md "Records").
type File struct {
	Type    string `json:"type"`
	Key     string `json:"key"`
	Release string `json:"release"`
	// Group is the first of Groups in byte order, Groups every group its
	// articles were posted to (from Xref).
	Group  string   `json:"group"`
	Groups []string `json:"groups"`
	Poster string   `json:"poster"`
	// Subject is the lowest part's subject as posted, RFC 2047 decoded.
	Subject string `json:"subject"`
	Name    string `json:"name"`
	// File of Files is the file counter, nil when the subject has none.
	File  *int `json:"file"`
	Files *int `json:"files"`
	// Parts is the parts seen, Total the parts announced (nil for k/0).
	Parts    int    `json:"parts"`
	Total    *int   `json:"total"`
	Complete bool   `json:"complete"`
	Bytes    int64  `json:"bytes"`
	Posted   string `json:"posted"`
	// Segments are ordered by part number.
	Segments []Segment `json:"segments"`
}

// Release is the record of a release: one poster's files of one post.
type Release struct {
	Type          string   `json:"type"`
	Key           string   `json:"key"`
	Name          string   `json:"name"`
	Poster        string   `json:"poster"`
	Group         string   `json:"group"`
	Groups        []string `json:"groups"`
	Files         int      `json:"files"`
	TotalFiles    *int     `json:"total_files"`
	CompleteFiles int      `json:"complete_files"`
	Complete      bool     `json:"complete"`
	Bytes         int64    `json:"bytes"`
	Posted        string   `json:"posted"`
	NZB           *string  `json:"nzb"`
}

// Update is what a batch of headers changed of one release: its record,
// every file of it as it stands (an NZB lists them all) and which of them
// changed (the file records to write).
//
// FilesOnly is set when the release's record is not this window's to
// write: its home group, the lowest group in byte order that holds every
// file this window has of it, is another group, whose window sees all
// these files and maybe more (USENET.md rule 7). Only the changed files
// are written then, never Release or an NZB, so a release cross-posted
// over groups read in any order ends with the record its home group's
// window writes.
type Update struct {
	Release   Release
	Files     []File
	Changed   []bool
	FilesOnly bool
}

// ChangedFiles are the files of u that changed.
func (u Update) ChangedFiles() []File {
	var out []File
	for i, f := range u.Files {
		if u.Changed[i] {
			out = append(out, f)
		}
	}
	return out
}

// Span is the article numbers Lo..Hi inclusive.
type Span struct{ Lo, Hi int64 }

// Defaults of a window's ageing.
const (
	// DefaultReleaseWindow is how long after a release's last file (by
	// posted time) a file of the same identity still joins it.
	DefaultReleaseWindow = 24 * time.Hour
	// DefaultMaxDistance is how many article numbers past a release's
	// last part it is kept at least, whatever the dates say.
	DefaultMaxDistance = 200000
	// DefaultMaxOpen is the most files kept at once.
	DefaultMaxOpen = 200000
	// DefaultIncompleteAfter is how many articles past a file's last part
	// it is written incomplete.
	DefaultIncompleteAfter = 20000
	// maxMissing bounds the article numbers waiting to be asked again.
	maxMissing = 100000
)

// fileState is a file in the window.
type fileState struct {
	File
	// SubjectPart is the part whose subject Subject is (the lowest).
	SubjectPart int `json:"subject_part"`
	// Last is the highest article number of this group that carried a
	// part; Written whether a record of it was written.
	Last    int64 `json:"last"`
	Written bool  `json:"written"`
	// Dates are the winning copies' dates, by Segments.
	Dates []string `json:"dates"`
}

// releaseState is a release in the window: its identity (poster, name,
// announced file count), its files by key, the highest article number
// that carried a part of it, and the posted times (Unix seconds) of its
// earliest and latest parts.
type releaseState struct {
	Key        string   `json:"key"`
	Poster     string   `json:"poster"`
	Name       string   `json:"name"`
	TotalFiles *int     `json:"total_files"`
	Files      []string `json:"files"`
	Last       int64    `json:"last"`
	First      int64    `json:"first_posted"`
	Latest     int64    `json:"latest_posted"`
}

// identity is what a release is told apart by (rule 3): one poster, one
// release name, one announced file count.
func (r *releaseState) identity() string { return identity(r.Poster, r.Name, r.TotalFiles) }

func identity(poster, name string, files *int) string {
	n := "-"
	if files != nil {
		n = strconv.Itoa(*files)
	}
	return poster + "\x00" + name + "\x00" + n
}

// Window is the state a Usenet worker carries through a group: the files
// and releases read, the spans of article numbers read, the numbers to
// ask again, and counts. Feed it overview headers in article order with
// Add; the zero value is not ready, use NewWindow.
type Window struct {
	Group string
	// ReleaseWindow closes releases by posted time (rule 3): a file joins
	// the release of its identity whose files were posted within
	// ReleaseWindow of its own; a file posted later starts a new release
	// with a key of its own.
	ReleaseWindow time.Duration
	// Rules are the node's per-group rules (nil: none). They are not
	// saved with the window: the worker sets them from each lease.
	Rules *Rules
	// MaxDistance and MaxOpen bound memory: a release whose last file
	// was posted more than ReleaseWindow before the newest post read and
	// whose last part is more than MaxDistance articles below the newest
	// article read is dropped with its files (a date far in the future
	// closes nothing nearer than MaxDistance), and so are the releases
	// with the oldest last parts when more than MaxOpen files are kept.
	// IncompleteAfter writes a
	// file incomplete once the group was read that many articles past its
	// last part (0: only at the end of the tail). All are checked when
	// the article number crosses a grid line, so where a batch starts or
	// ends changes nothing.
	MaxDistance     int64
	MaxOpen         int
	IncompleteAfter int64
	// Read is the article numbers read: sorted, disjoint, not adjacent.
	Read []Span
	// Top is the highest article number read; Newest the latest posted
	// time read (Unix seconds).
	Top, Newest int64
	// Missing are article numbers an OVER answer skipped, with how often
	// they were asked again.
	Missing  map[int64]int
	files    map[string]*fileState
	releases map[string]*releaseState
	// open are the keys of the releases of each identity held, oldest
	// first.
	open map[string][]string
	// Counts since the window began; Blacklisted are the posts the
	// node's blacklist skipped.
	Headers, NotFiles, Completed, Expired, Incomplete, Copies, Undecodable, Retried, Lost, Blacklisted int64
}

// NewWindow returns the empty window of group with the default ageing.
func NewWindow(group string) *Window {
	return &Window{Group: group, ReleaseWindow: DefaultReleaseWindow, MaxDistance: DefaultMaxDistance, MaxOpen: DefaultMaxOpen,
		IncompleteAfter: DefaultIncompleteAfter, Missing: map[int64]int{}, files: map[string]*fileState{}, releases: map[string]*releaseState{},
		open: map[string][]string{}}
}

// Open is how many files are open (neither complete nor written).
func (w *Window) Open() int {
	n := 0
	for _, f := range w.files {
		if !f.Complete && !f.Written {
			n++
		}
	}
	return n
}

// OpenParts is how many parts the window's files hold.
func (w *Window) OpenParts() int {
	n := 0
	for _, f := range w.files {
		n += len(f.Segments)
	}
	return n
}

// digest is 32 hex digits of the parts, each ended by a NUL.
func digest(parts ...string) string {
	h := sha256.New()
	for _, s := range parts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Covered reports whether article n was read already.
func (w *Window) Covered(n int64) bool {
	i := sort.Search(len(w.Read), func(i int) bool { return w.Read[i].Hi >= n })
	return i < len(w.Read) && w.Read[i].Lo <= n
}

// changes are the files a batch changed, in the order they changed.
type changes struct {
	keys []string
	seen map[string]bool
}

func (c *changes) add(key string) {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if !c.seen[key] {
		c.seen[key] = true
		c.keys = append(c.keys, key)
	}
}

// Add reads the headers of articles lo..hi (in article order; articles
// missing from the span are expired, cancelled or skipped) into the
// window and returns the releases they changed. Articles already read
// change nothing, so a span read again after a takeover returns nothing
// it returned before the window's snapshot.
func (w *Window) Add(lo, hi int64, headers []nntp.Header) []Update {
	var ch changes
	for _, h := range headers {
		if h.Number < lo || h.Number > hi || w.Covered(h.Number) {
			continue
		}
		w.sweepTo(h.Number, &ch)
		w.Top = max(w.Top, h.Number)
		w.Headers++
		w.take(h, &ch)
	}
	w.mark(lo, hi)
	return w.updates(&ch)
}

// Skipped records the article numbers of lo..hi that an OVER answer
// skipped between the first and the last it gave, to be asked again
// (Retry). Numbers past the bound are not recorded.
func (w *Window) Skipped(lo, hi int64, headers []nntp.Header) {
	if len(headers) < 2 {
		return
	}
	got := make(map[int64]bool, len(headers))
	for _, h := range headers {
		got[h.Number] = true
	}
	for n := max(lo, headers[0].Number); n <= min(hi, headers[len(headers)-1].Number) && len(w.Missing) < maxMissing; n++ {
		if !got[n] {
			if _, ok := w.Missing[n]; !ok {
				w.Missing[n] = 0
			}
		}
	}
}

// MissingSpans are the spans of article numbers to ask again: runs of
// missing numbers less than gap apart joined (one OVER for a scatter of
// cancelled articles), at most most of them, lowest first.
func (w *Window) MissingSpans(gap int64, most int) []Span {
	ns := make([]int64, 0, len(w.Missing))
	for n := range w.Missing {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	var out []Span
	for _, n := range ns {
		if len(out) > 0 && n-out[len(out)-1].Hi <= gap {
			out[len(out)-1].Hi = n
			continue
		}
		if len(out) == most {
			break
		}
		out = append(out, Span{n, n})
	}
	return out
}

// Retry takes the headers an OVER asked again over spans gave for
// missing articles, and counts one more try for those of spans still
// missing; one asked limit times is given up (Lost).
func (w *Window) Retry(spans []Span, headers []nntp.Header, limit int) []Update {
	var ch changes
	for _, h := range headers {
		if _, ok := w.Missing[h.Number]; !ok {
			continue
		}
		delete(w.Missing, h.Number)
		w.Retried++
		w.Headers++
		w.take(h, &ch)
	}
	for n, tries := range w.Missing {
		if !slices.ContainsFunc(spans, func(s Span) bool { return s.Lo <= n && n <= s.Hi }) {
			continue
		}
		if tries+1 >= limit {
			delete(w.Missing, n)
			w.Lost++
			continue
		}
		w.Missing[n] = tries + 1
	}
	return w.updates(&ch)
}

// Flush writes every file still open as incomplete: the end of the
// group's planned tail.
func (w *Window) Flush() []Update {
	var ch changes
	keys := make([]string, 0, len(w.files))
	for k, f := range w.files {
		if !f.Complete && !f.Written {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.Incomplete++
		ch.add(k)
	}
	return w.updates(&ch)
}

// Due writes incomplete the files read IncompleteAfter articles past
// their last part and not yet written: the end of a range, so a backfill
// (ranges read downwards) writes what a forward pass would.
func (w *Window) Due() []Update {
	var ch changes
	if w.IncompleteAfter <= 0 {
		return nil
	}
	keys := make([]string, 0)
	for k, f := range w.files {
		if !f.Complete && !f.Written && f.Last < w.Top-w.IncompleteAfter {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.Incomplete++
		ch.add(k)
	}
	return w.updates(&ch)
}

// grid is the spacing of the lines at which the window is swept.
func grid(d int64, parts int64) int64 { return max(d/parts, 1) }

// sweepTo ages the window when article n is in a later cell of a sweep
// grid than the newest article read.
func (w *Window) sweepTo(n int64, ch *changes) {
	if w.IncompleteAfter > 0 {
		if e := grid(w.IncompleteAfter, 8); n/e > w.Top/e {
			cutoff := (n/e)*e - w.IncompleteAfter
			keys := make([]string, 0)
			for k, f := range w.files {
				if !f.Complete && !f.Written && f.Last < cutoff {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				w.Incomplete++
				ch.add(k)
			}
		}
	}
	e := grid(w.MaxDistance, 4)
	if n/e <= w.Top/e {
		return
	}
	cutoff := (n/e)*e - w.MaxDistance
	closed := w.Newest - w.windowSeconds()
	var left []*releaseState
	kept := 0
	for k, r := range w.releases {
		if r.Last < cutoff && r.Latest < closed {
			w.drop(k)
			continue
		}
		left = append(left, r)
		kept += len(r.Files)
	}
	if w.MaxOpen > 0 && kept > w.MaxOpen {
		slices.SortFunc(left, func(a, b *releaseState) int {
			return cmp.Or(cmp.Compare(a.Last, b.Last), cmp.Compare(a.Key, b.Key))
		})
		for _, r := range left {
			if kept <= w.MaxOpen {
				break
			}
			kept -= len(r.Files)
			w.drop(r.Key)
		}
	}
}

// drop forgets a release and its files; files never written are counted
// expired.
func (w *Window) drop(key string) {
	r := w.releases[key]
	for _, fk := range r.Files {
		if f := w.files[fk]; f != nil && !f.Complete && !f.Written {
			w.Expired++
		}
		delete(w.files, fk)
	}
	id := r.identity()
	w.open[id] = slices.DeleteFunc(w.open[id], func(k string) bool { return k == key })
	if len(w.open[id]) == 0 {
		delete(w.open, id)
	}
	delete(w.releases, key)
}

// windowSeconds is ReleaseWindow in seconds, at least one.
func (w *Window) windowSeconds() int64 {
	return max(int64(w.ReleaseWindow/time.Second), 1)
}

// take adds one header to its file.
func (w *Window) take(h nntp.Header, ch *changes) {
	if w.Rules.Blacklisted(h.From, h.Subject) {
		w.Blacklisted++
		return
	}
	groups, article := crossPosts(w.Group, h)
	rd := w.Rules.Read(groups, h.Subject)
	if rd.Undecodable {
		w.Undecodable++
	}
	if !rd.IsPart || rd.Part == 0 && rd.Total > 0 {
		w.NotFiles++
		return
	}
	date := posted(h.Date)
	at := unixOf(date)
	w.Newest = max(w.Newest, at)
	r := w.joinRelease(h.From, rd, at)
	key := digest("file", r.Key, groups[0], h.From, rd.FileSubject)
	f := w.files[key]
	if f == nil {
		f = &fileState{File: File{Type: "file", Key: key, Release: r.Key, Group: groups[0], Groups: groups, Poster: h.From,
			Subject: rd.Subject, Name: rd.Name}, SubjectPart: rd.Part}
		if rd.HasFile {
			f.File.File, f.File.Files = ptr(rd.File), ptr(rd.Files)
		}
		if rd.Total > 0 {
			f.Total = ptr(rd.Total)
		}
		w.files[key] = f
		r.Files = append(r.Files, key)
		slices.Sort(r.Files)
	}
	r.Last = max(r.Last, h.Number)
	switch {
	case at == 0: // undated: says nothing of when the release was posted
	case r.First == 0 && r.Latest == 0:
		r.First, r.Latest = at, at
	default:
		r.First, r.Latest = min(r.First, at), max(r.Latest, at)
	}
	f.Last = max(f.Last, h.Number)
	if len(groups) > len(f.Groups) {
		f.Groups, f.Group = groups, groups[0]
	}
	if rd.Part < f.SubjectPart {
		f.Subject, f.Name, f.SubjectPart = rd.Subject, rd.Name, rd.Part
	}
	seg := Segment{Number: rd.Part, Article: article, MessageID: h.MessageID, Bytes: h.Bytes}
	i, found := slices.BinarySearchFunc(f.Segments, rd.Part, func(s Segment, n int) int { return cmp.Compare(s.Number, n) })
	switch {
	case !found:
		f.Segments = slices.Insert(f.Segments, i, seg)
		f.Dates = slices.Insert(f.Dates, i, date)
		f.Bytes += seg.Bytes
		f.Parts = len(f.Segments)
		if f.Posted == "" || earlier(date, f.Posted) {
			f.Posted = date
		}
	case article < f.Segments[i].Article:
		// A second copy of a part: the lowest article number wins, so
		// every read order keeps the same one, and posted is the earliest
		// of the winning copies' dates.
		w.Copies++
		f.Bytes += seg.Bytes - f.Segments[i].Bytes
		f.Segments[i] = seg
		f.Dates[i] = date
		f.Posted = f.Dates[0]
		for _, d := range f.Dates[1:] {
			if earlier(d, f.Posted) {
				f.Posted = d
			}
		}
	default:
		w.Copies++
		return
	}
	wasComplete := f.Complete
	f.Complete = f.Total != nil && f.Parts >= *f.Total
	if f.Complete && !wasComplete {
		w.Completed++
	}
	if f.Complete || f.Written {
		ch.add(key)
	}
}

// joinRelease finds the release a post of poster read as rd, posted at
// (Unix seconds), belongs to (rule 3): the one of its identity whose
// files were posted within ReleaseWindow of it (the earliest such), else
// a new one.
//
// A new release's key is made from its identity and the start of the
// ReleaseWindow-long span of posted time (counted from the Unix epoch)
// its first post read falls in. Two releases of one identity are more
// than ReleaseWindow apart, so they never share a span and never a key;
// the same release read again (a replay, a resumed window) gets the same
// key; and the windows of two groups a release was cross-posted to find
// the same key from whichever of its files they read first, unless its
// posting crosses the edge of a span.
func (w *Window) joinRelease(poster string, rd Reading, at int64) *releaseState {
	var total *int
	if rd.HasFile {
		total = ptr(rd.Files)
	}
	id := identity(poster, rd.Release, total)
	span := w.windowSeconds()
	for _, k := range w.open[id] {
		// An undated post joins the oldest release of its identity; an
		// undated release (none of its posts dated) takes any post.
		r := w.releases[k]
		if at == 0 || r.Latest == 0 || at >= r.First-span && at <= r.Latest+span {
			return r
		}
	}
	start := floorDiv(at, span) * span
	key := digest("release", poster, rd.Release, strconv.Itoa(orInt(total, -1)), time.Unix(start, 0).UTC().Format(time.RFC3339))
	if r := w.releases[key]; r != nil {
		return r // cannot be (the span would have matched); never two states of one key
	}
	r := &releaseState{Key: key, Poster: poster, Name: rd.Release, TotalFiles: total, First: at, Latest: at}
	w.releases[key] = r
	w.open[id] = append(w.open[id], key)
	return r
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func orInt(p *int, or int) int {
	if p == nil {
		return or
	}
	return *p
}

// unixOf is a posted date's Unix seconds, 0 when it does not parse (or
// is the epoch itself: no Usenet post is).
func unixOf(date string) int64 {
	t, err := time.Parse(time.RFC3339, date)
	if err != nil {
		return 0
	}
	return t.Unix()
}

// updates marks the changed files written and makes the updates of their
// releases, in the order the releases first changed.
func (w *Window) updates(ch *changes) []Update {
	if len(ch.keys) == 0 {
		return nil
	}
	var order []string
	changed := map[string]bool{}
	for _, k := range ch.keys {
		f := w.files[k]
		if f == nil {
			continue
		}
		f.Written = true
		changed[k] = true
		if !slices.Contains(order, f.Release) {
			order = append(order, f.Release)
		}
	}
	out := make([]Update, 0, len(order))
	for _, rk := range order {
		r := w.releases[rk]
		u := Update{}
		for _, fk := range r.Files {
			f := w.files[fk]
			if !f.Written {
				continue // not yet a record: a part of a file still coming
			}
			c := f.File
			c.Segments = slices.Clone(f.Segments)
			c.Groups = slices.Clone(f.Groups)
			u.Files = append(u.Files, c)
			u.Changed = append(u.Changed, changed[fk])
		}
		u.Release = w.release(r)
		u.FilesOnly = w.home(r) != w.Group
		out = append(out, u)
	}
	return out
}

// home is a release's home group: the lowest group in byte order that
// holds every file the window has of it. The window's own group holds
// them all, so it is never past it; when it is another group, that
// group's window writes the release's record.
func (w *Window) home(r *releaseState) string {
	var common []string
	for i, fk := range r.Files {
		gs := w.files[fk].Groups
		if i == 0 {
			common = slices.Clone(gs)
			continue
		}
		common = slices.DeleteFunc(common, func(g string) bool { return !slices.Contains(gs, g) })
	}
	if len(common) == 0 {
		return w.Group
	}
	return slices.Min(common)
}

// release makes the record of a release from its written files.
func (w *Window) release(r *releaseState) Release {
	rel := Release{Type: "release", Key: r.Key, Poster: r.Poster, TotalFiles: r.TotalFiles}
	groups := map[string]bool{}
	announced := map[int]bool{}
	for _, fk := range r.Files {
		f := w.files[fk]
		if !f.Written {
			continue
		}
		rel.Files++
		rel.Bytes += f.Bytes
		if f.Complete {
			rel.CompleteFiles++
			if f.File.File != nil {
				announced[*f.File.File] = true
			}
		}
		for _, g := range f.Groups {
			groups[g] = true
		}
		if rel.Posted == "" || earlier(f.Posted, rel.Posted) {
			rel.Posted = f.Posted
		}
	}
	for g := range groups {
		rel.Groups = append(rel.Groups, g)
	}
	slices.Sort(rel.Groups)
	if len(rel.Groups) > 0 {
		rel.Group = rel.Groups[0]
	}
	if r.TotalFiles != nil {
		// Every announced file complete: 1..n (file 0 is the post's
		// index, not one of them).
		rel.Complete = true
		for k := 1; k <= *r.TotalFiles; k++ {
			if !announced[k] {
				rel.Complete = false
				break
			}
		}
	} else {
		rel.Complete = rel.Files > 0 && rel.CompleteFiles == rel.Files
	}
	rel.Name = r.Name
	return rel
}

// crossPosts reads an article's Xref: the groups it was posted to in byte
// order and its number in the first of them.
func crossPosts(group string, h nntp.Header) ([]string, int64) {
	fields := strings.Fields(h.Xref)
	nums := map[string]int64{}
	for _, f := range fields[min(1, len(fields)):] {
		g, n, ok := strings.Cut(f, ":")
		if v, err := strconv.ParseInt(n, 10, 64); ok && err == nil && v > 0 && g != "" {
			nums[g] = v
		}
	}
	if len(nums) == 0 {
		return []string{group}, h.Number
	}
	nums[group] = h.Number // this group's number is the one read
	groups := make([]string, 0, len(nums))
	for g := range nums {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return groups, nums[groups[0]]
}

func ptr(v int) *int { return &v }

// posted is an article's date as RFC 3339 in UTC, or as the server gave
// it when it does not parse.
func posted(date string) string {
	// The form nearly every server gives first: one parse, not the
	// dozen layouts mail.ParseDate may try.
	t, err := time.Parse("Mon, _2 Jan 2006 15:04:05 -0700", date)
	if err != nil {
		if t, err = mail.ParseDate(date); err != nil {
			return date
		}
	}
	return t.UTC().Format(time.RFC3339)
}

// earlier reports whether date a is before b (RFC 3339 strings compare
// as times; one that does not parse sorts after those that do).
func earlier(a, b string) bool {
	if utcSecond(a) && utcSecond(b) {
		return a < b // the form posted writes sorts as text
	}
	ta, ea := time.Parse(time.RFC3339, a)
	tb, eb := time.Parse(time.RFC3339, b)
	switch {
	case ea == nil && eb == nil:
		return ta.Before(tb)
	case ea == nil:
		return true
	case eb == nil:
		return false
	}
	return a < b
}

// utcSecond reports whether s has the form posted writes,
// 2006-01-02T15:04:05Z.
func utcSecond(s string) bool {
	return len(s) == 20 && s[4] == '-' && s[10] == 'T' && s[19] == 'Z'
}

// mark records lo..hi as read.
func (w *Window) mark(lo, hi int64) {
	if lo > hi {
		return
	}
	i := sort.Search(len(w.Read), func(i int) bool { return w.Read[i].Hi >= lo-1 })
	j := i
	for j < len(w.Read) && w.Read[j].Lo <= hi+1 {
		lo, hi = min(lo, w.Read[j].Lo), max(hi, w.Read[j].Hi)
		j++
	}
	w.Read = slices.Replace(w.Read, i, j, Span{lo, hi})
}

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
	// The releases of an identity oldest first, as they were made.
	for _, keys := range open {
		slices.SortFunc(keys, func(a, b string) int {
			return cmp.Or(cmp.Compare(releases[a].First, releases[b].First), cmp.Compare(a, b))
		})
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

// OpenFiles returns copies of the files not yet written, in key order.
func (w *Window) OpenFiles() []File {
	var out []File
	for _, f := range w.files {
		if !f.Complete && !f.Written {
			out = append(out, f.File)
		}
	}
	slices.SortFunc(out, func(a, b File) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
