package fleetfault

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// The kinds of call a recording worker makes. Every one but KindLease and
// KindPlan names a lease's fence: a holder call.
const (
	KindLease     = "lease"
	KindNext      = "next"
	KindHeartbeat = "heartbeat"
	KindProgress  = "progress"
	KindFinish    = "finish"
	KindRelease   = "release"
	KindSnapGet   = "snap_get"
	KindSnapPut   = "snap_put"
	KindPlan      = "plan"
)

// NoAnswer is the status of a call that got no answer (connection refused
// or broken, or the call's timeout passed): it may have landed or not.
const NoAnswer = -1

// Span is the ids start..end, inclusive.
type Span struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

func (s Span) String() string { return fmt.Sprintf("[%d, %d]", s.Start, s.End) }

// Call is one HTTP call as a recording worker saw it: who made it, on
// which lease, what it asked, when it was sent and when its answer came
// back (since the run's t0, on the harness's one monotonic clock), and the
// status (NoAnswer when none came).
type Call struct {
	Node   string `json:"node"`
	Worker string `json:"worker"`
	Group  string `json:"group,omitempty"`
	// Lease is the harness's number of the grant this call belongs to,
	// unique in the run; 0 for a lease call that granted nothing and for
	// plans.
	Lease int    `json:"lease,omitempty"`
	Fence int64  `json:"fence,omitempty"`
	Kind  string `json:"kind"`
	// Range is the range the call is about (progress, finish; next's
	// answer), nil otherwise.
	Range *Span `json:"range,omitempty"`
	// Next is progress's resume point, snap_put's window next and
	// snap_get's downloaded window next.
	Next int64 `json:"next,omitempty"`
	// Upload names a window: the one snap_put sent, or the one snap_get
	// brought back ("" for none).
	Upload string `json:"upload,omitempty"`
	// Kept is a snap_put whose answer said the window is in the fleet's
	// object store (replicated true): a takeover must resume from it, or
	// from a newer window.
	Kept   bool          `json:"kept,omitempty"`
	Sent   time.Duration `json:"sent"`
	Recv   time.Duration `json:"recv"`
	Status int           `json:"status"`
	Err    string        `json:"err,omitempty"`
}

// Acked reports whether the node answered the call with success.
func (c Call) Acked() bool { return c.Status >= 200 && c.Status < 300 }

// Holder reports whether the call is a holder call of a lease (the grant
// included): one that claims the caller holds the group.
func (c Call) Holder() bool { return c.Lease != 0 && c.Kind != KindPlan }

func (c Call) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%s %s fence=%d [%.3f, %.3f] -> ", c.Kind, c.Node, c.Worker, c.Fence, c.Sent.Seconds(), c.Recv.Seconds())
	if c.Status == NoAnswer {
		b.WriteString("no answer")
	} else {
		fmt.Fprint(&b, c.Status)
	}
	if c.Range != nil {
		fmt.Fprintf(&b, " range=%s", c.Range)
	}
	if c.Next != 0 {
		fmt.Fprintf(&b, " next=%d", c.Next)
	}
	if c.Upload != "" {
		fmt.Fprintf(&b, " window=%s", c.Upload)
	}
	if c.Kept {
		b.WriteString(" kept")
	}
	return b.String()
}

// Fault is one fault the harness made: its kind ("kill", "pause",
// "partition"), the node, when it began and when it was healed (the
// restart, the SIGCONT, the links back up).
type Fault struct {
	Kind  string        `json:"kind"`
	Node  string        `json:"node"`
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
}

func (f Fault) String() string {
	return fmt.Sprintf("%-9s %s [%.1fs, %.1fs]", f.Kind, f.Node, f.Start.Seconds(), f.End.Seconds())
}

// History is what a run recorded: every call and every fault. It is safe
// for concurrent use while recording.
type History struct {
	mu     sync.Mutex
	Calls  []Call
	Faults []Fault
	leases int
}

// NewLease returns a fresh lease number.
func (h *History) NewLease() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases++
	return h.leases
}

// Add records a call.
func (h *History) Add(c Call) {
	h.mu.Lock()
	h.Calls = append(h.Calls, c)
	h.mu.Unlock()
}

// AddFault records a fault.
func (h *History) AddFault(f Fault) {
	h.mu.Lock()
	h.Faults = append(h.Faults, f)
	h.mu.Unlock()
}

// Snapshot returns a copy of the calls, by send time, and of the faults.
func (h *History) Snapshot() ([]Call, []Fault) {
	h.mu.Lock()
	calls, faults := slices.Clone(h.Calls), slices.Clone(h.Faults)
	h.mu.Unlock()
	slices.SortStableFunc(calls, func(a, b Call) int { return cmp.Compare(a.Sent, b.Sent) })
	return calls, faults
}

// WriteJSON writes the history as JSON lines: the faults, then the calls.
func (h *History) WriteJSON(w io.Writer) error {
	calls, faults := h.Snapshot()
	enc := json.NewEncoder(w)
	for _, f := range faults {
		if err := enc.Encode(struct {
			Fault Fault `json:"fault"`
		}{f}); err != nil {
			return err
		}
	}
	for _, c := range calls {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return nil
}
