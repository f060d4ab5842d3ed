// Package leasehold holds the domain of the leasehold node: groups of
// sequential ids, the ranges planned over them, the leases that hand a group
// to one worker node at a time, window snapshots, findings, and the error
// kinds every layer speaks. It imports nothing of the project; the SQLite
// store, the node's behaviour and the HTTP API build on it.
package leasehold

import (
	"embed"
	"fmt"
	"time"
)

// Schema is the whole SQLite schema of the catalog at SchemaVersion.
//
//go:embed schema.sql
var Schema string

// SchemaVersion is the PRAGMA user_version that Schema creates. A database
// with a higher version was written by a newer binary and is refused.
const SchemaVersion = 14

//go:embed migrations/*.sql
var migrations embed.FS

// Migration returns the DDL that brings a catalog at version-1 up to
// version (2 ≤ version ≤ SchemaVersion). Each step also stands in Schema,
// which a new catalog gets whole.
func Migration(version int) (string, error) {
	b, err := migrations.ReadFile(fmt.Sprintf("migrations/%d.sql", version))
	return string(b), err
}

// RangeStatus is where a range is in its life: planned, leased to a
// holder, done, or failed (rule 10).
type RangeStatus string

// Range statuses.
const (
	StatusPlanned RangeStatus = "planned"
	StatusLeased  RangeStatus = "leased"
	StatusDone    RangeStatus = "done"
	StatusFailed  RangeStatus = "failed"
)

// TailPriority is the priority of every range the tail plans: below zero,
// so live work comes before any history.
const TailPriority = -1

// Node is a worker node: a registered identity that leases groups.
type Node struct {
	ID          int64      `json:"id"`
	Name        string     `json:"name"`
	PriorityMin int64      `json:"priority_min"`
	PriorityMax int64      `json:"priority_max"`
	Capacity    int64      `json:"capacity"`
	Paused      bool       `json:"paused"`
	PausedBy    string     `json:"paused_by"`
	PausedAt    *time.Time `json:"paused_at"`
	Held        int64      `json:"held"`
	LastSeenAt  *time.Time `json:"last_seen_at"`
	// Kinds are the kinds of group the node's worker can read (rule 12).
	Kinds []SourceKind `json:"kinds"`
	// CreatedAt is when the node was registered (nil for a peer's node).
	CreatedAt *time.Time `json:"created_at,omitempty"`
	// State is what the node is doing, as NodeState tells it at the
	// moment it is read: one of NodeStates.
	State string `json:"state,omitempty"`
	// Token is set only in the answer to the node's registration.
	Token string `json:"token,omitempty"`
	// Home is, for a visitor (a worker node registered at another node
	// of the fleet, working here with the token it has there), the node
	// it is registered at; "" for a node registered here.
	Home string `json:"home,omitempty"`
}

// NodeState is n's state at now, where a node not seen for unseen is
// unseen (registered and never seen counts from its registration); the
// node_unseen finding uses the same bound, and store's count of nodes by
// state (qNodeStates) the same order.
func NodeState(n Node, now time.Time, unseen time.Duration) string {
	seen := n.LastSeenAt
	if seen == nil {
		seen = n.CreatedAt
	}
	switch {
	case n.Paused:
		return NodePaused
	case seen != nil && now.Sub(*seen) > unseen:
		return NodeUnseen
	case n.Held > 0:
		return NodeActive
	}
	return NodeIdle
}

// Group is a source of sequential ids.
type Group struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Priority  int64  `json:"priority"`
	Active    bool   `json:"active"`
	RangeSize int64  `json:"range_size"`
	Start     int64  `json:"start"`
	// TailEnd is the highest id the tail has planned (Start-1 before any).
	TailEnd int64 `json:"tail_end"`
	// HistoryFloor is the lowest id planned (Start before any).
	HistoryFloor int64     `json:"history_floor"`
	CreatedAt    time.Time `json:"created_at"`
	// Quarantine is set while the group is leased to nobody because a
	// worker could not read its window (rule 10); nil otherwise.
	Quarantine *Quarantine `json:"quarantine"`
	// Low and High are the water marks the group's source last reported
	// (NNTP GROUP: its lowest and highest article numbers), MarksAt when;
	// nil until a worker reported them (rule 11).
	Low     *int64     `json:"low"`
	High    *int64     `json:"high"`
	MarksAt *time.Time `json:"marks_at"`
	// Kind is the source the group is read from (rule 12): only nodes
	// of that kind lease it or report its water marks.
	Kind SourceKind `json:"kind"`
	// SourceError is set while the group's source last said it cannot be
	// read (rule 13); nil after a report with water marks.
	SourceError *SourceError `json:"source_error"`
}

