// Package fleet joins a leasehold node to a fleet over NATS: it runs the
// embedded nats-server (or joins an external NATS), publishes the node's
// outbox to one JetStream stream, folds its peers' events into its own
// catalog, keeps ownership claims on groups in a key-value bucket, and
// carries window snapshots through the object store. jetstream types stay in
// this package; the store and the web never see them.
package fleet

import (
	"time"

	"github.com/leasehold/leasehold/store"
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
	// LivesBucket holds each node's life (key: node name, value: Life); a
	// node's claims stand while its life does.
	LivesBucket = "leasehold_lives"
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

// FormatVersion is the format of the peer messages and dumps this build
// writes, and the newest it reads. A message or dump without one is of
// the format before versions (1). A change a node of the previous build
// would misread raises it: such a node then stops at the first message
// of the newer format (its fold holds there, saying so, until it is
// upgraded) instead of folding it wrongly, and refuses such a dump.
//
// Format 2: a stream message carries a publish batch's messages (Batch),
// not one Message; this build still folds format 1's single messages.
const FormatVersion = 2

// formatNewer reports whether format is newer than this build reads.
func formatNewer(format int) bool { return format > FormatVersion }

// MaxRangesPerMessage bounds a message's ranges; an event touching more is
// published as several parts, each a Message with the same Event.
const MaxRangesPerMessage = 1000

// Message is one outbox event as the fleet sees it, one of a Batch's on
// SubjectPrefix+Origin (in format 1, the whole body of a stream message). It carries the state the event left, read when
// the event is published (never older than the event), so folding is an
// upsert by name and a duplicate or a repeat changes nothing. Rows are keyed
// fleet-wide by names, never by the origin's local ids: a group by its name,
// a range by its group and start, a node by its name.
//
// The publisher reads state once a group per batch of events: the last
// event of a group in a batch carries the group and every range changed
// since the first; the others carry only what they are. A batch is marked
// sent only when all of it was acknowledged, so a resend carries it all
// again.
type Message struct {
	// Format is the FormatVersion of the node that wrote it (0 before
	// versions: format 1).
	Format  int       `json:"format,omitempty"`
	Origin  string    `json:"origin"`  // the publishing node's fleet name
	Catalog string    `json:"catalog"` // the origin's catalog id
	Event   int64     `json:"event"`   // the origin's outbox id
	Part    int       `json:"part"`    // 0, 1, … when the event is split
	Parts   int       `json:"parts"`   // how many parts the event has (≥ 1)
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"` // store.Event* kinds

	// Group is the event's group as the origin holds it, if it carries it.
	Group *store.PeerGroup `json:"group,omitempty"`
	// Ranges are ranges of Group changed since the batch's first event of it.
	Ranges []store.PeerRange `json:"ranges,omitempty"`
	// Node is the event's worker node as the origin holds it, with the
	// sha-256 of its token when the node is registered at the origin
	// (never the token): a token registered at one node works at every
	// node (store.FleetNode). The hash is an optional field, so the format
	// stays 1: a node of the build before ignores it, and a node without
	// it (published by that build) lets no token in elsewhere.
	Node *store.FleetNode `json:"node,omitempty"`
	// NodeGone names a worker node the origin deleted.
	NodeGone string `json:"node_gone,omitempty"`
	// GroupGone is a group the origin deleted, as its owner, under the
	// claim it names: every node deletes it and keeps its tombstone
	// (store.Tx.FoldGroupGone).
	GroupGone *GroupGone `json:"group_gone,omitempty"`
	// Late is a plan the origin made while it owned a group and published
	// only after its catalog took a newer owner's state of it: the plan
	// without the state, which every node replays (store.ReplayLatePlan).
	Late *LatePlan `json:"late,omitempty"`
}

// LatePlan is one tail (High) or history (Low) plan of a group an earlier
// owner made.
type LatePlan struct {
	Group string `json:"group"`
	High  *int64 `json:"high,omitempty"`
	Low   *int64 `json:"low,omitempty"`
}
