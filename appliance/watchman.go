package appliance

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Watchman tells what is stuck from what is only waiting (DESIGN rule 9):
// a leased range not heartbeaten within its bound, a holder gone quiet, a
// failed range, a node not seen, an old snapshot on a group in work are
// findings; planned work waiting for a free worker is backlog, never a
// finding.
type Watchman struct {
	db     *store.DB
	now    func() time.Time
	bounds store.FindingBounds

	// The backlog counts every planned range of a lane (about 90 ms a lane
	// at a million planned ranges), so pollers share a recent count.
	backlogMu sync.Mutex
	backlog   leasehold.Backlog
	backlogAt time.Time // wall time of the count, zero before the first
	backlogOn time.Time // the node's time of the count
}

// Now is the time on the node's clock.
func (w *Watchman) Now() time.Time { return w.now() }

// Report is the watchman's answer.
type Report struct {
	Stuck   []leasehold.Finding `json:"stuck"`
	Backlog leasehold.Backlog   `json:"backlog"`
}

// FindingKinds are every kind of finding, in the order they are shown.
var FindingKinds = []string{
	leasehold.FindingRangeStale, leasehold.FindingLeaseQuiet, leasehold.FindingRangeFailed,
	leasehold.FindingNodeUnseen, leasehold.FindingSnapshotOld, leasehold.FindingWindowUnreadable, leasehold.FindingFlapping,
}

// Report computes the findings, newest first across kinds, and the
// backlog. Errors: unavailable, internal.
func (w *Watchman) Report(ctx context.Context) (Report, error) {
	now := w.now()
	f, err := w.db.Findings(ctx, now, w.bounds)
	if err != nil {
		return Report{}, err
	}
	// Newest first: what went wrong last is what the operator is most
	// likely chasing; ties keep the store's kind order.
	sort.SliceStable(f, func(i, j int) bool { return f[i].Since.After(f[j].Since) })
	b, err := w.db.Backlog(ctx, now)
	if err != nil {
		return Report{}, err
	}
	return Report{Stuck: f, Backlog: b}, nil
}

// RecentReport is Report with a backlog counted at most maxAge ago (on
// the wall clock and the node's): for pages and scrapes that poll every
// few seconds. The findings
// are always fresh. Errors: unavailable, internal.
func (w *Watchman) RecentReport(ctx context.Context, maxAge time.Duration) (Report, error) {
	f, err := w.db.Findings(ctx, w.now(), w.bounds)
	if err != nil {
		return Report{}, err
	}
	sort.SliceStable(f, func(i, j int) bool { return f[i].Since.After(f[j].Since) })
	b, err := w.recentBacklog(ctx, maxAge)
	return Report{Stuck: f, Backlog: b}, err
}

// Counts are the findings by kind (every kind present, uncapped) and the
// backlog counted at most maxAge ago, for the metrics gauges. Errors:
// unavailable, internal.
func (w *Watchman) Counts(ctx context.Context, maxAge time.Duration) (map[string]int64, leasehold.Backlog, error) {
	c, err := w.db.FindingCounts(ctx, w.now(), w.bounds)
	if err != nil {
		return nil, leasehold.Backlog{}, err
	}
	b, err := w.recentBacklog(ctx, maxAge)
	return c, b, err
}

func (w *Watchman) recentBacklog(ctx context.Context, maxAge time.Duration) (leasehold.Backlog, error) {
	w.backlogMu.Lock()
	defer w.backlogMu.Unlock()
	now := w.now()
	// Fresh enough on both clocks: a test that moves the node's clock
	// sees the move at once.
	if !w.backlogAt.IsZero() && time.Since(w.backlogAt) < maxAge && now.Sub(w.backlogOn) < maxAge && !now.Before(w.backlogOn) {
		return w.backlog, nil
	}
	b, err := w.db.Backlog(ctx, now)
	if err != nil {
		return b, err
	}
	w.backlog, w.backlogAt, w.backlogOn = b, time.Now(), now
	return b, nil
}
