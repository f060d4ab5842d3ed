package web

import (
	"sync"
	"time"
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
	entryTakeover    = "takeover"
	entryRangeFailed = "range_failed"
	entryRangeRetry  = "range_retried"
	entryQuarantine  = "quarantine"
	entryAdminWrite  = "admin_write"
)

// timelineEntry is one line of the operator's log as the dashboard shows
// it: when, what kind, the group it concerns ("" for none), who (admin,
// or the worker node's name) and from where, and what happened.
type timelineEntry struct {
	At     time.Time
	Kind   string
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