// SourceError is what a worker reported instead of a group's water marks:
// the error its source gave, the node that reported it, and when.
type SourceError struct {
	Error string    `json:"error"`
	Node  string    `json:"node"`
	At    time.Time `json:"at"`
}

// Watermarks is a group's water marks as the node last heard them, for a
// worker to ask its source about: Low, High and ReportedAt are nil when
// never reported.
type Watermarks struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Low        *int64     `json:"low"`
	High       *int64     `json:"high"`
	ReportedAt *time.Time `json:"reported_at"`
}

// Quarantine says why a group is leased to nobody until an operator acts:
// the error its holder's window would not load with, the node that said
// so, and when.
type Quarantine struct {
	Error string    `json:"error"`
	Node  string    `json:"node"`
	At    time.Time `json:"at"`
}

// MaxErrorBytes is the longest error text a worker may report (a range's
// fail, a release's window_error).
const MaxErrorBytes = 4096

// GroupDetail is a group with its lease, its stored snapshot (held or
// not) and its range counts by status.
type GroupDetail struct {
	Group
	Lease    *Lease                `json:"lease"`
	Snapshot *Snapshot             `json:"snapshot"`
	Ranges   map[RangeStatus]int64 `json:"ranges"`
	// Peer is set when the group's state here is another fleet node's:
	// its owner's lease and snapshot as the owner holds them.
	Peer *PeerState `json:"peer,omitempty"`
}

// PeerState is a group's lease and snapshot as its owner, another node of
// the fleet, holds them.
type PeerState struct {
	Owner       string     `json:"owner"`
	Holder      string     `json:"holder"`
	Fence       int64      `json:"fence"`
	HeartbeatAt *time.Time `json:"heartbeat_at"`
	Snapshot    *Snapshot  `json:"snapshot"`
	RangesDone  int64      `json:"ranges_done"`
}

// Range is a planned span of ids, Start..End inclusive, resumed at Next.
type Range struct {
	ID          int64       `json:"id"`
	GroupID     int64       `json:"group_id"`
	Start       int64       `json:"start"`
	End         int64       `json:"end"`
	Next        int64       `json:"next"`
	Status      RangeStatus `json:"status"`
	Priority    int64       `json:"priority"`
	NodeID      *int64      `json:"node_id"`
	Attempts    int64       `json:"attempts"`
	RuleVersion int64       `json:"rule_version"`
	Headers     int64       `json:"headers"`
	UpdatedAt   time.Time   `json:"updated_at"`
	// LastError is what a worker said when it last failed the range, and
	// LastErrorAt when; nil when no worker ever failed it.
	LastError   *string    `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
}

// Lease is who holds a group, at which fence, and what it has done.
type Lease struct {
	NodeID      int64     `json:"node_id"`
	Node        string    `json:"node"`
	Fence       int64     `json:"fence"`
	LeasedAt    time.Time `json:"leased_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	RangeID     *int64    `json:"range_id"`
	Snapshot    *Snapshot `json:"snapshot"`
	RangesDone  int64     `json:"ranges_done"`
	Headers     int64     `json:"headers"`
}

