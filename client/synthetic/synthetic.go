// Package synthetic is the built-in source and window of `leasehold
// worker`: a stand-in for a news server whose groups' articles have
// deterministic headers, and a window that carries real state from range to
// range, so that a run with crashes and takeovers can be checked against
// one uninterrupted pass.
//
// The window is idempotent per id: it remembers which ids it has seen, so
// ids replayed after a takeover change nothing, and its digest does not
// depend on the order ranges arrive in (history planned later comes in
// below ids already seen). Two windows of a group are equal exactly when
// they saw the same ids.
package synthetic

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/leasehold/leasehold"
)

// Header is the overview header of one synthetic article.
type Header struct {
	ID        int64
	MessageID string
	Subject   string
	From      string
	Bytes     int64
	Lines     int64
}

// posters is the small population of authors, so that per-poster counts
// are a meaningful part of the window.
var posters = []string{
	"alice@example.org", "bob@example.net", "carol@example.com", "dave@example.org",
	"erin@example.net", "frank@example.com", "grace@example.org", "heidi@example.net",
	"ivan@example.com", "judy@example.org", "mallory@example.net", "niaj@example.com",
	"olivia@example.org", "peggy@example.net", "rupert@example.com", "sybil@example.org",
}

// Article returns the header of article id of group, and false for an id
// with no article (expired or cancelled, about one in 32), as a real group
// has. The same group and id always give the same header.
func Article(group string, id int64) (Header, bool) {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], uint64(id))
	h := sha256.New()
	h.Write([]byte(group))
	h.Write([]byte{0})
	h.Write(key[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if sum[0]&31 == 0 {
		return Header{}, false
	}
	size := 2000 + int64(binary.BigEndian.Uint32(sum[4:8])%500000)
	return Header{
		ID:        id,
		MessageID: fmt.Sprintf("<%s.%d@%s>", hex.EncodeToString(sum[8:16]), id, group),
		Subject:   fmt.Sprintf("[%d/%d] %s - %q yEnc", 1+sum[2]%50, 50, group, hex.EncodeToString(sum[16:20])),
		From:      posters[int(sum[1])%len(posters)],
		Bytes:     size,
		Lines:     size / 128,
	}, true
}

// Span is the ids Lo..Hi inclusive.
type Span struct{ Lo, Hi int64 }

// Window is the state a worker carries through a group: which ids it has
// seen, how many headers and bytes, the headers per poster and a digest of
// every header. Its zero value is not ready: use NewWindow.
type Window struct {
	Group string
	// Spans are the ids seen, with or without an article: sorted, disjoint
	// and not adjacent.
	Spans   []Span
	Headers int64
	Bytes   int64
	Posters map[string]int64
	// Digest sums the sha-256 of every header seen, as four 64-bit lanes
	// added modulo 2⁶⁴: any missing, extra or different header changes it,
	// and the order ids arrive in does not.
	Digest [4]uint64
}

// NewWindow returns the empty window of group.
func NewWindow(group string) *Window {
	return &Window{Group: group, Posters: map[string]int64{}}
}

// Seen reports whether id is in the window already.
func (w *Window) Seen(id int64) bool {
	i := sort.Search(len(w.Spans), func(i int) bool { return w.Spans[i].Hi >= id })
	return i < len(w.Spans) && w.Spans[i].Lo <= id
}

// Add takes article id into the window, once: it reports whether the id
// was new and whether it has an article (new or not).
func (w *Window) Add(id int64) (added, article bool) {
	if !w.mark(id) {
		_, ok := Article(w.Group, id)
		return false, ok
	}
	h, ok := Article(w.Group, id)
	if !ok {
		return true, false
	}
	w.Headers++
	w.Bytes += h.Bytes
	w.Posters[h.From]++
	sum := sha256.Sum256(fmt.Appendf(nil, "%d\t%s\t%s\t%s\t%d\t%d", h.ID, h.MessageID, h.Subject, h.From, h.Bytes, h.Lines))
	for i := range w.Digest {
		w.Digest[i] += binary.BigEndian.Uint64(sum[8*i:])
	}
	return true, true
}

// mark puts id into Spans and reports whether it was not there.
func (w *Window) mark(id int64) bool {
	n := len(w.Spans)
	// Ids come in order nearly always: extend the last span.
	if n > 0 && w.Spans[n-1].Hi+1 == id {
		w.Spans[n-1].Hi = id
		return true
	}
	i := sort.Search(n, func(i int) bool { return w.Spans[i].Hi >= id-1 })
	switch {
	case i < n && w.Spans[i].Lo <= id && id <= w.Spans[i].Hi:
		return false
	case i < n && w.Spans[i].Hi == id-1:
		w.Spans[i].Hi = id
		if i+1 < n && w.Spans[i+1].Lo == id+1 {
			w.Spans[i].Hi = w.Spans[i+1].Hi
			w.Spans = slices.Delete(w.Spans, i+1, i+2)
		}
	case i < n && w.Spans[i].Lo == id+1:
		w.Spans[i].Lo = id
	default:
		w.Spans = slices.Insert(w.Spans, i, Span{id, id})
	}
	return true
}

// Next is the first id after the window's lowest run of seen ids: the
// resume point of a window filled in id order. It is 0 for an empty window.
func (w *Window) Next() int64 {
	if len(w.Spans) == 0 {
		return 0
	}
	return w.Spans[0].Hi + 1
}

// Equal reports whether w and o are the same window.
func (w *Window) Equal(o *Window) bool {
	return w.Group == o.Group && slices.Equal(w.Spans, o.Spans) && w.Headers == o.Headers &&
		w.Bytes == o.Bytes && maps.Equal(w.Posters, o.Posters) && w.Digest == o.Digest
}

// String summarises the window for people.
func (w *Window) String() string {
	ids := int64(0)
	for _, s := range w.Spans {
		ids += s.Hi - s.Lo + 1
	}
	return fmt.Sprintf("%d ids in %d spans, %d headers, %d bytes, %d posters, digest %s",
		ids, len(w.Spans), w.Headers, w.Bytes, len(w.Posters), w.digestHex()[:16])
}

func (w *Window) digestHex() string {
	var b [32]byte
	for i, v := range w.Digest {
		binary.BigEndian.PutUint64(b[8*i:], v)
	}
	return hex.EncodeToString(b[:])
}

// windowFile is the saved form of a window.
type windowFile struct {
	Version int              `json:"version"`
	Group   string           `json:"group"`
	Spans   [][2]int64       `json:"spans"`
	Headers int64            `json:"headers"`
	Bytes   int64            `json:"bytes"`
	Posters map[string]int64 `json:"posters"`
	Digest  string           `json:"digest"`
}

// Save writes the window as JSON.
func (w *Window) Save(out io.Writer) error {
	f := windowFile{Version: 1, Group: w.Group, Headers: w.Headers, Bytes: w.Bytes, Posters: w.Posters, Digest: w.digestHex()}
	f.Spans = make([][2]int64, len(w.Spans))
	for i, s := range w.Spans {
		f.Spans[i] = [2]int64{s.Lo, s.Hi}
	}
	return json.NewEncoder(out).Encode(f)
}

// Load replaces the window with one Save wrote. A window of another group
// or a malformed one is refused and leaves w as it was.
func (w *Window) Load(in io.Reader) error {
	var f windowFile
	if err := json.NewDecoder(in).Decode(&f); err != nil {
		return fmt.Errorf("load window: %w", err)
	}
	if f.Version != 1 {
		return fmt.Errorf("load window: unknown version %d", f.Version)
	}
	if w.Group != "" && f.Group != w.Group {
		return fmt.Errorf("load window: snapshot of group %q, not %q", f.Group, w.Group)
	}
	d, err := hex.DecodeString(f.Digest)
	if err != nil || len(d) != 32 {
		return fmt.Errorf("load window: bad digest %q", f.Digest)
	}
	spans := make([]Span, len(f.Spans))
	for i, s := range f.Spans {
		spans[i] = Span{s[0], s[1]}
		if s[0] > s[1] || i > 0 && spans[i-1].Hi+1 >= s[0] {
			return fmt.Errorf("load window: spans out of order at %d", i)
		}
	}
	w.Group, w.Spans, w.Headers, w.Bytes = f.Group, spans, f.Headers, f.Bytes
	w.Posters = f.Posters
	if w.Posters == nil {
		w.Posters = map[string]int64{}
	}
	for i := range w.Digest {
		w.Digest[i] = binary.BigEndian.Uint64(d[8*i:])
	}
	return nil
}

// Uninterrupted is the window of group over ids lo..hi filled in one pass:
// what every run over the same ranges must end with.
func Uninterrupted(group string, lo, hi int64) *Window {
	w := NewWindow(group)
	for id := lo; id <= hi; id++ {
		w.Add(id)
	}
	return w
}

// Source feeds a window the synthetic articles of a range.
type Source struct {
	// Rate is how many ids a second one Index call takes, to make the
	// work last like real network reads; 0 or less is as fast as it goes.
	Rate float64
}

// batch is how many ids go between progress reports and pace checks.
const batch = 64

// Index takes ids r.Next..r.End into w, reporting progress(next, headers)
// every batch of ids: every id below next is in the window, and headers
// counts the articles of the range found since r.Next, replayed ones too. It stops with the context's
// error as soon as ctx ends.
func (s Source) Index(ctx context.Context, w *Window, r leasehold.Range, progress func(next, headers int64)) error {
	start := time.Now()
	headers := int64(0)
	from := max(r.Next, r.Start)
	for id := from; id <= r.End; id++ {
		if _, ok := w.Add(id); ok {
			headers++
		}
		if done := id - from + 1; done%batch == 0 || id == r.End {
			if progress != nil {
				progress(id+1, headers)
			}
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
			if s.Rate > 0 {
				due := start.Add(time.Duration(float64(done) / s.Rate * float64(time.Second)))
				if err := sleepUntil(ctx, due); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
		return nil
	}
}
