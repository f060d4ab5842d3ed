package appliance

import (
	"context"
	"sort"
	"time"

	"leasehold"
	"leasehold/store"
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
}

// Report is the watchman's answer.
type Report struct {
	Stuck   []leasehold.Finding `json:"stuck"`
	Backlog leasehold.Backlog   `json:"backlog"`
}

// Report computes the findings, newest first, and the backlog.
func (w *Watchman) Report(ctx context.Context) (Report, error) {
	now := w.now()
	f, err := w.db.Findings(ctx, now, w.bounds)
	if err != nil {
		return Report{}, err
	}
	sort.SliceStable(f, func(i, j int) bool { return f[i].Since.After(f[j].Since) })
	b, err := w.db.Backlog(ctx, now)
	if err != nil {
		return Report{}, err
	}
	return Report{Stuck: f, Backlog: b}, nil
}
