package leasehold

// The dashboard's timeline shows the operator's log lines of takeovers,
// failures and admin writes, written by the web server itself. Lines
// other parts write (the fleet's members and adoptions) reach it through
// the node's log handler instead of a wire of their own: such a line
// carries the attribute TimelineAttr, whose value is the entry's kind,
// and the handler copies it onto the timeline. The attribute stays in
// the written line, so the log says which of its lines the dashboard
// shows.
const TimelineAttr = "timeline"

// TimelineKind is what a line of the operator's timeline tells: a
// takeover, a failed range, a peer down and so on. The fleet's are below;
// the web server's own lines have theirs beside the timeline.
type TimelineKind string

// Timeline kinds of the fleet's lines.
const (
	// TimelinePeerDown is a fleet member found down (its life lapsed).
	TimelinePeerDown TimelineKind = "peer_down"
	// TimelinePeerUp is a fleet member up again after it was down, or
	// seen in the fleet for the first time.
	TimelinePeerUp TimelineKind = "peer_up"
	// TimelineAdoption is a group this node took over from a peer.
	TimelineAdoption TimelineKind = "adoption"
)
