package appliance

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// Minute is one minute of throughput: ranges finished and their headers.
type Minute = store.Minute

// Overview is what the dashboard's first page shows: the catalog's
// counts, the fleet, the watchman's report and the last hour's
// throughput.
type Overview struct {
	Totals      store.Totals
	NodesLive   int64 // seen within the lease TTL and not paused
	NodesPaused int64
	Nodes       int64
	Report      Report
	Throughput  []Minute
	Now         time.Time
}

// Overview reads the overview; the backlog may be up to backlogAge old.
// Errors: unavailable, internal.
func (a *Appliance) Overview(ctx context.Context, backlogAge time.Duration) (Overview, error) {
	o := Overview{Now: a.Config.NowFunc()}
	var err error
	if o.Totals, err = a.db.Totals(ctx); err != nil {
		return o, err
	}
	nodes, err := a.Coordinator.Nodes(ctx)
	if err != nil {
		return o, err
	}
	for _, n := range nodes {
		o.Nodes++
		switch {
		case n.Paused:
			o.NodesPaused++
		case n.LastSeenAt != nil && o.Now.Sub(*n.LastSeenAt) <= a.Config.LeaseTTL:
			o.NodesLive++
		}
	}
	if o.Report, err = a.Watchman.RecentReport(ctx, backlogAge); err != nil {
		return o, err
	}
	// The backlog is every planned range: one count serves both.
	o.Totals.SetPlanned(o.Report.Backlog.Planned)
	o.Throughput, err = a.db.Throughput(ctx, o.Now, 60)
	return o, err
}

// GroupRow is one group in the dashboard's table: its range counts and
// its lease, or its owner's when it is a peer's.
type GroupRow = store.GroupRow

// GroupRows lists groups for the dashboard's table: names starting with
// prefix, ids above after, by id. Errors: unavailable, internal.
func (a *Appliance) GroupRows(ctx context.Context, prefix string, after int64, limit int) ([]GroupRow, error) {
	return a.db.GroupRows(ctx, prefix, after, limit)
}

// GroupRowsIn lists groups in a state for the dashboard's table (one of
// store.RowFilters: failing, quarantined, held, idle), ids above after, by
// id, each read by an index that holds only that state, and where the
// next page starts (0: none). Errors: invalid (the filter), unavailable,
// internal.
func (a *Appliance) GroupRowsIn(ctx context.Context, state string, after int64, limit int) ([]GroupRow, int64, error) {
	return a.db.GroupRowsIn(ctx, state, after, limit)
}

// Tallies are the catalog's counts kept as it is written: ranges by
// status, groups by state. Errors: unavailable, internal.
func (a *Appliance) Tallies(ctx context.Context) (leasehold.Tallies, error) {
	return a.db.Tallies(ctx)
}

// PeerHold is a peer's group as its owner holds it, as folded here.
type PeerHold = store.PeerHold

// GroupPage is one group as its dashboard page shows it.
type GroupPage struct {
	leasehold.GroupDetail
	Ranges   []leasehold.Range // the first MaxRangesDrawn, by id
	Failed   []leasehold.Range
	Complete bool // every range of the group is in Ranges
	// Owner is the owner's hold of a peer's group, nil for this node's
	// own: a peer's group is leased and snapshotted at its owner.
	Owner *PeerHold
}

// MaxRangesDrawn bounds the ranges one group page draws.
const MaxRangesDrawn = 5000

// GroupPage reads a group, its lease, snapshot, ranges and failed ranges,
// and its owner's hold when it is a peer's. Errors: not found,
// unavailable, internal.
func (a *Appliance) GroupPage(ctx context.Context, name string) (GroupPage, error) {
	var p GroupPage
	var err error
	if p.GroupDetail, err = a.db.GroupDetail(ctx, name); err != nil {
		return p, err
	}
	if p.Ranges, err = a.db.Ranges(ctx, p.ID, "", 0, MaxRangesDrawn); err != nil {
		return p, err
	}
	var total int64
	for _, n := range p.GroupDetail.Ranges {
		total += n
	}
	p.Complete = int64(len(p.Ranges)) == total
	if p.Failed, err = a.db.Ranges(ctx, p.ID, leasehold.StatusFailed, 0, 100); err != nil {
		return p, err
	}
	p.Owner, err = a.db.PeerHold(ctx, p.ID)
	return p, err
}

// PeerNode is a worker node registered at a peer, as folded here.
type PeerNode = store.PeerNode

// PeerNodes lists the worker nodes registered at this node's peers, by
// peer, then name. Errors: unavailable, internal.
func (a *Appliance) PeerNodes(ctx context.Context) ([]PeerNode, error) {
	ns, err := a.db.PeerNodes(ctx)
	for i := range ns {
		a.Coordinator.withState(&ns[i].Node)
	}
	return ns, err
}
