package leasehold

import (
	"encoding/json"
	"time"
)

// The wire contract: the bodies of the HTTP API's requests and answers that
// are not domain types themselves, written once here and used by the node
// (web) and the worker's Go client (client) alike, so the two cannot drift
// apart. They live in the root package because it is the one package both
// import: client takes only this package and the standard library.
// web/openapi.json describes the same bodies; the web tests check every
// recorded answer against it.
//
// Request fields are pointers where the node must tell "missing" from zero
// (a missing fence is KindInvalid, not fence 0); Int makes one in place.

// Int returns a pointer to v, for the pointer fields of requests.
func Int(v int64) *int64 { return &v }

// HolderCall is the body of a holder call that names only its fence
// (heartbeat, release).
type HolderCall struct {
	Fence *int64 `json:"fence"`
}

// NextCall is the body of POST /leases/{group}/next: the fence, and the
// range finished with it, if any (next after finish in one call).
type NextCall struct {
	Fence    *int64    `json:"fence"`
	Finished *Finished `json:"finished,omitempty"`
}

// Finished is a range reported done in the call that asks for the next
// one, as the wire carries it (pointers, to tell a missing field from 0);
// past the API it is a FinishedRange.
type Finished struct {
	Range   *int64 `json:"range"`
	Headers *int64 `json:"headers"`
}

// ReleaseCall is the body of POST /leases/{group}/release. WindowError,
// when given, says the holder's window would not load: the group is
// quarantined (rule 10). Stopped says the holder stops cleanly with its
// progress and window saved: its range in work gets back the attempt its
// lease counted (a stop is no attempt that failed).
type ReleaseCall struct {
	Fence       *int64  `json:"fence"`
	WindowError *string `json:"window_error,omitempty"`
	Stopped     *bool   `json:"stopped,omitempty"`
}

// FailCall is the body of POST /ranges/{id}/fail: why the range cannot be
// indexed, and whether to plan it again (default true).
type FailCall struct {
	Fence *int64  `json:"fence"`
	Error *string `json:"error"`
	Retry *bool   `json:"retry"`
}

// ProgressCall is the body of POST /ranges/{id}/progress.
type ProgressCall struct {
	Fence *int64 `json:"fence"`
	Next  *int64 `json:"next"`
}

// FinishCall is the body of POST /ranges/{id}/finish.
type FinishCall struct {
	Fence   *int64 `json:"fence"`
	Headers *int64 `json:"headers"`
}

// LeaseAnswer is the wire form of a Grant, the 200 answer to POST /leases
// (openapi: Grant). Fields are in the order the node has always sent them.
type LeaseAnswer struct {
	Fence    int64        `json:"fence"`
	Group    LeasedGroup  `json:"group"`
	Rules    RulesJSON    `json:"rules"`
	Snapshot *SnapshotRef `json:"snapshot"`
	Takeover bool         `json:"takeover"`
	TTLS     float64      `json:"ttl_s"`
}

// LeasedGroup is the part of a Group a lease answer carries.
type LeasedGroup struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Priority  int64  `json:"priority"`
	RangeSize int64  `json:"range_size"`
	Start     int64  `json:"start"`
}

