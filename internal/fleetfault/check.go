package fleetfault

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// RangeView is a range as one node's catalog lists it.
type RangeView struct {
	Span
	Status string `json:"status"`
}

// GroupView is a group as one node's catalog holds it at the end: the
// owner it names (itself for its own groups) and every range.
type GroupView struct {
	Owner  string      `json:"owner"`
	Ranges []RangeView `json:"ranges"`
}

// Final is the fleet's state read after the faults ended, the load drained
// and the workers stopped.
type Final struct {
	// Nodes are the fleet's node names.
	Nodes []string
	// Catalogs[node][group] is the group as node's catalog holds it; a
	// node that could not be read has no entry.
	Catalogs map[string]map[string]GroupView
	// Windows[group] is the group's stored window at its owner, nil when
	// the owner had none; WindowErrs[group] why one could not be read.
	Windows    map[string]*Window
	WindowErrs map[string]string
	// Adoptions are the groups nodes took over from a peer (won its claim
	// and adopted its state), read from the nodes' logs: an ownership
	// change with no lease granted, which a grant alone does not show.
	Adoptions []Adoption
	// Unsettled says which changes some node had not seen when the state
	// was read: a node's events the stream had not acknowledged, or a
	// peer's events not folded up to the last one acknowledged. A fleet
	// that agrees without them agrees on too little: a cut-off node's
	// plans and finishes still on their way.
	Unsettled []string
}

// Adoption is node taking group over from a peer at At (since the load
// began).
type Adoption struct {
	Node, Group string
	At          time.Duration
}

// Owner is the node whose catalog is group's: the owner most nodes name
// (a tie goes to the lowest name).
func (f *Final) Owner(group string) string {
	votes := map[string]int{}
	for _, n := range f.Nodes {
		if v, ok := f.Catalogs[n][group]; ok {
			votes[v.Owner]++
		}
	}
	best := ""
	for _, o := range slices.Sorted(maps.Keys(votes)) {
		if best == "" || votes[o] > votes[best] {
			best = o
		}
	}
	return best
}

// DoubleHolding is a certain double holding: lease A was acknowledged as
// the group's holder by a call answered before B's call was sent, and
// again by a call sent after B's call was answered, so A held the group
// the whole time B's call was answered as a holder's.
type DoubleHolding struct {
	Group       string
	A, B        int
	First, Last Call // A's bracketing calls
	Intrusion   Call // B's call
}

func (d DoubleHolding) String() string {
	where := "on another node"
	if d.First.Node == d.Intrusion.Node {
		where = "on the same node"
	}
	return fmt.Sprintf("group %s: lease %d held from its %s\n      through its %s\n      while lease %d (%s) got %s",
		d.Group, d.A, d.First, d.Last, d.B, where, d.Intrusion)
}

// LostFinish is an acknowledged finish whose range is not done in the
// final catalog of the group's owner.
type LostFinish struct {
	Group  string
	Owner  string
	Finish Call
}

func (l LostFinish) String() string {
	return fmt.Sprintf("group %s: %s; not done at its owner %q", l.Group, l.Finish, l.Owner)
}

// StaleWindow is a new holder's download that is not the newest window
// acknowledged before its grant was sent.
type StaleWindow struct {
	Group  string
	Grant  Call
	Get    Call
	Newest Call // the newest acknowledged upload certainly before the grant
	Why    string
}

func (s StaleWindow) String() string {
	return fmt.Sprintf("group %s: %s\n      after grant %s\n      but %s was acknowledged before the grant: %s", s.Group, s.Get, s.Grant, s.Newest, s.Why)
}

// Takeover is the first grant of a faulted node's group to a worker of
// another node after the fault began.
type Takeover struct {
	Group string
	Node  string
	After time.Duration // from the fault's start to the grant's answer
}

