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
	"time"

	"github.com/leasehold/leasehold/source/nntp"
)

// Segment is one part of a file: its part number, the article that
// carries it, its Message-ID and size.
type Segment struct {
	Part      int    `json:"part"`
	Article   int64  `json:"article"`
	MessageID string `json:"message_id"`
	Bytes     int64  `json:"bytes"`
}

// File is a file being assembled (open, in the window) or complete.
type File struct {
	Group string `json:"group"`
	// Key is the file's identity: a digest of its group, normalised
	// subject and poster. A repost of a file has the same key.
	Key     string `json:"key"`
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Poster  string `json:"poster"`
	// Posted is the date of the first part read (RFC 3339 when the
	// article's Date parses, else as the server gave it).
	Posted   string    `json:"posted"`
	Parts    int       `json:"parts"`
	Bytes    int64     `json:"bytes"`
	Segments []Segment `json:"segments"`
}

// last is the highest article number of the file's parts.
func (f *File) last() int64 {
	var n int64
	for _, s := range f.Segments {
		n = max(n, s.Article)
	}
	return n
}

// Span is the article numbers Lo..Hi inclusive.
type Span struct{ Lo, Hi int64 }

// Defaults of a window's ageing.
const (
	// DefaultMaxDistance is how many article numbers past a file's last
	// part it stays open.
	DefaultMaxDistance = 200000
	// DefaultMaxOpen is the most files open at once.
	DefaultMaxOpen = 200000
)

// Window is the state a Usenet worker carries through a group: the open
// files, the spans of article numbers read, and counts. Feed it overview
// headers in article order with Add; the zero value is not ready, use
// NewWindow.
type Window struct {
	Group string
	// MaxDistance and MaxOpen age open files: a file whose last part is
	// more than MaxDistance articles below the newest article read is
	// dropped, and so are the files with the oldest last parts when more
	// than MaxOpen are open. Both are checked whenever the article number
	// crosses a multiple of sweepEvery, so where a batch starts or ends
	// changes nothing.
	MaxDistance int64
	MaxOpen     int
	// Read is the article numbers read: sorted, disjoint, not adjacent.
	Read []Span
	// Top is the highest article number read.
	Top  int64
	open map[string]*File
	// Counts since the window began.
	Headers, NotFiles, Completed, Expired int64
}

// NewWindow returns the empty window of group with the default ageing.
func NewWindow(group string) *Window {
	return &Window{Group: group, MaxDistance: DefaultMaxDistance, MaxOpen: DefaultMaxOpen, open: map[string]*File{}}
}

// Open is how many files are open.
func (w *Window) Open() int { return len(w.open) }

// OpenParts is how many parts the open files hold.
func (w *Window) OpenParts() int {
	n := 0
	for _, f := range w.open {
		n += len(f.Segments)
	}
	return n
}

