package web

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// Doors are the node web serves, as the doors it calls through, each given
// at New. web holds no appliance: these are all it can reach.
type Doors struct {
	Holders   Holders   // the workers' calls: *appliance.Coordinator
	Admin     Admin     // the operator's reads and writes: *appliance.Coordinator
	Snapshots Snapshots // window snapshots: *appliance.Snapshots
	Reads     Reads     // the dashboard's reads and the node's health: *appliance.Appliance
	Watchman  Watchman  // findings and gauges: *appliance.Watchman
	// Config is the node's settings (lease TTL, attempts, clock, data
	// dir), as the appliance runs with them.
	Config appliance.Config
}

// Holders are the calls a worker makes on the groups and ranges it holds,
// and its own token and watermarks.
type Holders interface {
	AuthNode(ctx context.Context, token string) (appliance.NodeAuth, error)
	TTL() time.Duration
	Lease(ctx context.Context, nodeID int64) (*leasehold.Grant, error)
	NextAfter(ctx context.Context, h leasehold.GroupHolder, done *leasehold.FinishedRange) (*leasehold.Range, error)
	Heartbeat(ctx context.Context, h leasehold.GroupHolder) error
	Progress(ctx context.Context, h leasehold.RangeHolder, next int64) (leasehold.Range, error)
	Finish(ctx context.Context, h leasehold.RangeHolder, headers int64) (leasehold.Range, error)
	Fail(ctx context.Context, h leasehold.RangeHolder, text string, retry bool) (leasehold.Range, error)
	Release(ctx context.Context, h leasehold.GroupHolder) error
	ReleaseStopped(ctx context.Context, h leasehold.GroupHolder) error
	ReleaseUnreadable(ctx context.Context, h leasehold.GroupHolder, windowError string) error
	ReportSourceError(ctx context.Context, nodeID int64, name, text string) error
	RotateNodeToken(ctx context.Context, id int64) (string, error)
	Watermarks(ctx context.Context, nodeID int64, limit int) ([]leasehold.Watermarks, []string, error)
	ReportWatermarks(ctx context.Context, nodeID int64, name string, low, high int64) (int64, error)
}

// Admin is the operator's door: nodes, groups, plans, ranges and rules.
type Admin interface {
	RegisterNode(ctx context.Context, s appliance.NodeSpec) (leasehold.Node, error)
	Nodes(ctx context.Context) ([]leasehold.Node, error)
	SetPaused(ctx context.Context, id int64, paused bool, by string) (leasehold.Node, error)
	ChangeNode(ctx context.Context, id int64, ch appliance.NodeChange) (leasehold.Node, error)
	DeleteNode(ctx context.Context, id int64, force bool) error
	PutGroup(ctx context.Context, name string, s appliance.GroupSpec) (leasehold.Group, bool, error)
	Groups(ctx context.Context, after int64, limit int) ([]leasehold.Group, error)
	Group(ctx context.Context, name string) (leasehold.Group, error)
	GroupByID(ctx context.Context, id int64) (leasehold.Group, error)
	GroupDetail(ctx context.Context, name string) (leasehold.GroupDetail, error)
	PlanTail(ctx context.Context, name string, high int64) (int64, error)
	PlanHistory(ctx context.Context, name string, low int64) (int64, error)
	Ranges(ctx context.Context, group string, status leasehold.RangeStatus, after int64, limit int) ([]leasehold.Range, error)
	Retry(ctx context.Context, rangeID int64) (leasehold.Range, error)
	LiftQuarantine(ctx context.Context, name string) (leasehold.Group, error)
	PutRules(ctx context.Context, body json.RawMessage) (int64, error)
	Rules() leasehold.RuleSet
}

// Snapshots is the window snapshot store, as uploads and downloads use it.
type Snapshots interface {
	Put(ctx context.Context, u appliance.Upload) (leasehold.Snapshot, error)
	Open(ctx context.Context, groupID int64) (*os.File, *leasehold.Snapshot, error)
	UploadGroup(ctx context.Context, name string) (leasehold.Group, error)
	MaxBytes() int64
	MaxExpandedBytes() int64
	// KeepWindow waits until a window just stored is kept by the node's
	// fleet, if it has one (nil for a node alone).
	KeepWindow(ctx context.Context, groupID int64, snap leasehold.Snapshot) *appliance.WindowKept
}

// Reads are the dashboard's reads, the node's health and the operator's
// whole-node calls (backup, a snapshot dropped, a group deleted).
type Reads interface {
	Overview(ctx context.Context, backlogAge time.Duration) (appliance.Overview, error)
	GroupRows(ctx context.Context, prefix string, after int64, limit int) ([]appliance.GroupRow, error)
	GroupRowsIn(ctx context.Context, state string, after int64, limit int) ([]appliance.GroupRow, int64, error)
	GroupPage(ctx context.Context, name string) (appliance.GroupPage, error)
	Tallies(ctx context.Context) (leasehold.Tallies, error)
	PeerNodes(ctx context.Context) ([]appliance.PeerNode, error)
	Ready(ctx context.Context) error
	Troubles() []leasehold.Finding
	WithDiskCause(err error) error
	DataFreeBytes() int64
	Backup(ctx context.Context) (*appliance.Backup, error)
	DropSnapshot(ctx context.Context, name string) (leasehold.Group, error)
	DeleteGroup(ctx context.Context, name string) error
}

// Watchman is the node's findings and gauges, on its clock.
type Watchman interface {
	Now() time.Time
	Report(ctx context.Context) (appliance.Report, error)
	Gauges(ctx context.Context, maxAge time.Duration) (appliance.Gauges, error)
}

// DoorsOf is the doors of app: what a node's Main (and a test's node)
// gives New.
func DoorsOf(app *appliance.Appliance) Doors {
	return Doors{Holders: app.Coordinator, Admin: app.Coordinator, Snapshots: app.Snapshots, Reads: app, Watchman: app.Watchman, Config: app.Config}
}