// FaultFigures is what one fault did.
type FaultFigures struct {
	Fault
	// InWork are the groups leased at the faulted node when the fault
	// began.
	InWork    []string
	TakenOver []Takeover
	// Adopted is, for each group in work, the first time another node
	// owned it (won its claim and adopted its state; from the nodes'
	// logs), whether or not a worker there was free to lease it.
	Adopted []Takeover
	// OldCalls counts the calls on those leases sent after the fault
	// began, by outcome: "ack", "409", "no answer", or another status.
	OldCalls map[string]int
	// LastOldAck is when the last of those calls acknowledged was
	// answered, from the fault's start (-1: none).
	LastOldAck time.Duration
}

// LastTakeover is the slowest takeover's latency, -1 for none.
func (f FaultFigures) LastTakeover() time.Duration {
	if len(f.TakenOver) == 0 {
		return -1
	}
	return slices.MaxFunc(f.TakenOver, func(a, b Takeover) int { return cmp.Compare(a.After, b.After) }).After
}

// FirstTakeover is the quickest takeover's latency, -1 for none.
func (f FaultFigures) FirstTakeover() time.Duration {
	if len(f.TakenOver) == 0 {
		return -1
	}
	return slices.MinFunc(f.TakenOver, func(a, b Takeover) int { return cmp.Compare(a.After, b.After) }).After
}

// Report is the checker's verdict on a run.
type Report struct {
	Faults       []FaultFigures
	FaultsByKind map[string]int
	// CallsByKind counts every call by "kind/status".
	CallsByKind      map[string]int
	Leases           int
	AckedHolderCalls int
	AckedFinishes    int
	WindowsChecked   int
	GroupsChecked    int

	DoubleHoldings []DoubleHolding
	LostFinishes   []LostFinish
	// Unconverged says where the nodes' final catalogs disagree or a range
	// is not done.
	Unconverged []string
	// StaleWindows are violations: a download of a window never
	// uploaded; on the node of the newest acknowledged upload, with no
	// takeover between, an older one; and a takeover that resumed from a
	// window older than the newest one the fleet answered it keeps
	// (Call.Kept), or from none.
	StaleWindows []StaleWindow
	// OlderWindows are takeovers across nodes that resumed from an older
	// replicated window than the newest acknowledged upload, or from none,
	// but from one no older than any answered kept: an upload answered
	// not replicated (the node's wait for the object store passed) leaves
	// the fleet an older window if its node dies before replicating it,
	// and rule 2 plans again what it does not cover (the final windows
	// check shows nothing was lost). Work redone, not a violation.
	OlderWindows []StaleWindow
	// WindowHoles are ids of planned ranges a group's final window at its
	// owner does not cover.
	WindowHoles []string
	// Other are problems the run found outside the history (a node that
	// did not come up, a fault that could not be made).
	Other []string
	// Upgrade is the upgrade mode's figures, nil in other runs.
	Upgrade *UpgradeFigures

	// FalseDowns are members a node showed down on its timeline while
	// their lives were renewed (CheckDowns), of DownsChecked; the others
	// were explained by a fault (DownsByFault) or by the member's own life
	// lapsing (DownsByLapse).
	FalseDowns                 []Down
	DownsChecked               int
	DownsByFault, DownsByLapse int
	// Pressure is what the CPU burners did, nil in a run without them.
	Pressure *Pressure
	// TakeoverBound, when set, is the liveness figure's bound: a fault
	// that lasts longer should see the faulted node's groups taken over
	// within it. Late lists the faults that did not (set by
	// CheckTakeovers); they count as violations only when RequireTakeover
	// is set.
	TakeoverBound   time.Duration
	RequireTakeover bool
	Late            []string
	long            int // faults longer than TakeoverBound with groups in work
}

// CheckTakeovers sets the liveness bound and lists the faults longer than
// it, with groups in work at the faulted node, whose groups were not all
// granted or owned elsewhere within it: ownership is what the fleet
// promises; a grant also needs a free worker at the new owner, which the
// load may not have. require counts those as violations.
func (r *Report) CheckTakeovers(bound time.Duration, require bool) {
	r.TakeoverBound, r.RequireTakeover, r.Late, r.long = bound, require, nil, 0
	for _, f := range r.Faults {
		if f.End-f.Start < bound || len(f.InWork) == 0 {
			continue
		}
		r.long++
		if within := f.movedWithin(bound); within < len(f.InWork) {
			r.Late = append(r.Late, fmt.Sprintf("%s: %d of %d groups granted or owned elsewhere within %s", f.Fault, within, len(f.InWork), bound))
		}
	}
}