// Snapshot describes a group's stored window snapshot: the id the window
// covers up to (exclusive), the gzip size and sha-256 (hex) of the stored
// bytes, and when it was stored. File is the on-disk sequence number.
type Snapshot struct {
	Next   int64     `json:"next"`
	Size   int64     `json:"size"`
	SHA256 string    `json:"sha256"`
	At     time.Time `json:"at"`
	File   int64     `json:"-"`
	// Replicated, in an upload's answer from a node in a fleet only, says
	// whether the fleet's object store has the window (a node taking the
	// group over resumes from it); ReplicatedInS, when it does not, is an
	// estimate of the seconds until it does (0: unknown).
	Replicated    *bool `json:"replicated,omitempty"`
	ReplicatedInS int64 `json:"replicated_in_s,omitempty"`
}

// RuleSet is a version of the rules the workers index by.
type RuleSet struct {
	Version int64  `json:"version"`
	Body    []byte `json:"body"`
}

// Grant is a lease of a group, on the node and in a worker's client alike
// (its wire form is the lease answer of wire.go): the group, the fence every holder call
// must name, the current rules, the snapshot to resume from (nil: start an
// empty window) and the lease's TTL. A client's Group has ID, Name,
// Priority, RangeSize and Start set, its Snapshot Next, Size and SHA256.
type Grant struct {
	Group    Group
	Fence    int64
	Rules    RuleSet
	Snapshot *Snapshot
	// Takeover is true when the group was taken from a quiet holder;
	// TakenFrom names that holder (empty if it was deleted since; never
	// sent on the wire, so always empty in a client's Grant).
	Takeover  bool
	TakenFrom string
	// TTL is how long the lease lives without a holder call.
	TTL time.Duration
}

// Finding is something the watchman reports as stuck, with its age.
type Finding struct {
	Kind   FindingKind `json:"kind"`
	Group  string      `json:"group"`
	Range  *int64      `json:"range"`
	Node   string      `json:"node"`
	Since  time.Time   `json:"since"`
	AgeS   float64     `json:"age_s"`
	Detail string      `json:"detail"`
}

// FindingKind is what a finding reports as stuck: one of the Finding*
// constants, sent as the finding's "kind".
type FindingKind string

// Finding kinds.
const (
	FindingRangeStale  FindingKind = "range_stale"
	FindingLeaseQuiet  FindingKind = "lease_quiet"
	FindingRangeFailed FindingKind = "range_failed"
	FindingNodeUnseen  FindingKind = "node_unseen"
	FindingSnapshotOld FindingKind = "snapshot_old"
	// FindingWindowUnreadable is a quarantined group: its holder could
	// not load its window. Node and Detail say who and why.
	FindingWindowUnreadable FindingKind = "window_unreadable"
	// FindingFlapping is a group released or taken over FlapsFinding
	// times in a row with no range progressing under any of the leases.
	FindingFlapping FindingKind = "flapping"
	// FindingNoWorkerForKind is a kind with planned work and no live
	// node of that kind to lease it (rule 12); Group names the kind.
	FindingNoWorkerForKind FindingKind = "no_worker_for_kind"
	// FindingSourceUnreadable is a group whose last two reports from its
	// source were errors (rule 13); Detail carries the error.
	FindingSourceUnreadable FindingKind = "source_unreadable"
	// FindingPeerSyncStuck is a node whose outbox could not be published
	// to the fleet's stream for longer than a minute: its changes reach no
	// peer. Node names it; Detail carries the last error.
	FindingPeerSyncStuck FindingKind = "peer_sync_stuck"
)

// FlapsFinding is how many lease ends in a row with no progress make a
// group a flapping finding.
const FlapsFinding = 5

// Backlog is planned work waiting for a free worker: never a stall.
type Backlog struct {
	Planned     int64   `json:"planned"`
	OldestAgeS  float64 `json:"oldest_age_s"`
	Tail        int64   `json:"tail"`
	TailOldestS float64 `json:"tail_oldest_age_s"`
	History     int64   `json:"history"`
	HistOldestS float64 `json:"history_oldest_age_s"`
}

// EventKind is what an outbox event records: one of the store's Event*
// constants. An alias, as the outbox and the fleet's messages carry it as
// the string it is.
type EventKind = string