// SnapshotRef is the part of a Snapshot a lease or an upload answer carries.
type SnapshotRef struct {
	Next   int64  `json:"next"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// RulesJSON is a rule set as the API shows it: Body is the JSON object as the
// operator put it (null before any).
type RulesJSON struct {
	Version int64           `json:"version"`
	Body    json.RawMessage `json:"body"`
}

// RulesOf is a rule set as the API shows it.
func RulesOf(rs RuleSet) RulesJSON { return RulesJSON{Version: rs.Version, Body: rs.Body} }

// AnswerOf is g as the node sends it.
func AnswerOf(g *Grant) LeaseAnswer {
	a := LeaseAnswer{
		Fence: g.Fence,
		Group: LeasedGroup{ID: g.Group.ID, Name: g.Group.Name, Priority: g.Group.Priority,
			RangeSize: g.Group.RangeSize, Start: g.Group.Start},
		Rules:    RulesOf(g.Rules),
		Takeover: g.Takeover,
		TTLS:     g.TTL.Seconds(),
	}
	if s := g.Snapshot; s != nil {
		a.Snapshot = &SnapshotRef{Next: s.Next, Size: s.Size, SHA256: s.SHA256}
	}
	return a
}

// Grant is the lease a worker's client reads from a.
func (a LeaseAnswer) Grant() *Grant {
	g := &Grant{
		Group: Group{ID: a.Group.ID, Name: a.Group.Name, Priority: a.Group.Priority,
			RangeSize: a.Group.RangeSize, Start: a.Group.Start},
		Fence:    a.Fence,
		Rules:    RuleSet{Version: a.Rules.Version, Body: a.Rules.Body},
		Takeover: a.Takeover,
		TTL:      Seconds(a.TTLS),
	}
	if s := a.Snapshot; s != nil {
		g.Snapshot = &Snapshot{Next: s.Next, Size: s.Size, SHA256: s.SHA256}
	}
	return g
}

// Seconds is a duration the API gives in seconds (ttl_s).
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// NextAnswer is the 200 answer to POST /leases/{group}/next (openapi:
// NextRange); 204 when the group is caught up.
type NextAnswer struct {
	Range *Range `json:"range"`
}

// HeartbeatAnswer is the answer to POST /leases/{group}/heartbeat.
type HeartbeatAnswer struct {
	TTLS float64 `json:"ttl_s"`
}

// ReleaseAnswer is the answer to POST /leases/{group}/release.
type ReleaseAnswer struct {
	GroupID     int64 `json:"group_id"`
	Quarantined bool  `json:"quarantined"`
	Released    bool  `json:"released"`
}

// NodeSpec is the registration of a worker node (POST /nodes). Nil fields
// take the node's defaults; Kinds are the kinds of group its worker reads
// (rule 12), none is [default]. The one type of the request from the
// wire to the rules (appliance).
type NodeSpec struct {
	Name        string       `json:"name"`
	PriorityMin *int64       `json:"priority_min,omitempty"`
	PriorityMax *int64       `json:"priority_max,omitempty"`
	Capacity    *int64       `json:"capacity,omitempty"`
	Kinds       []SourceKind `json:"kinds,omitempty"`
}

// NodeChange is what PATCH /nodes/{id} sets on a node; nil fields stay.
// The one type of the request from the wire to the catalog.
type NodeChange struct {
	Kinds    []SourceKind `json:"kinds,omitempty"`
	Capacity *int64       `json:"capacity,omitempty"`
}

// GroupSpec creates or updates a group (PUT /groups/{name}). Nil fields
// keep the current value (or take the default on creation); Start counts
// only on creation; Kind is the source the group is read from (default:
// default, rule 12), and changes only while nobody holds the group. The
// one type of the request from the wire (web, client) to the catalog
// (appliance, store).
type GroupSpec struct {
	Priority  *int64      `json:"priority,omitempty"`
	Active    *bool       `json:"active,omitempty"`
	RangeSize *int64      `json:"range_size,omitempty"`
	Start     *int64      `json:"start,omitempty"`
	Kind      *SourceKind `json:"kind,omitempty"`
}

// GroupPage is one page of groups (GET /groups); Next is the cursor of the
// following page, empty after the last.
type GroupPage struct {
	Groups []Group `json:"groups"`
	Next   string  `json:"next"`
}

// RangePage is one page of a group's ranges (GET /groups/{name}/ranges);
// Next is the cursor of the following page, empty after the last.
type RangePage struct {
	Next   string  `json:"next"`
	Ranges []Range `json:"ranges"`
}

// WatermarksAnswer is the answer to GET /watermarks: the groups whose water
// marks to ask the source about, and the kinds the list is drawn from (the
// caller's, rule 12).
type WatermarksAnswer struct {
	Groups []Watermarks `json:"groups"`
	Kinds  []SourceKind `json:"kinds"`
}

// Findings is the watchman's report (GET /findings): what is stuck, with
// its age, and the backlog of planned work waiting for a worker.
type Findings struct {
	Stuck   []Finding `json:"stuck"`
	Backlog Backlog   `json:"backlog"`
}

// PauseCall is the optional body of POST /nodes/{id}/pause and /resume: who
// paused or resumed the node (may be empty).
type PauseCall struct {
	By string `json:"by"`
}

// PlanTailCall is the body of POST /groups/{name}/tail.
type PlanTailCall struct {
	High *int64 `json:"high"`
}

// PlanHistoryCall is the body of POST /groups/{name}/history.
type PlanHistoryCall struct {
	Low *int64 `json:"low"`
}

// PlanAnswer is how many ranges a plan call planned (openapi: Planned).
type PlanAnswer struct {
	Planned int64 `json:"planned"`
}

// RulesVersion is the answer to PUT /rules: the version stored.
type RulesVersion struct {
	Version int64 `json:"version"`
}

// NewToken is the answer to a token rotation: the only place the new token
// is ever shown.
type NewToken struct {
	Token string `json:"token"`
}

// WatermarkCall is the body of POST /groups/{name}/watermark: either the
// water marks as the source reports them, or Error, what the source said
// instead (rule 13).
type WatermarkCall struct {
	Low   *int64  `json:"low,omitempty"`
	High  *int64  `json:"high,omitempty"`
	Error *string `json:"error,omitempty"`
}

// WatermarkReport is the answer to a water mark report: ranges planned, and
// Capped when the tail is not planned up to high yet (later reports plan
// the rest as ranges are leased).
type WatermarkReport struct {
	Planned int64 `json:"planned"`
	Capped  bool  `json:"capped"`
}

// ErrorBody is the API's error answer: Code is an error kind.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