// Violations counts every problem found.
func (r *Report) Violations() int {
	n := len(r.DoubleHoldings) + len(r.LostFinishes) + len(r.Unconverged) + len(r.StaleWindows) + len(r.WindowHoles) + len(r.Other) + len(r.FalseDowns)
	if r.RequireTakeover {
		n += len(r.Late)
	}
	return n
}

// leaseCalls is one lease's calls, in send order.
type leaseCalls struct {
	id    int
	grant Call
	calls []Call
	// first is the acknowledged call answered earliest, last the
	// acknowledged call sent latest.
	first, last Call
	acked       bool
}

// Check checks a history against the promise "one group, one holder" and
// the final state: certain double holdings, acknowledged finishes lost,
// convergence, the windows new holders got and the final windows, and
// figures each fault's takeovers.
func Check(calls []Call, faults []Fault, final *Final) *Report {
	calls = slices.Clone(calls)
	slices.SortStableFunc(calls, func(a, b Call) int { return cmp.Compare(a.Sent, b.Sent) })
	r := &Report{FaultsByKind: map[string]int{}, CallsByKind: map[string]int{}}
	for _, c := range calls {
		st := fmt.Sprint(c.Status)
		if c.Status == NoAnswer {
			st = "-1"
		}
		r.CallsByKind[c.Kind+"/"+st]++
		if c.Holder() && c.Acked() {
			r.AckedHolderCalls++
		}
	}
	leases, byGroup := groupLeases(calls)
	r.Leases = len(leases)
	r.DoubleHoldings = doubleHoldings(byGroup)
	var adoptions []Adoption
	if final != nil {
		adoptions = final.Adoptions
	}
	r.StaleWindows, r.OlderWindows, r.WindowsChecked = staleWindows(calls, leases, adoptions)
	for _, f := range faults {
		r.FaultsByKind[f.Kind]++
	}
	r.Faults = faultFigures(calls, faults, leases)
	addAdoptions(r.Faults, adoptions)
	if final != nil {
		r.LostFinishes, r.AckedFinishes = lostFinishes(calls, final)
		r.Unconverged = append(unconverged(final), final.Unsettled...)
		r.WindowHoles, r.GroupsChecked = windowHoles(final)
	}
	return r
}

// groupLeases gathers the calls of each lease that was granted (an
// acknowledged lease call), and the leases of each group.
func groupLeases(calls []Call) (map[int]*leaseCalls, map[string][]*leaseCalls) {
	leases := map[int]*leaseCalls{}
	for _, c := range calls {
		if c.Kind == KindLease && c.Lease != 0 && c.Acked() {
			leases[c.Lease] = &leaseCalls{id: c.Lease, grant: c}
		}
	}
	for _, c := range calls {
		l := leases[c.Lease]
		if l == nil || !c.Holder() {
			continue
		}
		l.calls = append(l.calls, c)
		if !c.Acked() {
			continue
		}
		if !l.acked || c.Recv < l.first.Recv {
			l.first = c
		}
		if !l.acked || c.Sent > l.last.Sent {
			l.last = c
		}
		l.acked = true
	}
	byGroup := map[string][]*leaseCalls{}
	for _, id := range slices.Sorted(maps.Keys(leases)) {
		l := leases[id]
		byGroup[l.grant.Group] = append(byGroup[l.grant.Group], l)
	}
	return leases, byGroup
}

