package web

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
)

// The dashboard's timeline: the operator's log (activity.go) as the
// overview shows it, newest first. Every line the log writes for a
// takeover, a range failure, a quarantine or an admin write is also an
// entry here, written at the same place, so the two never disagree.
//
// It is a ring in memory (the last timelineSize entries), not a table,
// on purpose:
//   - admin writes are logged once answered, refused ones too (a 409
//     guarded write, a 404): those have no transaction to share, so a
//     table "written in the same transaction" could not hold them, and a
//     second write of its own would queue one more write to the single
//     writer for every range failure, when a failure storm already keeps
//     it busiest;
//   - the durable record is the log line itself, which the service
//     manager keeps (journald, a log shipper); the timeline is the view
//     of the recent ones for someone at the dashboard. A restart empties
//     it, and the overview says since when it holds entries.
//
// Each node of a fleet shows what its own API saw, and the ranges its own
// writes failed at the attempt limit whatever caused them (a claim lost),
// as its log does.

// timelineSize bounds the entries kept; the overview shows them
// timelinePage at a time, newest first, below the counts and the chart,
// so the page keeps its height however busy the node is.
const (
	timelineSize = 500
	timelinePage = 10
)

// Entry kinds, one a kind of line in the operator's log.
const (
	entryTakeover    leasehold.TimelineKind = "takeover"
	entryRangeFailed leasehold.TimelineKind = "range_failed"
	entryRangeRetry  leasehold.TimelineKind = "range_retried"
	entryQuarantine  leasehold.TimelineKind = "quarantine"
	entryAdminWrite  leasehold.TimelineKind = "admin_write"
)

// timelineEntry is one line of the operator's log as the dashboard shows
// it: when, what kind, the group it concerns ("" for none), who (admin,
// or the worker node's name) and from where, and what happened.
type timelineEntry struct {
	At     time.Time
	Kind   leasehold.TimelineKind
	Group  string
	Who    string
	Remote string
	Detail string
	// Bad marks what went wrong (a failure, a quarantine, a refused
	// write), for the page to colour.
	Bad bool
}

// timeline is the ring of entries; safe for the server's goroutines.
type timeline struct {
	mu    sync.Mutex
	ring  []timelineEntry
	next  int  // where the next entry goes
	full  bool // the ring has wrapped
	since time.Time
}

func newTimeline(now time.Time) *timeline {
	return &timeline{ring: make([]timelineEntry, timelineSize), since: now}
}

func (t *timeline) add(e timelineEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring[t.next] = e
	t.next = (t.next + 1) % len(t.ring)
	if t.next == 0 {
		t.full = true
	}
}

// page is up to n entries, newest first, after skipping the newest skip;
// more says whether older ones are kept past them.
func (t *timeline) page(skip, n int) (out []timelineEntry, more bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.next
	if t.full {
		kept = len(t.ring)
	}
	skip = max(skip, 0)
	out = make([]timelineEntry, 0, max(min(n, kept-skip), 0))
	for i := skip + 1; i <= kept && len(out) < n; i++ {
		out = append(out, t.ring[(t.next-i+len(t.ring))%len(t.ring)])
	}
	return out, skip+len(out) < kept
}

// held says how many entries are kept and since when: the node's start
// until the ring first wraps, then its oldest entry.
func (t *timeline) held() (int, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return t.next, t.since
	}
	return len(t.ring), t.ring[t.next].At
}

// TimelineFeed is the node's log handler: it hands every record to the
// handler that writes the log, and copies the records marked with
// leasehold.TimelineAttr (the fleet's member and adoption lines) onto the
// dashboard's timeline, so those reach the dashboard the way they reach
// the log, with no wire from the fleet to the web server. A server whose
// Options.Logger writes through a TimelineFeed is the one it feeds (the
// first such); marked records before that server is made are only
// written.
type TimelineFeed struct {
	next  slog.Handler
	to    *atomic.Pointer[timeline]
	attrs []slog.Attr // the logger's own (With), read for the entry too
	// grouped: the logger's attributes go under a group, where a marker
	// is no top-level attribute; its records are only written.
	grouped bool
}

// NewTimelineFeed writes through next and feeds the timeline of the
// server made with it.
func NewTimelineFeed(next slog.Handler) *TimelineFeed {
	return &TimelineFeed{next: next, to: &atomic.Pointer[timeline]{}}
}

// feed makes t the timeline fed, unless one already is.
func (f *TimelineFeed) feed(t *timeline) { f.to.CompareAndSwap(nil, t) }

// Enabled is the writing handler's.
func (f *TimelineFeed) Enabled(ctx context.Context, l slog.Level) bool {
	return f.next.Enabled(ctx, l)
}

// Handle writes r, and puts it on the timeline when it is marked. A
// marked record below the log's level is neither: the log and the
// timeline do not disagree.
func (f *TimelineFeed) Handle(ctx context.Context, r slog.Record) error {
	if t := f.to.Load(); t != nil && !f.grouped {
		if e, ok := f.entry(r); ok {
			t.add(e)
		}
	}
	return f.next.Handle(ctx, r)
}

// WithAttrs is a feed over the writing handler's WithAttrs.
func (f *TimelineFeed) WithAttrs(as []slog.Attr) slog.Handler {
	g := *f
	g.next = f.next.WithAttrs(as)
	g.attrs = append(slices.Clip(f.attrs), as...)
	return &g
}

// WithGroup is a feed over the writing handler's WithGroup.
func (f *TimelineFeed) WithGroup(name string) slog.Handler {
	g := *f
	g.next = f.next.WithGroup(name)
	g.grouped = g.grouped || name != ""
	return &g
}

// timelineDetailMax bounds an entry's detail: a log line's attributes
// come from the fleet, not from this node's API.
const timelineDetailMax = 512

// entry is r's timeline entry when r is marked: the marker's value is
// its kind, its group and peer attributes name the group and who, the
// message and the other attributes are the detail, and a warning or
// worse is bad.
func (f *TimelineFeed) entry(r slog.Record) (timelineEntry, bool) {
	e := timelineEntry{At: r.Time, Who: fleetCaller, Bad: r.Level >= slog.LevelWarn}
	var detail strings.Builder
	detail.WriteString(r.Message)
	sep := ": "
	see := func(a slog.Attr) bool {
		switch a.Key {
		case leasehold.TimelineAttr:
			e.Kind = leasehold.TimelineKind(a.Value.String())
		case "group":
			e.Group = a.Value.String()
		case "peer":
			e.Who = a.Value.String()
		default:
			fmt.Fprintf(&detail, "%s%s=%s", sep, a.Key, a.Value)
			sep = ", "
		}
		return true
	}
	for _, a := range f.attrs {
		see(a)
	}
	r.Attrs(see)
	if e.Kind == "" {
		return timelineEntry{}, false
	}
	e.Detail = detail.String()
	if len(e.Detail) > timelineDetailMax {
		e.Detail = e.Detail[:timelineDetailMax] + "…"
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return e, true
}
