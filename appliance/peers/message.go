// Package peers joins a leasehold node to a fleet over NATS: it runs the
// embedded nats-server (or joins an external NATS), publishes the node's
// outbox to one JetStream stream, folds its peers' events into its own
// catalog, keeps ownership claims on groups in a key-value bucket, and
// carries window snapshots through the object store. jetstream types stay in
// this package; the store and the web never see them.
package peers

import (
	"time"

	"leasehold"
)

// Names every node of a fleet agrees on.
const (
	// StreamName is the one stream all nodes publish their events to.
	StreamName = "LEASEHOLD_EVENTS"
	// SubjectPrefix + node name is a node's event subject.
	SubjectPrefix = "leasehold.events."
	// PublishedBucket holds each origin's publish record: the last stream
	// sequence it published at, raised by compare-and-set (key: node name).
	PublishedBucket = "leasehold_published"
	// ClaimsBucket holds ownership claims (key: group name, value: Claim).
	ClaimsBucket = "leasehold_claims"
	// SnapshotsBucket is the object store of replicated window snapshots.
	SnapshotsBucket = "leasehold_snapshots"
	// DumpSubjectPrefix + node name answers full state dumps of that origin.
	DumpSubjectPrefix = "leasehold.dump."
	// AdminSubjectPrefix + node name carries admin writes to a group's owner.
	AdminSubjectPrefix = "leasehold.admin."
)

// Message headers besides Nats-Msg-Id, which is "<catalog>.<event>.<part>".
const (
	HeaderOrigin  = "Leasehold-Origin"
	HeaderCatalog = "Leasehold-Catalog"
	HeaderEvent   = "Leasehold-Event"
)

// MaxRangesPerMessage bounds a message's ranges; an event touching more is
// published as several parts, each a Message with the same Event.
const MaxRangesPerMessage = 1000

// Message is one outbox event as the fleet sees it, the body of a message
// on SubjectPrefix+Origin. It carries the state the event left, read when
// the event is published (never older than the event), so folding is an
// upsert by name and a duplicate or a repeat changes nothing. Rows are keyed
// fleet-wide by names, never by the origin's local ids: a group by its name,
// a range by its group's name and start, a node by its name.
type Message struct {
	Origin  string    `json:"origin"`  // the publishing node's fleet name
	Catalog string    `json:"catalog"` // the origin's catalog id
	Event   int64     `json:"event"`   // the origin's outbox id
	Part    int       `json:"part"`    // 0, 1, … when the event is split
	Parts   int       `json:"parts"`   // how many parts the event has (≥ 1)
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"` // store.Event* kinds

	Group  *GroupState  `json:"group,omitempty"`  // the event's group, if any
	Ranges []RangeState `json:"ranges,omitempty"` // ranges the event changed
	Node   *NodeState   `json:"node,omitempty"`   // the event's node, if any
	// NodeGone names a node the origin deleted.
	NodeGone string `json:"node_gone,omitempty"`
}

// GroupState is a group as its origin holds it: the group row, its lease
// (nil when free) and its newest window snapshot (nil when none).
type GroupState struct {
	leasehold.Group
	Lease    *leasehold.Lease    `json:"lease"`
	Snapshot *leasehold.Snapshot `json:"snapshot"`
}

// RangeState is one range as its origin holds it. Node names the holder
// (empty when none) since the origin's node ids mean nothing elsewhere.
type RangeState struct {
	Group string `json:"group"`
	leasehold.Range
	Node string `json:"node"`
}

// NodeState is a worker node registered at the origin. No token or hash
// ever leaves the origin.
type NodeState struct {
	leasehold.Node
}