// doubleHoldings finds, for each group and each two of its leases A and
// B, the first acknowledged call of B that falls strictly between two
// acknowledged calls of A: A's first answer came before it was sent, and
// A's last call was sent after it was answered. Only certain overlaps
// count; calls in flight at the same time do not.
func doubleHoldings(byGroup map[string][]*leaseCalls) []DoubleHolding {
	var out []DoubleHolding
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		ls := byGroup[g]
		for _, a := range ls {
			if !a.acked {
				continue
			}
			for _, b := range ls {
				if a == b {
					continue
				}
				for _, c := range b.calls {
					if c.Acked() && a.first.Recv < c.Sent && c.Recv < a.last.Sent {
						out = append(out, DoubleHolding{Group: g, A: a.id, B: b.id, First: a.first, Last: a.last, Intrusion: c})
						break
					}
				}
			}
		}
	}
	return out
}

// staleWindows checks the first download of each lease: it must bring back
// a window that was uploaded, and, when the group has not been granted on
// another node since the newest upload acknowledged before the grant was
// sent (the one sent last among those answered before it) and the grant
// is on that upload's node, that upload or one not certainly older. A
// takeover across nodes may resume from an older replicated window: those
// are returned apart (older), as a figure.
func staleWindows(calls []Call, leases map[int]*leaseCalls, adoptions []Adoption) (stale, older []StaleWindow, checked int) {
	grants := map[string][]Call{} // by group, acknowledged grants
	for _, c := range calls {
		if c.Kind == KindLease && c.Acked() && c.Group != "" {
			grants[c.Group] = append(grants[c.Group], c)
		}
	}
	// moved reports whether group was granted on, or adopted by, a node
	// other than node from after to before: the group left node's
	// catalog, and came back (if it did) with the state, and the window,
	// the fleet had replicated.
	moved := func(group, node string, after, before time.Duration) bool {
		for _, g := range grants[group] {
			if g.Node != node && g.Recv > after && g.Sent < before {
				return true
			}
		}
		for _, a := range adoptions {
			if a.Group == group && a.Node != node && a.At > after && a.At < before {
				return true
			}
		}
		return false
	}
	uploads := map[string]Call{} // by upload name: the last record of it
	acked := map[string][]Call{} // by group
	for _, c := range calls {
		if c.Kind != KindSnapPut || c.Upload == "" {
			continue
		}
		if prev, ok := uploads[c.Upload]; !ok || !prev.Acked() {
			uploads[c.Upload] = c
		}
		if c.Acked() {
			acked[c.Group] = append(acked[c.Group], c)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(leases)) {
		l := leases[id]
		var get *Call
		for i := range l.calls {
			if c := l.calls[i]; c.Kind == KindSnapGet && c.Acked() {
				get = &l.calls[i]
				break
			}
		}
		if get == nil {
			continue
		}
		checked++
		var newest *Call
		for i, u := range acked[l.grant.Group] {
			if u.Recv < l.grant.Sent && (newest == nil || u.Sent > newest.Sent) {
				newest = &acked[l.grant.Group][i]
			}
		}
		if newest == nil {
			continue
		}
		sw := StaleWindow{Group: l.grant.Group, Grant: l.grant, Get: *get, Newest: *newest}
		got, ok := uploads[get.Upload]
		switch {
		case get.Upload != "" && !ok:
			sw.Why = fmt.Sprintf("the window downloaded (%s) was never uploaded", get.Upload)
			stale = append(stale, sw)
			continue
		case get.Upload == "":
			sw.Why = "the download brought no window"
		case got.Recv < newest.Sent:
			sw.Why = fmt.Sprintf("the window downloaded was uploaded by %s, answered before the newer one was sent", got)
		default:
			continue
		}
		if newest.Node != l.grant.Node || moved(l.grant.Group, newest.Node, newest.Sent, l.grant.Sent) {
			if kept := newestKept(acked[l.grant.Group], l.grant.Sent); kept != nil && (get.Upload == "" || got.Recv < kept.Sent) {
				// The fleet answered that it had this window: a takeover
				// must resume from it or a newer one.
				sw.Newest = *kept
				sw.Why = "the takeover resumed from an older window, or none, than one the fleet answered it keeps (replicated)"
				stale = append(stale, sw)
				continue
			}
			older = append(older, sw)
		} else {
			stale = append(stale, sw)
		}
	}
	return stale, older, checked
}

// newestKept is the upload sent last among those acknowledged as kept by
// the fleet (replicated) before before, nil for none.
func newestKept(acked []Call, before time.Duration) *Call {
	var out *Call
	for i, u := range acked {
		if u.Kept && u.Recv < before && (out == nil || u.Sent > out.Sent) {
			out = &acked[i]
		}
	}
	return out
}

// inWork reports whether lease l was in work at t: granted before t, a
// call of it sent at t or later, and neither released nor refused before.
func (l *leaseCalls) inWork(t time.Duration) bool {
	if l.grant.Recv > t {
		return false
	}
	later := false
	for _, c := range l.calls {
		if c.Recv < t && (c.Kind == KindRelease && c.Acked() || c.Status == 409) {
			return false
		}
		if c.Sent >= t {
			later = true
		}
	}
	return later
}

// faultFigures says, for each fault, which groups the faulted node had in
// work, when each was first granted to another node's worker after the
// fault began (before the next fault began), and what became of the calls
// on the old leases.
// addAdoptions sets each fault's Adopted: the first ownership change to
// another node of each group in work at the faulted node, after the fault
// began and before the next one.
func addAdoptions(figs []FaultFigures, adoptions []Adoption) {
	for i := range figs {
		f := &figs[i]
		until := time.Duration(1<<63 - 1)
		if i+1 < len(figs) {
			until = figs[i+1].Start
		}
		for _, g := range f.InWork {
			for _, a := range adoptions {
				if a.Group == g && a.Node != f.Node && a.At >= f.Start && a.At < until {
					if prev := f.adoption(g); prev < 0 || a.At-f.Start < prev {
						f.setAdoption(Takeover{Group: g, Node: a.Node, After: a.At - f.Start})
					}
				}
			}
		}
	}
}

// adoption is when group was first owned elsewhere, -1 for never.
func (f *FaultFigures) adoption(group string) time.Duration {
	for _, t := range f.Adopted {
		if t.Group == group {
			return t.After
		}
	}
	return -1
}

func (f *FaultFigures) setAdoption(t Takeover) {
	for i := range f.Adopted {
		if f.Adopted[i].Group == t.Group {
			f.Adopted[i] = t
			return
		}
	}
	f.Adopted = append(f.Adopted, t)
}

// movedWithin counts the groups in work at the faulted node that were
// granted to a worker elsewhere, or owned elsewhere (a worker there may
// all be busy), within d of the fault's start.
func (f FaultFigures) movedWithin(d time.Duration) int {
	n := 0
	for _, g := range f.InWork {
		moved := false
		for _, t := range f.TakenOver {
			if t.Group == g && t.After <= d {
				moved = true
			}
		}
		if a := f.adoption(g); a >= 0 && a <= d {
			moved = true
		}
		if moved {
			n++
		}
	}
	return n
}

func faultFigures(calls []Call, faults []Fault, leases map[int]*leaseCalls) []FaultFigures {
	var out []FaultFigures
	ids := slices.Sorted(maps.Keys(leases))
	for i, f := range faults {
		until := time.Duration(1<<63 - 1)
		if i+1 < len(faults) {
			until = faults[i+1].Start
		}
		ff := FaultFigures{Fault: f, OldCalls: map[string]int{}, LastOldAck: -1}
		groups := map[string]bool{}
		for _, id := range ids {
			l := leases[id]
			if l.grant.Node != f.Node || !l.inWork(f.Start) {
				continue
			}
			groups[l.grant.Group] = true
			for _, c := range l.calls {
				if c.Sent < f.Start {
					continue
				}
				switch {
				case c.Acked():
					ff.OldCalls["ack"]++
					ff.LastOldAck = max(ff.LastOldAck, c.Recv-f.Start)
				case c.Status == NoAnswer:
					ff.OldCalls["no answer"]++
				default:
					ff.OldCalls[fmt.Sprint(c.Status)]++
				}
			}
		}
		ff.InWork = slices.Sorted(maps.Keys(groups))
		for _, g := range ff.InWork {
			for _, c := range calls {
				if c.Kind == KindLease && c.Lease != 0 && c.Acked() && c.Group == g && c.Node != f.Node && c.Sent >= f.Start && c.Sent < until {
					ff.TakenOver = append(ff.TakenOver, Takeover{Group: g, Node: c.Node, After: c.Recv - f.Start})
					break
				}
			}
		}
		out = append(out, ff)
	}
	return out
}

// lostFinishes checks every acknowledged finish against the final catalog
// of its group's owner: its range must be done there.
func lostFinishes(calls []Call, final *Final) ([]LostFinish, int) {
	var out []LostFinish
	n := 0
	for _, c := range calls {
		if c.Kind != KindFinish || !c.Acked() || c.Range == nil {
			continue
		}
		n++
		owner := final.Owner(c.Group)
		done := false
		for _, rv := range final.Catalogs[owner][c.Group].Ranges {
			if rv.Status == "done" && rv.Start <= c.Range.Start && c.Range.End <= rv.End {
				done = true
				break
			}
		}
		if !done {
			out = append(out, LostFinish{Group: c.Group, Owner: owner, Finish: c})
		}
	}
	return out, n
}

// unconverged lists where the fleet has not converged. Converged means:
// every node lists every group any node lists, names the same owner for
// it, and lists the same ranges (start, end, status); and every range is
// done.
func unconverged(final *Final) []string {
	var out []string
	groups := map[string]bool{}
	for _, n := range final.Nodes {
		if _, ok := final.Catalogs[n]; !ok {
			out = append(out, fmt.Sprintf("%s: catalog not read", n))
		}
		for g := range final.Catalogs[n] {
			groups[g] = true
		}
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		// Every node is held to the owner's view (to the first node's
		// when the owner's catalog was not read).
		refNode := final.Owner(g)
		ref, ok := final.Catalogs[refNode][g]
		if !ok {
			for _, n := range final.Nodes {
				if v, ok2 := final.Catalogs[n][g]; ok2 {
					ref, refNode, ok = v, n, true
					break
				}
			}
		}
		for _, rv := range ref.Ranges {
			if rv.Status != "done" {
				out = append(out, fmt.Sprintf("group %s: range %s is %s at %s", g, rv.Span, rv.Status, refNode))
			}
		}
		for _, n := range final.Nodes {
			cat, ok := final.Catalogs[n]
			if !ok || n == refNode {
				continue
			}
			v, ok := cat[g]
			if !ok {
				out = append(out, fmt.Sprintf("group %s: not listed at %s", g, n))
				continue
			}
			if v.Owner != ref.Owner {
				out = append(out, fmt.Sprintf("group %s: %s names owner %q, %s names %q", g, refNode, ref.Owner, n, v.Owner))
			}
			if d := diffRanges(ref.Ranges, v.Ranges); d != "" {
				out = append(out, fmt.Sprintf("group %s: %s and %s differ: %s", g, refNode, n, d))
			}
		}
	}
	return out
}

// diffRanges says how two range lists differ ("" when they are the same).
func diffRanges(a, b []RangeView) string {
	index := func(rs []RangeView) map[Span]string {
		m := map[Span]string{}
		for _, r := range rs {
			m[r.Span] = r.Status
		}
		return m
	}
	ma, mb := index(a), index(b)
	var d []string
	for _, s := range slices.SortedFunc(maps.Keys(ma), cmpSpan) {
		if sb, ok := mb[s]; !ok {
			d = append(d, fmt.Sprintf("%s only in the first", s))
		} else if sb != ma[s] {
			d = append(d, fmt.Sprintf("%s %s vs %s", s, ma[s], sb))
		}
	}
	for _, s := range slices.SortedFunc(maps.Keys(mb), cmpSpan) {
		if _, ok := ma[s]; !ok {
			d = append(d, fmt.Sprintf("%s only in the second", s))
		}
	}
	if len(d) > 4 {
		d = append(d[:4], fmt.Sprintf("and %d more", len(d)-4))
	}
	return strings.Join(d, "; ")
}

func cmpSpan(a, b Span) int {
	if a.Start != b.Start {
		return cmp.Compare(a.Start, b.Start)
	}
	return cmp.Compare(a.End, b.End)
}

// windowHoles compares each group's final window at its owner with one
// uninterrupted pass: it must cover every id of every range the owner
// lists.
func windowHoles(final *Final) ([]string, int) {
	var out []string
	n := 0
	owners := map[string]string{}
	for _, node := range final.Nodes {
		for g := range final.Catalogs[node] {
			owners[g] = ""
		}
	}
	for _, g := range slices.Sorted(maps.Keys(owners)) {
		owner := final.Owner(g)
		v, ok := final.Catalogs[owner][g]
		if !ok || len(v.Ranges) == 0 {
			continue
		}
		n++
		if why := final.WindowErrs[g]; why != "" {
			out = append(out, fmt.Sprintf("group %s: its window at %s could not be read: %s", g, owner, why))
			continue
		}
		w := final.Windows[g]
		if w == nil {
			w = &Window{}
		}
		var holes []Span
		for _, rv := range v.Ranges {
			holes = append(holes, w.Missing(rv.Span)...)
		}
		if len(holes) > 0 {
			holes = mergeSpans(holes)
			ids := int64(0)
			for _, h := range holes {
				ids += h.End - h.Start + 1
			}
			shown := holes
			if len(shown) > 5 {
				shown = shown[:5]
			}
			out = append(out, fmt.Sprintf("group %s: the window at %s (%s, next %d) misses %d ids in %d spans: %v", g, owner, w.Upload, w.Next, ids, len(holes), shown))
		}
	}
	return out, n
}

// Print writes the figures and every violation (the first few of each
// kind in full).
func (r *Report) Print(w io.Writer) {
	const show = 8
	fmt.Fprintln(w, "==== fleetfault summary ====")
	fmt.Fprintf(w, "faults by kind: kill %d, pause %d, partition %d, remove %d, upgrade %d\n", r.FaultsByKind["kill"], r.FaultsByKind["pause"], r.FaultsByKind["partition"], r.FaultsByKind["remove"], r.FaultsByKind["upgrade"])
	var lat []time.Duration
	for _, f := range r.Faults {
		first := "none"
		if d := f.FirstTakeover(); d >= 0 {
			first = fmt.Sprintf("first after %.1fs, last after %.1fs", d.Seconds(), f.LastTakeover().Seconds())
			lat = append(lat, d)
		}
		var tk []string
		for _, t := range f.TakenOver {
			tk = append(tk, fmt.Sprintf("%s->%s@%.1fs", t.Group, t.Node, t.After.Seconds()))
		}
		lastAck := ""
		if f.LastOldAck >= 0 {
			lastAck = fmt.Sprintf(", the last ack %.1fs after the fault began", f.LastOldAck.Seconds())
		}
		during := 0
		for _, t := range f.TakenOver {
			if f.Start+t.After <= f.End {
				during++
			}
		}
		owned := ""
		if len(f.Adopted) > 0 {
			ds := make([]time.Duration, len(f.Adopted))
			for i, t := range f.Adopted {
				ds[i] = t.After
			}
			slices.Sort(ds)
			owned = fmt.Sprintf("; owned elsewhere %d (%.1f–%.1fs)", len(ds), ds[0].Seconds(), ds[len(ds)-1].Seconds())
		}
		fmt.Fprintf(w, "  %s: %d group(s) in work there; taken over elsewhere %d, %d of them before the heal (%s) %v%s; later calls on the old leases %v%s\n",
			f.Fault, len(f.InWork), len(f.TakenOver), during, first, tk, owned, fmtCounts(f.OldCalls), lastAck)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		fmt.Fprintf(w, "takeover latency (fault to first grant elsewhere) over %d of %d faults: min %.1fs, median %.1fs, max %.1fs\n",
			len(lat), len(r.Faults), lat[0].Seconds(), lat[len(lat)/2].Seconds(), lat[len(lat)-1].Seconds())
	}
	byKind := map[string][]time.Duration{}
	for _, f := range r.Faults {
		if d := f.FirstTakeover(); d >= 0 {
			byKind[f.Kind] = append(byKind[f.Kind], d)
		}
	}
	for _, k := range []string{"kill", "pause", "partition", "remove", "upgrade"} {
		if ds := byKind[k]; len(ds) > 0 {
			slices.Sort(ds)
			fmt.Fprintf(w, "  %-9s takeover: %d of %d faults, min %.1fs, median %.1fs, max %.1fs\n", k, len(ds), r.FaultsByKind[k],
				ds[0].Seconds(), ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds())
		}
	}
	if b := r.TakeoverBound; b > 0 && !r.RequireTakeover {
		for _, l := range r.Late {
			fmt.Fprintf(w, "  liveness: %s (claim TTL + 5s)\n", l)
		}
		fmt.Fprintf(w, "liveness (reported, not counted as violations): of %d faults longer than %s with groups in work, %d left some not taken over within it\n", r.long, b, len(r.Late))
	}
	r.printRejoins(w, r.TakeoverBound)
	if r.Pressure != nil {
		r.Pressure.Print(w)
	}
	if r.Upgrade != nil {
		r.Upgrade.Print(w)
	}
	fmt.Fprintf(w, "calls by kind/status: %s\n", fmtCounts(r.CallsByKind))
	fmt.Fprintf(w, "leases granted: %d; acknowledged holder calls checked: %d\n", r.Leases, r.AckedHolderCalls)
	section := func(title string, items []string) {
		fmt.Fprintf(w, "%s: %d violation(s)\n", title, len(items))
		for i, s := range items {
			if i == show {
				fmt.Fprintf(w, "    ... and %d more\n", len(items)-show)
				break
			}
			fmt.Fprintf(w, "    %s\n", s)
		}
	}
	section("(1) certain double holding (an acknowledged holder call between two acknowledged calls of another lease)", strs(r.DoubleHoldings))
	section(fmt.Sprintf("(2) acknowledged finishes lost (of %d, checked at each group's owner)", r.AckedFinishes), strs(r.LostFinishes))
	section("(3) convergence (every node has published and folded every change, and lists every group with the same owner and ranges, all done)", r.Unconverged)
	section(fmt.Sprintf("(4) windows a new holder downloaded that were never uploaded, or older than the newest acknowledged upload on the same node with no takeover between, or (a takeover) older than the newest the fleet answered it keeps (of %d downloads)", r.WindowsChecked), strs(r.StaleWindows))
	fmt.Fprintf(w, "    takeovers across nodes that resumed from an older replicated window or none, past no window answered kept (work redone, rule 2; not a violation): %d\n", len(r.OlderWindows))
	section(fmt.Sprintf("(5) final windows against an uninterrupted pass (%d groups)", r.GroupsChecked), r.WindowHoles)
	section("(6) other", r.Other)
	section(fmt.Sprintf("(8) members shown down on a timeline (peer_down) while their lives were renewed: no fault of theirs or of the node showing them, and no lapse of their own life (claims lost) in the claim TTL before (of %d downs shown: %d explained by a fault, %d by the member's own life lapsing)", r.DownsChecked, r.DownsByFault, r.DownsByLapse), strs(r.FalseDowns))
	if r.RequireTakeover {
		section(fmt.Sprintf("(7) takeover: faults longer than %s (claim TTL + 5s) whose groups in work were not all granted or owned elsewhere within it (of %d)", r.TakeoverBound, r.long), r.Late)
	}
	if v := r.Violations(); v > 0 {
		fmt.Fprintf(w, "VERDICT: FAIL (%d violation(s))\n", v)
	} else {
		fmt.Fprintln(w, "VERDICT: PASS")
	}
}

func strs[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