// Event is one row of the outbox.
type Event struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Kind    EventKind `json:"kind"`
	GroupID *int64    `json:"group_id"`
	RangeID *int64    `json:"range_id"`
	NodeID  *int64    `json:"node_id"`
	Body    []byte    `json:"body"`
}

// Peer is another node of the fleet as this node sees it through peer
// sync: the last event folded from it, how far this node has folded the
// stream, and how many groups it owns here.
type Peer struct {
	Name        string     `json:"name"`
	Catalog     string     `json:"catalog"`
	LastEventAt *time.Time `json:"last_event_at"`
	// Folded is the stream position of the last of its events folded here.
	Folded uint64 `json:"folded"`
	// LagS is how long ago, on this node's clock, its last event was made.
	LagS   float64 `json:"lag_s"`
	Groups int64   `json:"groups"`
	Nodes  int64   `json:"nodes"`
	// Rebuilds counts how often its part was rebuilt from a dump.
	Rebuilds int64 `json:"rebuilds"`
	// State is up (its life in the fleet renewed within the claim TTL,
	// published or not), down (not seen for the claim TTL: its groups go
	// to the others) or unknown (not seen, and this node cannot read the
	// lives: nothing is taken from it).
	State string `json:"state"`
	// StateSince is when it entered State, on this node's clock; for down,
	// when its life was last seen. Null when this node never saw it.
	StateSince *time.Time `json:"state_since"`
	// Owns is how many groups its claims name now.
	Owns int64 `json:"owns"`
}

// FleetStatus is this node's view of its fleet: its own name, whether peer
// sync runs and whether NATS is reachable now, and its peers.
type FleetStatus struct {
	Name      string `json:"name"`
	Enabled   bool   `json:"enabled"`
	Connected bool   `json:"connected"`
	// Owned is how many groups this node owns (holds the claim of).
	Owned int64 `json:"owned"`
	// Unpublished is how many of this node's events the fleet's stream has
	// not acknowledged yet: changes made here that no peer can have seen
	// (a node cut off from NATS keeps them until it is back).
	Unpublished int64 `json:"unpublished"`
	// Published is the stream position of the last event of this node's
	// the stream acknowledged: a peer whose Folded for this node has
	// reached it has seen every change this node published.
	Published uint64 `json:"published"`
	// Offline names the fleet's streams and buckets NATS cannot serve now
	// (no leader, no answer), "" when all can: while one cannot, writes
	// are refused (503) though the node is connected.
	Offline string `json:"offline,omitempty"`
	Peers   []Peer `json:"peers"`
}

// Group states, as the metrics count them: the first that holds of
// quarantined (rule 10), held (a worker holds its lease), inactive,
// waiting (open work, nobody holds it) and idle (caught up).
const (
	GroupQuarantined = "quarantined"
	GroupHeld        = "held"
	GroupInactive    = "inactive"
	GroupWaiting     = "waiting"
	GroupIdle        = "idle"
)

// GroupStates are every group state, in the order they are shown.
var GroupStates = []string{GroupQuarantined, GroupHeld, GroupInactive, GroupWaiting, GroupIdle}

// Node states: the first that holds of paused, unseen (not seen for the
// unseen bound), active (holds groups) and idle.
const (
	NodePaused = "paused"
	NodeUnseen = "unseen"
	NodeActive = "active"
	NodeIdle   = "idle"
)

// NodeStates are every node state, in the order they are shown.
var NodeStates = []string{NodePaused, NodeUnseen, NodeActive, NodeIdle}

// RangeStatuses are every range status, in the order they are shown.
var RangeStatuses = []RangeStatus{StatusPlanned, StatusLeased, StatusDone, StatusFailed}

// Tallies are the catalog's counts kept as it is written (schema version
// 8), read without counting rows: ranges by status and lane, groups by
// state and ownership.
type Tallies struct {
	// Ranges by status; Tail and History split the planned ones by lane
	// (the backlog).
	Ranges                   map[RangeStatus]int64
	PlannedTail, PlannedHist int64
	// Owned and Unowned count groups by state: those this node may lease,
	// and those it may not (a peer's, or its own while unclaimed).
	Owned, Unowned map[string]int64
}
