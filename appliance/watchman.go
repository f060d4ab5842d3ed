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
	// fleet may know of troubles the catalog does not hold (a stuck
	// outbox): a fleet that has them implements Troubled.
	fleet Fleet

	// Pollers share a recent backlog. Its counts are tallies now and its
	// ages a seek a lane, so this only spares the dashboard's polls those
	// reads.
	backlogMu sync.Mutex
	backlog   leasehold.Backlog
	backlogAt time.Time // wall time of the count, zero before the first
	backlogOn time.Time // the node's time of the count
}

// Now is the time on the node's clock.
func (w *Watchman) Now() time.Time { return w.now() }

// Report is the watchman's answer, as GET /findings sends it.
type Report = leasehold.Findings

// FindingKinds are every kind of finding, in the order they are shown.
var FindingKinds = []leasehold.FindingKind{
	leasehold.FindingRangeStale, leasehold.FindingLeaseQuiet, leasehold.FindingRangeFailed,
	leasehold.FindingNodeUnseen, leasehold.FindingSnapshotOld, leasehold.FindingWindowUnreadable, leasehold.FindingFlapping,
	leasehold.FindingNoWorkerForKind, leasehold.FindingSourceUnreadable, leasehold.FindingPeerSyncStuck,
}

// Troubled is a Fleet that can be in trouble of its own, outside the
// catalog: a peer sync whose outbox cannot be published.
type Troubled interface {
	// Troubles are the fleet's findings at now; none when all is well.
	Troubles(now time.Time) []leasehold.Finding
}

// troubles are the fleet's own findings, none for a fleet without any.
func (w *Watchman) troubles(now time.Time) []leasehold.Finding {
	if t, ok := w.fleet.(Troubled); ok {
		return t.Troubles(now)
	}
	return nil
}

// Report computes the findings, newest first across kinds, and the
// backlog. Errors: unavailable, internal.
func (w *Watchman) Report(ctx context.Context) (Report, error) {
	now := w.now()
	f, err := w.db.Findings(ctx, now, w.bounds)
	if err != nil {
		return Report{}, err
	}
	f = append(f, w.troubles(now)...)
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
	now := w.now()
	f, err := w.db.Findings(ctx, now, w.bounds)
	if err != nil {
		return Report{}, err
	}
	f = append(f, w.troubles(now)...)
	sort.SliceStable(f, func(i, j int) bool { return f[i].Since.After(f[j].Since) })
	b, err := w.recentBacklog(ctx, maxAge)
	return Report{Stuck: f, Backlog: b}, err
}

// Gauges are what the metrics show as gauges: the findings by kind
// (every kind present, uncapped), the backlog, the catalog's tallies
// (ranges by status, groups by state) and the worker nodes by state.
type Gauges struct {
	Findings map[leasehold.FindingKind]int64
	Backlog  leasehold.Backlog
	Tallies  leasehold.Tallies
	Nodes    map[string]int64
}

// Gauges reads the gauges, with a backlog counted at most maxAge ago.
// None counts the catalog: the tallies are kept as it is written, the
// findings count what is held or registered past a bound, the backlog's
// ages are one index seek a lane. Errors: unavailable, internal.
func (w *Watchman) Gauges(ctx context.Context, maxAge time.Duration) (Gauges, error) {
	var g Gauges
	var err error
	now := w.now()
	if g.Findings, err = w.db.FindingCounts(ctx, now, w.bounds); err != nil {
		return g, err
	}
	for _, t := range w.troubles(now) {
		g.Findings[t.Kind]++
	}
	if g.Tallies, err = w.db.Tallies(ctx); err != nil {
		return g, err
	}
	if g.Nodes, err = w.db.NodeStates(ctx, now, w.bounds.NodeUnseen); err != nil {
		return g, err
	}
	g.Backlog, err = w.recentBacklog(ctx, maxAge)
	return g, err
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