// Key is the key of a file of group with the normalised subject and
// poster: 32 hex digits.
func Key(group, normalised, poster string) string {
	h := sha256.New()
	for _, s := range []string{group, normalised, poster} {
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

// Add reads the headers of articles lo..hi (in article order; articles
// missing from the span are expired or cancelled) into the window and
// returns the files they completed, in the order they completed. Articles
// already read change nothing, so a span read again after a takeover
// returns nothing it returned before the window's snapshot.
func (w *Window) Add(lo, hi int64, headers []nntp.Header) []File {
	var done []File
	for _, h := range headers {
		if h.Number < lo || h.Number > hi || w.Covered(h.Number) {
			continue
		}
		w.sweepTo(h.Number)
		w.Top = max(w.Top, h.Number)
		w.Headers++
		if f := w.take(h); f != nil {
			done = append(done, *f)
		}
	}
	w.mark(lo, hi)
	return done
}

// sweepEvery is the grid of article numbers at which open files are aged.
func (w *Window) sweepEvery() int64 { return max(w.MaxDistance/4, 1) }

// sweepTo ages the open files when article n is in a later cell of the
// sweep grid than the newest article read.
func (w *Window) sweepTo(n int64) {
	e := w.sweepEvery()
	if n/e <= w.Top/e {
		return
	}
	cutoff := (n/e)*e - w.MaxDistance
	var left []*File
	for k, f := range w.open {
		if f.last() < cutoff {
			delete(w.open, k)
			w.Expired++
			continue
		}
		left = append(left, f)
	}
	if over := len(left) - w.MaxOpen; w.MaxOpen > 0 && over > 0 {
		slices.SortFunc(left, func(a, b *File) int {
			return cmp.Or(cmp.Compare(a.last(), b.last()), cmp.Compare(a.Key, b.Key))
		})
		for _, f := range left[:over] {
			delete(w.open, f.Key)
			w.Expired++
		}
	}
}

// take adds one header to its file and returns the file if that completed
// it.
func (w *Window) take(h nntp.Header) *File {
	r := ReadSubject(h.Subject); p, ok := Part{Name: r.Name, Normalised: r.FileSubject, Number: r.Part, Total: r.Total}, r.IsPart
	if !ok || p.Number == 0 {
		w.NotFiles++
		return nil
	}
	key := Key(w.Group, p.Normalised, h.From)
	f := w.open[key]
	if f == nil {
		f = &File{Group: w.Group, Key: key, Name: p.Name, Subject: p.Normalised, Poster: h.From, Posted: posted(h.Date), Parts: p.Total}
		w.open[key] = f
	}
	for _, s := range f.Segments {
		if s.Part == p.Number {
			return nil // a part seen already: the first one read is kept
		}
	}
	f.Segments = append(f.Segments, Segment{Part: p.Number, Article: h.Number, MessageID: h.MessageID, Bytes: h.Bytes})
	f.Bytes += h.Bytes
	if len(f.Segments) < f.Parts {
		return nil
	}
	delete(w.open, key)
	slices.SortFunc(f.Segments, func(a, b Segment) int { return cmp.Compare(a.Part, b.Part) })
	w.Completed++
	return f
}

func posted(date string) string {
	t, err := mail.ParseDate(date)
	if err != nil {
		return date
	}
	return t.UTC().Format(time.RFC3339)
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
	Version     int        `json:"version"`
	Group       string     `json:"group"`
	MaxDistance int64      `json:"max_distance"`
	MaxOpen     int        `json:"max_open"`
	Read        [][2]int64 `json:"read"`
	Top         int64      `json:"top"`
	Headers     int64      `json:"headers"`
	NotFiles    int64      `json:"not_files"`
	Completed   int64      `json:"completed"`
	Expired     int64      `json:"expired"`
	Open        []File     `json:"open"`
}

// Save writes the window as JSON, its open files in key order, so equal
// windows save to equal bytes.
func (w *Window) Save(out io.Writer) error {
	f := windowFile{Version: 1, Group: w.Group, MaxDistance: w.MaxDistance, MaxOpen: w.MaxOpen, Top: w.Top,
		Headers: w.Headers, NotFiles: w.NotFiles, Completed: w.Completed, Expired: w.Expired}
	f.Read = make([][2]int64, len(w.Read))
	for i, s := range w.Read {
		f.Read[i] = [2]int64{s.Lo, s.Hi}
	}
	f.Open = make([]File, 0, len(w.open))
	for _, o := range w.open {
		f.Open = append(f.Open, *o)
	}
	slices.SortFunc(f.Open, func(a, b File) int { return cmp.Compare(a.Key, b.Key) })
	return json.NewEncoder(out).Encode(f)
}

// Load replaces the window with one Save wrote. A window of another group
// or a malformed one is refused and leaves w as it was.
func (w *Window) Load(in io.Reader) error {
	var f windowFile
	if err := json.NewDecoder(in).Decode(&f); err != nil {
		return fmt.Errorf("binaries: load window: %w", err)
	}
	if f.Version != 1 {
		return fmt.Errorf("binaries: load window: unknown version %d", f.Version)
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
	open := make(map[string]*File, len(f.Open))
	for i := range f.Open {
		o := &f.Open[i]
		if o.Key == "" || open[o.Key] != nil || o.Parts < 1 || len(o.Segments) >= o.Parts {
			return fmt.Errorf("binaries: load window: open file %d is not sound", i)
		}
		open[o.Key] = o
	}
	*w = Window{Group: f.Group, MaxDistance: f.MaxDistance, MaxOpen: f.MaxOpen, Read: read, Top: f.Top, open: open,
		Headers: f.Headers, NotFiles: f.NotFiles, Completed: f.Completed, Expired: f.Expired}
	return nil
}

// OpenFiles returns copies of the open files in key order.
func (w *Window) OpenFiles() []File {
	out := make([]File, 0, len(w.open))
	for _, f := range w.open {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b File) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

type Part struct {
	Name       string
	Normalised string
	Number     int
	Total      int
}
