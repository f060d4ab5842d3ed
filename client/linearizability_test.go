package client_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// Linearizability of the fenced lease. Several worker nodes lease,
// heartbeat, call next on, progress and finish ranges of, and release a
// few groups of a real node while the test moves the node's clock; every call and its answer is
// recorded with when it was sent and when it was answered, and porcupine
// checks that the history has a linearization that the sequential model of
// a fenced lease per group accepts.
//
// The model (leaseModel) is the promise of DESIGN.md's rules 1, 5 and 6:
//
//   - a group is live while its holder's last heartbeat is at most the TTL
//     old (heartbeat_at >= now - TTL), quiet after that;
//   - a lease is granted only for a group nobody holds or whose holder is
//     quiet (a takeover, and the answer says so), at a fence above every
//     fence the group was granted before;
//   - "nothing to lease" (204) only while every group is held by a live
//     holder (the nodes' capacity is the number of groups and every group
//     has planned work, so nothing else can say no);
//   - a holder call (heartbeat, next, progress, finish, release) is
//     refused with 409 lease_lost exactly when the caller does not hold
//     the group at that fence; a success is a heartbeat, a release frees
//     the group;
//   - the ranges (rules 2 to 5, without snapshots): next answers the range
//     in work, else leases the lowest planned one, else says caught up
//     (204); progress is answered only for the caller's range in work
//     (else 409 conflict), moves its resume point forward only and never
//     past end+1 (else 422); finish makes the caller's range in work done
//     (and answers a range it finished before again), else 409 conflict;
//     a release or a new lease of the group plans its leased range again
//     at its resume point. So a finish or a progress acknowledged at a
//     fence that was not the current holder's, or a resume point that went
//     back, is a violation;
//   - a group is leased only while it has open (planned or leased) work,
//     and "nothing to lease" also holds while the groups without a live
//     holder have none.
//
// The clock is part of the model's state: moving it is an operation of the
// history, done by the clients between their calls, so it races their
// calls as a real clock would. That is sound because the node reads its
// clock for a write just before the write runs in its single writer: each
// call takes effect at one instant inside its interval and sees the clock
// of that instant. A holder whose lease lapsed but that nobody took over
// still holds the group: its heartbeat is accepted (the node's behaviour,
// and harmless, since the fence is unchanged).
//
// TestLeaseModelRejects and the violations planted in every recorded
// history show the checker can fail.

// linTTL is the node's lease TTL. The clock moves in whole seconds, so
// heartbeats land exactly on the TTL boundary now and then.
const linTTL = 10 * time.Second

// linMaxGroups bounds the groups of a history (the model's state is an
// array, so states compare with ==).
const linMaxGroups = 4

// Each group's tail is planned as linRanges ranges of linRangeSize ids
// from 1; range i of a group is 1+i*linRangeSize..(i+1)*linRangeSize.
const (
	linRanges    = 8
	linRangeSize = 100
)

func linRangeStart(i int) int64 { return 1 + int64(i)*linRangeSize }
func linRangeEnd(i int) int64   { return int64(i+1) * linRangeSize }

type linKind uint8

const (
	linLease linKind = iota
	linHeartbeat
	linNext
	linRelease
	linTick
	linProgress
	linFinish
)

var linKindNames = [...]string{"lease", "heartbeat", "next", "release", "tick", "progress", "finish"}

func (k linKind) String() string { return linKindNames[k] }

// linInput is a call. Node is the caller (1-based); Group and Fence name
// the lease of a holder call; Range (the range's index in its group) and
// Next (the resume point, for progress) name a range call's range; Tick
// is how far the clock moves (ms). Only, in a lease call, is the one group
// a partition checks a "nothing to lease" answer against; -1 checks every
// group.
type linInput struct {
	Kind  linKind
	Node  int
	Group int
	Fence int64
	Range int
	Next  int64
	Tick  int64
	Only  int
}

// linRefusal is how a holder call was refused.
type linRefusal uint8

const (
	linLeaseLost     linRefusal = iota // 409 lease_lost
	linConflict                        // 409 conflict: not the caller's range in work
	linUnprocessable                   // 422: a resume point backwards or past the end
)

var linRefusalNames = [...]string{"lease_lost", "conflict", "unprocessable"}

// linOutput is an answer. OK: a holder call was answered 2xx, a lease was
// granted (Group, Fence, Takeover); else a holder call's Refusal. Range is
// the range next answered (its index in the group, -1 caught up) and Next
// the resume point next, progress or finish answered with.
type linOutput struct {
	OK       bool
	Group    int
	Fence    int64
	Takeover bool
	Refusal  linRefusal
	Range    int
	Next     int64
}

// linGroupLease is one group's lease in the model: Holder 0 is nobody.
// Work is the index of the holder's range in work, -1 none.
type linGroupLease struct {
	Holder int
	Fence  int64
	Beat   int64 // ms, the model's clock at the last heartbeat
	Work   int
}

// linRangeState is one range in the model. Node is who it is leased to,
// or who finished it; Next its resume point. Small fields: the whole
// check copies and compares states a great many times.
type linRangeState struct {
	Status linStatus
	Node   int8
	Next   int32
}

type linStatus uint8

const (
	linPlanned linStatus = iota
	linLeased
	linDone
)

type linState struct {
	Now    int64 // ms since the history began
	Groups [linMaxGroups]linGroupLease
	Ranges [linMaxGroups][linRanges]linRangeState
}

// linInitial is the history's start: every group free at fence 0, every
// range planned at its start.
func linInitial() linState {
	var s linState
	for g := range s.Groups {
		s.Groups[g].Work = -1
		for i := range s.Ranges[g] {
			s.Ranges[g][i].Next = int32(linRangeStart(i))
		}
	}
	return s
}

// open reports whether group g has planned or leased work: only such a
// group is leased.
func (s *linState) open(g int) bool {
	for _, r := range s.Ranges[g] {
		if r.Status != linDone {
			return true
		}
	}
	return false
}

// replan is a release or a new lease of group g without a snapshot: its
// leased ranges are planned again at their resume points.
func (s *linState) replan(g int) {
	for i := range s.Ranges[g] {
		if s.Ranges[g][i].Status == linLeased {
			s.Ranges[g][i] = linRangeState{Status: linPlanned, Next: s.Ranges[g][i].Next}
		}
	}
	s.Groups[g].Work = -1
}

// holderStep is a holder call by the holder of in.Group at its fence: it
// reports whether out is a legal answer, and the state after it.
func (s linState) holderStep(in linInput, out linOutput) (bool, linState) {
	g := in.Group
	l := &s.Groups[g]
	refused := func(want linRefusal) (bool, linState) { return !out.OK && out.Refusal == want, s }
	beat := func() { l.Beat = s.Now }
	switch in.Kind {
	case linHeartbeat:
		beat()
		return out.OK, s
	case linRelease:
		s.Groups[g] = linGroupLease{Fence: l.Fence}
		s.replan(g)
		return out.OK, s
	case linNext:
		want := -1
		if l.Work >= 0 && s.Ranges[g][l.Work].Status == linLeased && int(s.Ranges[g][l.Work].Node) == in.Node {
			want = l.Work
		} else {
			for i, r := range s.Ranges[g] {
				if r.Status == linPlanned {
					want = i
					break
				}
			}
		}
		if !out.OK || out.Range != want || want >= 0 && out.Next != int64(s.Ranges[g][want].Next) {
			return false, s
		}
		beat()
		l.Work = want
		if want >= 0 {
			s.Ranges[g][want].Status, s.Ranges[g][want].Node = linLeased, int8(in.Node)
		}
		return true, s
	}
	if in.Range < 0 || in.Range >= linRanges {
		return false, s
	}
	r := &s.Ranges[g][in.Range]
	inWork := r.Status == linLeased && int(r.Node) == in.Node
	switch in.Kind {
	case linProgress:
		switch {
		case !inWork:
			return refused(linConflict)
		case in.Next < int64(r.Next) || in.Next > linRangeEnd(in.Range)+1:
			return refused(linUnprocessable)
		case !out.OK || out.Next != in.Next:
			return false, s
		}
		beat()
		r.Next = int32(in.Next)
		return true, s
	case linFinish:
		switch {
		case r.Status == linDone && int(r.Node) == in.Node:
			// Finished by this node before: answered again.
		case !inWork:
			return refused(linConflict)
		}
		if !out.OK || out.Next != linRangeEnd(in.Range)+1 {
			return false, s
		}
		beat()
		r.Status, r.Next = linDone, int32(linRangeEnd(in.Range)+1)
		if l.Work == in.Range {
			l.Work = -1
		}
		return true, s
	}
	return false, s
}

// leaseModel is the sequential model of a fenced lease per group over
// groups groups with the given TTL. partition splits a history by group:
// clock moves and "nothing to lease" answers go to every partition (the
// latter checked against that partition's group only), so the partitioned
// check is a little weaker than the whole one for those; the test runs
// both.
func leaseModel(ttl time.Duration, groups int, partition bool) porcupine.Model {
	ttlMS := ttl.Milliseconds()
	live := func(l linGroupLease, now int64) bool { return l.Holder != 0 && l.Beat >= now-ttlMS }
	m := porcupine.Model{
		Init: func() any { return linInitial() },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(linState), input.(linInput), output.(linOutput)
			switch in.Kind {
			case linTick:
				s.Now += in.Tick
				return true, s
			case linLease:
				if !out.OK {
					for g := range groups {
						if (in.Only < 0 || in.Only == g) && !live(s.Groups[g], s.Now) && s.open(g) {
							return false, s
						}
					}
					return true, s
				}
				if out.Group < 0 || out.Group >= groups {
					return false, s
				}
				l := s.Groups[out.Group]
				if live(l, s.Now) || !s.open(out.Group) || out.Fence <= l.Fence || out.Takeover != (l.Holder != 0) {
					return false, s
				}
				s.Groups[out.Group] = linGroupLease{Holder: in.Node, Fence: out.Fence, Beat: s.Now}
				s.replan(out.Group)
				return true, s
			default:
				l := s.Groups[in.Group]
				if l.Holder != in.Node || l.Fence != in.Fence {
					return !out.OK && out.Refusal == linLeaseLost, s
				}
				return s.holderStep(in, out)
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			switch in.Kind {
			case linTick:
				return fmt.Sprintf("clock +%gs", float64(in.Tick)/1000)
			case linLease:
				switch {
				case !out.OK:
					return fmt.Sprintf("n%d lease → nothing", in.Node)
				case out.Takeover:
					return fmt.Sprintf("n%d lease → g%d@%d takeover", in.Node, out.Group, out.Fence)
				default:
					return fmt.Sprintf("n%d lease → g%d@%d", in.Node, out.Group, out.Fence)
				}
			default:
				res := "ok"
				if !out.OK {
					res = linRefusalNames[out.Refusal]
				}
				switch in.Kind {
				case linNext:
					if out.OK && out.Range < 0 {
						res = "caught up"
					} else if out.OK {
						res = fmt.Sprintf("r%d at %d", out.Range, out.Next)
					}
				case linProgress:
					return fmt.Sprintf("n%d progress g%d@%d r%d to %d → %s", in.Node, in.Group, in.Fence, in.Range, in.Next, res)
				case linFinish:
					return fmt.Sprintf("n%d finish g%d@%d r%d → %s", in.Node, in.Group, in.Fence, in.Range, res)
				}
				return fmt.Sprintf("n%d %s g%d@%d → %s", in.Node, in.Kind, in.Group, in.Fence, res)
			}
		},
		DescribeState: func(state any) string {
			s := state.(linState)
			parts := []string{fmt.Sprintf("t=%gs", float64(s.Now)/1000)}
			for g := range groups {
				l := s.Groups[g]
				switch {
				case l.Holder == 0:
					parts = append(parts, fmt.Sprintf("g%d free@%d", g, l.Fence))
				default:
					parts = append(parts, fmt.Sprintf("g%d n%d@%d beat %gs work r%d", g, l.Holder, l.Fence, float64(l.Beat)/1000, l.Work))
				}
				var rs []string
				for i, r := range s.Ranges[g] {
					switch r.Status {
					case linLeased:
						rs = append(rs, fmt.Sprintf("r%d n%d at %d", i, r.Node, r.Next))
					case linDone:
						rs = append(rs, fmt.Sprintf("r%d done n%d", i, r.Node))
					default:
						if int64(r.Next) != linRangeStart(i) {
							rs = append(rs, fmt.Sprintf("r%d at %d", i, r.Next))
						}
					}
				}
				if len(rs) > 0 {
					parts = append(parts, "["+strings.Join(rs, ", ")+"]")
				}
			}
			return strings.Join(parts, " ")
		},
	}
	if partition {
		m.Partition = func(h []porcupine.Operation) [][]porcupine.Operation {
			parts := make([][]porcupine.Operation, groups)
			for _, op := range h {
				in, out := op.Input.(linInput), op.Output.(linOutput)
				switch {
				case in.Kind == linTick:
					for g := range parts {
						parts[g] = append(parts[g], op)
					}
				case in.Kind == linLease && !out.OK:
					for g := range parts {
						o, i := op, in
						i.Only = g
						o.Input = i
						parts[g] = append(parts[g], o)
					}
				case in.Kind == linLease && out.Group >= 0 && out.Group < groups:
					parts[out.Group] = append(parts[out.Group], op)
				case in.Kind == linLease:
					parts[0] = append(parts[0], op) // an unknown group: illegal anywhere
				default:
					parts[in.Group] = append(parts[in.Group], op)
				}
			}
			return parts
		}
	}
	return m
}

// linRecorder collects a history. Timestamps come from one counter, so
// "answered before sent" is exact.
type linRecorder struct {
	seq atomic.Int64
	mu  sync.Mutex
	ops []porcupine.Operation
}

func (r *linRecorder) record(clientID int, in linInput, call func() (linOutput, error)) (linOutput, error) {
	start := r.seq.Add(1)
	out, err := call()
	end := r.seq.Add(1)
	if err != nil {
		return out, err
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: clientID, Input: in, Call: start, Output: out, Return: end})
	r.mu.Unlock()
	return out, nil
}

// linRangeIDs maps the model's ranges (group index, range index) to the
// node's range ids and back.
type linRangeIDs struct {
	ids   [linMaxGroups][linRanges]int64
	index map[int64][2]int
}

// fencedCall makes the holder call in on group groupID; a refusal
// (lease_lost, conflict, unprocessable) is an answer (OK false), not an
// error.
func fencedCall(c *client.Client, ids *linRangeIDs, in linInput, groupID int64) (linOutput, error) {
	var err error
	var r *leasehold.Range
	switch in.Kind {
	case linHeartbeat:
		_, err = c.Heartbeat(bg, groupID, in.Fence)
	case linNext:
		r, err = c.Next(bg, groupID, in.Fence)
	case linRelease:
		err = c.Release(bg, groupID, in.Fence)
	case linProgress:
		r, err = c.Progress(bg, ids.ids[in.Group][in.Range], in.Fence, in.Next)
	case linFinish:
		r, err = c.Finish(bg, ids.ids[in.Group][in.Range], in.Fence, 0)
	default:
		return linOutput{}, fmt.Errorf("%s is not a holder call", in.Kind)
	}
	switch {
	case errors.Is(err, leasehold.ErrLeaseLost):
		return linOutput{Refusal: linLeaseLost}, nil
	case errors.Is(err, leasehold.ErrConflict):
		return linOutput{Refusal: linConflict}, nil
	case errors.Is(err, leasehold.ErrUnprocessable):
		return linOutput{Refusal: linUnprocessable}, nil
	case err != nil:
		return linOutput{}, err
	}
	out := linOutput{OK: true, Range: -1}
	if r != nil {
		out.Next = r.Next
		if in.Kind == linNext {
			out.Range = -2 // not a range of the group: illegal
			if at, ok := ids.index[r.ID]; ok && at[0] == in.Group {
				out.Range = at[1]
			}
		}
	}
	return out, nil
}

// linConfig shapes a recorded history.
type linConfig struct {
	Seed       uint64
	Groups     int
	Nodes      int
	OpsPerNode int
}

// linFigures count what a history exercised.
type linFigures struct {
	Ops, Grants, Takeovers, Nothing, Refused, Ticks int
	StaleTried, Forgotten                           int
	Progressed, Finished, Conflicts, Unprocessable  int
	Injected                                        int
}

func (f *linFigures) add(o linFigures) {
	f.Ops += o.Ops
	f.Grants += o.Grants
	f.Takeovers += o.Takeovers
	f.Nothing += o.Nothing
	f.Refused += o.Refused
	f.Ticks += o.Ticks
	f.StaleTried += o.StaleTried
	f.Forgotten += o.Forgotten
	f.Progressed += o.Progressed
	f.Finished += o.Finished
	f.Conflicts += o.Conflicts
	f.Unprocessable += o.Unprocessable
	f.Injected += o.Injected
}

// recordLeaseHistory runs cfg.Nodes worker nodes against a new real node
// with a test clock and returns the history. Each worker, in a loop:
// leases; heartbeats, calls next on, progresses or finishes its range in
// work of, or releases a lease it believes it holds; calls with a fence it
// or another worker was granted earlier (a stale call, mostly refused);
// goes quiet on what it holds, as a crashed worker would; or moves the
// clock one to six seconds. Leases it neglects lapse and are taken over.
// Any answer other than success, lease_lost, conflict or unprocessable
// fails the test.
func recordLeaseHistory(t *testing.T, cfg linConfig) ([]porcupine.Operation, linFigures) {
	t.Helper()
	if cfg.Groups > linMaxGroups {
		t.Fatalf("%d groups: the model holds at most %d", cfg.Groups, linMaxGroups)
	}
	clock := nodetest.NewClock()
	e := start(t, nodetest.Options{LeaseTTL: linTTL, Clock: clock.Now, MaxAttempts: 1 << 30})
	groupIndex := map[int64]int{}
	ids := &linRangeIDs{index: map[int64][2]int{}}
	for g := range cfg.Groups {
		name := fmt.Sprintf("lin-%d", g)
		size, first := int64(linRangeSize), int64(1)
		gr, _, err := e.admin.PutGroup(bg, name, client.GroupSpec{RangeSize: &size, Start: &first})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.PlanTail(bg, name, linRangeEnd(linRanges-1)); err != nil {
			t.Fatal(err)
		}
		groupIndex[gr.ID] = g
		rs, err := e.admin.AllRanges(bg, name, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != linRanges {
			t.Fatalf("group %s has %d ranges, want %d", name, len(rs), linRanges)
		}
		for _, r := range rs {
			i := int((r.Start - 1) / linRangeSize)
			if r.Start != linRangeStart(i) || r.End != linRangeEnd(i) {
				t.Fatalf("group %s: range %d..%d, want ranges of %d from 1", name, r.Start, r.End, linRangeSize)
			}
			ids.ids[g][i] = r.ID
			ids.index[r.ID] = [2]int{g, i}
		}
	}
	workers := make([]*client.Client, cfg.Nodes)
	for i := range workers {
		c, _ := e.workerClient(fmt.Sprintf("lin-w%d", i+1), int64(cfg.Groups), nil)
		c.Retry = client.Backoff{Attempts: 1} // one call, one request
		workers[i] = c
	}

	// grant is a lease as its worker knows it: with its range in work
	// (work -1: none) and that range's resume point.
	type grant struct {
		node, group int
		id, fence   int64
		work        int
		next        int64
	}
	var (
		rec     linRecorder
		grantMu sync.Mutex
		granted []grant // every grant of the history, for stale calls
		figMu   sync.Mutex
		fig     linFigures
	)
	count := func(f func(*linFigures)) { figMu.Lock(); f(&fig); figMu.Unlock() }
	groupIDs := map[int]int64{}
	for id, g := range groupIndex {
		groupIDs[g] = id
	}

	var wg sync.WaitGroup
	errs := make(chan error, cfg.Nodes)
	for i, c := range workers {
		node := i + 1
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(node)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []grant
			// holderCall runs one fenced call and returns its answer.
			holderCall := func(in linInput, groupID int64) (linOutput, error) {
				in.Node = node
				out, err := rec.record(i, in, func() (linOutput, error) { return fencedCall(c, ids, in, groupID) })
				if err != nil {
					return out, fmt.Errorf("node %d: %s of group %d at fence %d: %w", node, in.Kind, groupID, in.Fence, err)
				}
				count(func(f *linFigures) {
					switch {
					case !out.OK && out.Refusal == linLeaseLost:
						f.Refused++
					case !out.OK && out.Refusal == linConflict:
						f.Conflicts++
					case !out.OK:
						f.Unprocessable++
					case in.Kind == linProgress:
						f.Progressed++
					case in.Kind == linFinish:
						f.Finished++
					}
				})
				return out, nil
			}
			drop := func(k int) { held = append(held[:k], held[k+1:]...) }
			for range cfg.OpsPerNode {
				r := rng.IntN(100)
				switch {
				case r < 12:
					d := int64(1+rng.IntN(6)) * 1000
					rec.record(i, linInput{Kind: linTick, Tick: d}, func() (linOutput, error) {
						clock.Advance(time.Duration(d) * time.Millisecond)
						return linOutput{}, nil
					})
					count(func(f *linFigures) { f.Ticks++ })
				case r < 30 || len(held) == 0 && r < 60:
					var gr *client.Grant
					out, err := rec.record(i, linInput{Kind: linLease, Node: node, Only: -1}, func() (linOutput, error) {
						var err error
						if gr, err = c.Lease(bg); err != nil || gr == nil {
							return linOutput{}, err
						}
						g, ok := groupIndex[gr.Group.ID]
						if !ok {
							g = -1
						}
						return linOutput{OK: true, Group: g, Fence: gr.Fence, Takeover: gr.Takeover}, nil
					})
					if err != nil {
						errs <- fmt.Errorf("node %d: lease: %w", node, err)
						return
					}
					if !out.OK {
						count(func(f *linFigures) { f.Nothing++ })
						continue
					}
					g := grant{node: node, group: out.Group, id: gr.Group.ID, fence: gr.Fence, work: -1}
					held = append(held, g)
					grantMu.Lock()
					granted = append(granted, g)
					grantMu.Unlock()
					count(func(f *linFigures) {
						f.Grants++
						if gr.Takeover {
							f.Takeovers++
						}
					})
				case r < 36:
					// The node goes quiet on what it holds, as if it crashed:
					// those leases lapse and are taken over.
					held = held[:0]
					count(func(f *linFigures) { f.Forgotten++ })
				case r < 48:
					// A stale call: a fence this node or another was granted
					// at some time, called as this node, on the group or on
					// one of its ranges.
					grantMu.Lock()
					var g grant
					ok := len(granted) > 0
					if ok {
						g = granted[rng.IntN(len(granted))]
					}
					grantMu.Unlock()
					if !ok {
						continue
					}
					in := linInput{Kind: linHeartbeat, Group: g.group, Fence: g.fence, Range: rng.IntN(linRanges)}
					switch x := rng.IntN(6); x {
					case 0:
						in.Kind = linRelease
					case 1, 2:
						in.Kind = linFinish
					case 3:
						in.Kind = linProgress
						in.Next = linRangeStart(in.Range) + int64(rng.IntN(linRangeSize))
					}
					count(func(f *linFigures) { f.StaleTried++ })
					if _, err := holderCall(in, g.id); err != nil {
						errs <- err
						return
					}
				case len(held) > 0:
					k := rng.IntN(len(held))
					g := &held[k]
					in := linInput{Kind: linHeartbeat, Group: g.group, Fence: g.fence, Range: g.work}
					switch x := rng.IntN(20); {
					case x < 4 || x < 14 && g.work < 0:
						in.Kind = linNext
					case x < 7:
						in.Kind = linRelease
					case x < 11:
						in.Kind = linProgress
						in.Next = min(g.next+1+int64(rng.IntN(linRangeSize/2)), linRangeEnd(g.work)+1)
						if rng.IntN(8) == 0 {
							in.Next = g.next - 1 // backwards: unprocessable, unless at its start
						}
					case x < 14:
						in.Kind = linFinish
					}
					out, err := holderCall(in, g.id)
					if err != nil {
						errs <- err
						return
					}
					switch {
					case !out.OK && out.Refusal == linLeaseLost || in.Kind == linRelease:
						drop(k)
					case !out.OK && out.Refusal == linConflict:
						g.work = -1
					case !out.OK:
					case in.Kind == linNext:
						g.work, g.next = max(out.Range, -1), out.Next
					case in.Kind == linProgress:
						g.next = out.Next
					case in.Kind == linFinish:
						g.work = -1
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Stale calls after everything: the first grant a later grant of its
	// group superseded, called by its node, as a heartbeat and as a finish
	// of the group's first range. The node must refuse both, and the
	// history then surely holds refusals that no linearization can excuse.
	for _, old := range granted {
		if !slices.ContainsFunc(granted, func(g grant) bool { return g.group == old.group && g.fence > old.fence }) {
			continue
		}
		c := workers[old.node-1]
		for _, kind := range []linKind{linHeartbeat, linFinish} {
			in := linInput{Kind: kind, Node: old.node, Group: old.group, Fence: old.fence}
			if _, err := rec.record(old.node-1, in, func() (linOutput, error) { return fencedCall(c, ids, in, old.id) }); err != nil {
				t.Fatalf("node %d: stale %s of group %d at fence %d: %v", old.node, kind, old.id, old.fence, err)
			}
		}
		break
	}
	fig.Ops = len(rec.ops)
	return rec.ops, fig
}

// checkLeaseHistory checks ops against the model, partitioned by group and
// whole, and on failure writes porcupine's visualization to the artifacts
// directory. It returns the time the checks took.
func checkLeaseHistory(t *testing.T, name string, groups int, ops []porcupine.Operation) time.Duration {
	t.Helper()
	var took time.Duration
	for _, partition := range []bool{true, false} {
		model := leaseModel(linTTL, groups, partition)
		began := time.Now()
		res, info := porcupine.CheckOperationsVerbose(model, ops, 0)
		took += time.Since(began)
		if res == porcupine.Ok {
			continue
		}
		path := filepath.Join(linArtifacts(t), fmt.Sprintf("linearizability-%s-partition-%t.html", name, partition))
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Errorf("writing the visualization: %v", err)
		}
		t.Fatalf("history %s (%d operations, partitioned %t) is not linearizable: %s; see %s", name, len(ops), partition, res, path)
	}
	return took
}

// linArtifacts is where failed histories are drawn: $LEASEHOLD_ARTIFACTS,
// else the repository's artifacts/ (ignored by git).
func linArtifacts(t *testing.T) string {
	dir := os.Getenv("LEASEHOLD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLeaseLinearizability records concurrent histories against real nodes
// and checks each against the fenced lease model. LEASEHOLD_LIN_HISTORIES
// sets how many (default 8, 2 with -short).
func TestLeaseLinearizability(t *testing.T) {
	t.Parallel()
	histories := 8
	if testing.Short() {
		histories = 2
	}
	if v := os.Getenv("LEASEHOLD_LIN_HISTORIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LEASEHOLD_LIN_HISTORIES=%q: want a positive number", v)
		}
		histories = n
	}
	const groups, nodes, opsPerNode = 4, 6, 50
	var total linFigures
	var checking, rejecting time.Duration
	caught := map[string]int{}
	for h := range histories {
		cfg := linConfig{Seed: uint64(h + 1), Groups: groups, Nodes: nodes, OpsPerNode: opsPerNode}
		if h == 0 {
			// The first history's planted violations also go through the
			// whole check, whose exhaustive search of a rejected history
			// grows fast with its length: it is kept short.
			cfg.OpsPerNode = opsPerNode / 2
		}
		ops, fig := recordLeaseHistory(t, cfg)
		took := checkLeaseHistory(t, fmt.Sprintf("seed%d", cfg.Seed), groups, ops)
		checking += took
		// The same checker must reject the history with a violation planted.
		began := time.Now()
		for _, inj := range linInjections(ops) {
			// The whole check's exhaustive search of a rejected history is
			// slow under -race; it runs on the first (short) history only,
			// which is also drawn, to show a failure leaves a picture
			// behind.
			checkPlanted(t, cfg.Seed, groups, inj, true, h == 0)
			if h == 0 {
				checkPlanted(t, cfg.Seed, groups, inj, false, false)
			}
			caught[inj.name]++
			fig.Injected++
		}
		rejecting += time.Since(began)
		total.add(fig)
		t.Logf("history seed %d: %d operations, %d grants (%d takeovers), %d nothing to lease, %d refused lease_lost (%d stale calls), %d progressed, %d finished, %d conflict, %d unprocessable, %d clock moves, %d nodes gone quiet; linearizable, checked in %s; %d planted violations rejected",
			cfg.Seed, fig.Ops, fig.Grants, fig.Takeovers, fig.Nothing, fig.Refused, fig.StaleTried, fig.Progressed, fig.Finished, fig.Conflicts, fig.Unprocessable, fig.Ticks, fig.Forgotten, took.Round(time.Millisecond), fig.Injected)
	}
	t.Logf("%d histories linearizable: %d operations, %d grants, %d takeovers, %d nothing to lease, %d refused, %d progressed, %d finished; checking took %s; %d planted violations rejected in %s (%v)",
		histories, total.Ops, total.Grants, total.Takeovers, total.Nothing, total.Refused, total.Progressed, total.Finished, checking.Round(time.Millisecond), total.Injected, rejecting.Round(time.Millisecond), caught)
	for _, name := range []string{"FenceReused", "SupersededFenceAccepted", "RefusedCallAccepted", "ReleaseLost", "StaleFinishAccepted", "ProgressWentBack"} {
		if caught[name] == 0 {
			t.Errorf("no history offered a place to plant %s", name)
		}
	}
	if total.Takeovers == 0 {
		t.Error("no takeover happened: the histories did not exercise the TTL")
	}
	if total.Refused == 0 {
		t.Error("no call was refused: the histories did not exercise the fence")
	}
	if total.Progressed == 0 || total.Finished == 0 {
		t.Errorf("%d progress and %d finish calls succeeded: the histories did not exercise the ranges", total.Progressed, total.Finished)
	}
}

// linWholeBound bounds the whole check's search of a history with a
// violation planted: with the ranges in the model its exhaustive search
// of a rejected history grows fast with the history's concurrency. Within
// the bound it must reject the history; past it, it must not have accepted
// it (the partitioned check, always run first, must reject it).
const linWholeBound = 500 * time.Millisecond

// checkPlanted checks that a history with a violation planted is rejected,
// and with draw that porcupine can draw the rejection.
func checkPlanted(t *testing.T, seed uint64, groups int, inj linInjection, partition, draw bool) {
	t.Helper()
	model := leaseModel(linTTL, groups, partition)
	if !draw {
		bound := time.Duration(0)
		if !partition {
			bound = linWholeBound
		}
		switch got := porcupine.CheckOperationsTimeout(model, inj.ops, bound); {
		case got == porcupine.Unknown && !partition:
			t.Logf("history seed %d with %s planted: the whole check did not finish its search in %s (the partitioned one rejected it)", seed, inj.name, bound)
		case got != porcupine.Illegal:
			t.Errorf("history seed %d with %s planted, partitioned %t: got %s, want %s", seed, inj.name, partition, got, porcupine.Illegal)
		}
		return
	}
	got, info := porcupine.CheckOperationsVerbose(model, inj.ops, 0)
	if got != porcupine.Illegal {
		t.Errorf("history seed %d with %s planted, partitioned %t: got %s, want %s", seed, inj.name, partition, got, porcupine.Illegal)
	}
	path := filepath.Join(t.TempDir(), inj.name+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Errorf("drawing %s: %v", inj.name, err)
	} else if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Errorf("drawing %s: %v, %v", inj.name, st, err)
	}
}

// linInjection is a violation planted in a real, linearizable history.
type linInjection struct {
	name string
	ops  []porcupine.Operation
}

// linInjections plants violations in ops, each of which no linearization
// can excuse; a kind of violation the history offers no place for is left
// out.
//
//   - FenceReused: after everything, another node is granted a group at the
//     fence of the group's first grant.
//   - SupersededFenceAccepted: after everything, the holder of a group's
//     first grant heartbeats at that fence, after a later grant at a higher
//     fence, and is told ok.
//   - RefusedCallAccepted: a call the node refused, at a fence a later grant
//     had superseded before the call was sent, is answered ok instead.
//   - ReleaseLost: a release the node accepted is left out, so the next
//     grant of the group, made to a free group, is a second holder.
//   - StaleFinishAccepted: a finish the node refused, at a fence a later
//     grant had superseded before the call was sent, is answered done.
//   - ProgressWentBack: after everything, a range's resume point is moved
//     to one below a resume point acknowledged earlier, by the same caller
//     at the same fence, and answered ok.
func linInjections(ops []porcupine.Operation) []linInjection {
	type grantOp struct {
		node, group int
		fence       int64
		ret         int64
	}
	var grants []grantOp
	var end int64
	for _, op := range ops {
		end = max(end, op.Return)
		in, out := op.Input.(linInput), op.Output.(linOutput)
		if in.Kind == linLease && out.OK {
			grants = append(grants, grantOp{in.Node, out.Group, out.Fence, op.Return})
		}
	}
	superseded := func(group int, fence int64, before int64) bool {
		return slices.ContainsFunc(grants, func(g grantOp) bool { return g.group == group && g.fence > fence && g.ret < before })
	}
	appended := func(op porcupine.Operation) []porcupine.Operation {
		op.Call, op.Return = end+1, end+2
		return append(slices.Clone(ops), op)
	}
	var out []linInjection
	if len(grants) > 0 {
		first := grants[0]
		other := first.node + 1
		out = append(out, linInjection{name: "FenceReused", ops: appended(porcupine.Operation{
			ClientId: other - 1,
			Input:    linInput{Kind: linLease, Node: other, Only: -1},
			Output:   linOutput{OK: true, Group: first.group, Fence: first.fence, Takeover: true},
		})})
	}
	for _, g := range grants {
		if superseded(g.group, g.fence, end+1) {
			out = append(out, linInjection{name: "SupersededFenceAccepted", ops: appended(porcupine.Operation{
				ClientId: g.node - 1,
				Input:    linInput{Kind: linHeartbeat, Node: g.node, Group: g.group, Fence: g.fence},
				Output:   linOutput{OK: true},
			})})
			break
		}
	}
	for i, op := range ops {
		in, res := op.Input.(linInput), op.Output.(linOutput)
		if in.Kind != linLease && in.Kind != linTick && !res.OK && superseded(in.Group, in.Fence, op.Call) {
			h := slices.Clone(ops)
			h[i].Output = linOutput{OK: true}
			out = append(out, linInjection{name: "RefusedCallAccepted", ops: h})
			break
		}
	}
	for i, op := range ops {
		in, res := op.Input.(linInput), op.Output.(linOutput)
		if in.Kind == linRelease && res.OK && superseded(in.Group, in.Fence, end+1) {
			out = append(out, linInjection{name: "ReleaseLost", ops: slices.Delete(slices.Clone(ops), i, i+1)})
			break
		}
	}
	for i, op := range ops {
		in, res := op.Input.(linInput), op.Output.(linOutput)
		if in.Kind == linFinish && !res.OK && res.Refusal == linLeaseLost && superseded(in.Group, in.Fence, op.Call) {
			h := slices.Clone(ops)
			h[i].Output = linOutput{OK: true, Next: linRangeEnd(in.Range) + 1}
			out = append(out, linInjection{name: "StaleFinishAccepted", ops: h})
			break
		}
	}
	for _, op := range ops {
		in, res := op.Input.(linInput), op.Output.(linOutput)
		if in.Kind == linProgress && res.OK && in.Next > linRangeStart(in.Range) {
			back := in
			back.Next--
			out = append(out, linInjection{name: "ProgressWentBack", ops: appended(porcupine.Operation{
				ClientId: op.ClientId, Input: back, Output: linOutput{OK: true, Next: back.Next},
			})})
			break
		}
	}
	return out
}

// linStep is one call of a hand-written history: its input and answer,
// and how many of the steps after it start before it is answered.
type linStep struct {
	in    linInput
	out   linOutput
	spans int
}

func stepLease(node, group int, fence int64, takeover bool) linStep {
	return linStep{in: linInput{Kind: linLease, Node: node, Only: -1}, out: linOutput{OK: true, Group: group, Fence: fence, Takeover: takeover}}
}

func stepNothing(node int) linStep {
	return linStep{in: linInput{Kind: linLease, Node: node, Only: -1}}
}

func stepHolder(kind linKind, node, group int, fence int64, ok bool) linStep {
	return linStep{in: linInput{Kind: kind, Node: node, Group: group, Fence: fence}, out: linOutput{OK: ok}}
}

// stepNext is a next answered by the range index (-1 caught up) at resume
// point at.
func stepNext(node, group int, fence int64, rng int, at int64) linStep {
	return linStep{in: linInput{Kind: linNext, Node: node, Group: group, Fence: fence}, out: linOutput{OK: true, Range: rng, Next: at}}
}

// stepProgress is a progress of range rng to next, answered ok or refused.
func stepProgress(node, group int, fence int64, rng int, next int64, ok bool, refusal linRefusal) linStep {
	in := linInput{Kind: linProgress, Node: node, Group: group, Fence: fence, Range: rng, Next: next}
	if ok {
		return linStep{in: in, out: linOutput{OK: true, Next: next}}
	}
	return linStep{in: in, out: linOutput{Refusal: refusal}}
}

// stepFinish is a finish of range rng, answered done or refused.
func stepFinish(node, group int, fence int64, rng int, ok bool, refusal linRefusal) linStep {
	in := linInput{Kind: linFinish, Node: node, Group: group, Fence: fence, Range: rng}
	if ok {
		return linStep{in: in, out: linOutput{OK: true, Next: linRangeEnd(rng) + 1}}
	}
	return linStep{in: in, out: linOutput{Refusal: refusal}}
}

func stepTick(seconds float64) linStep {
	return linStep{in: linInput{Kind: linTick, Tick: int64(seconds * 1000)}}
}

// during makes s still running while the next n steps run.
func (s linStep) during(n int) linStep { s.spans = n; return s }

// linHistory lays steps out in time: step i runs over [10i, 10i+5], or up
// to just after the steps it spans.
func linHistory(steps ...linStep) []porcupine.Operation {
	var ops []porcupine.Operation
	for i, s := range steps {
		call := int64(10 * i)
		ret := int64(10*(i+s.spans)) + 5 + int64(min(s.spans, 1))*2
		ops = append(ops, porcupine.Operation{ClientId: max(s.in.Node-1, 0), Input: s.in, Call: call, Output: s.out, Return: ret})
	}
	return ops
}

// TestLeaseModelRejects shows the checker can fail: hand-written histories
// of each violation the model is there to catch are rejected, and the
// legal histories next to them are accepted, partitioned and whole.
func TestLeaseModelRejects(t *testing.T) {
	t.Parallel()
	const hb, rel, next = linHeartbeat, linRelease, linNext
	tests := []struct {
		name   string
		groups int
		ops    []porcupine.Operation
		// want is the verdict of the partitioned check; whole, when set,
		// that of the whole one.
		want, whole porcupine.CheckResult
	}{
		{"OK/TakeoverAfterTTL", 1, linHistory(stepLease(1, 0, 1, false), stepTick(10.001), stepLease(2, 0, 2, true),
			stepHolder(hb, 1, 0, 1, false), stepHolder(hb, 2, 0, 2, true)), porcupine.Ok, ""},
		{"OK/ReleaseThenLease", 1, linHistory(stepLease(1, 0, 1, false), stepHolder(rel, 1, 0, 1, true), stepLease(2, 0, 2, false),
			stepHolder(rel, 1, 0, 1, false)), porcupine.Ok, ""},
		{"OK/LapsedHolderNotTakenOverStillHolds", 1, linHistory(stepLease(1, 0, 1, false), stepTick(30),
			stepHolder(hb, 1, 0, 1, true), stepNothing(2)), porcupine.Ok, ""},
		{"OK/NextIsAHeartbeat", 1, linHistory(stepLease(1, 0, 1, false), stepTick(6), stepNext(1, 0, 1, 0, 1), stepTick(6), stepNothing(2)), porcupine.Ok, ""},
		{"OK/RangeWorkedAndFinished", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepProgress(1, 0, 1, 0, 50, true, 0),
			stepProgress(1, 0, 1, 0, 40, false, linUnprocessable), stepProgress(1, 0, 1, 0, 102, false, linUnprocessable),
			stepFinish(1, 0, 1, 0, true, 0), stepFinish(1, 0, 1, 0, true, 0), stepNext(1, 0, 1, 1, 101)), porcupine.Ok, ""},
		{"OK/ResumedAfterTakeover", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepProgress(1, 0, 1, 0, 50, true, 0),
			stepTick(11), stepLease(2, 0, 2, true), stepFinish(1, 0, 1, 0, false, linLeaseLost), stepProgress(2, 0, 2, 0, 60, false, linConflict),
			stepNext(2, 0, 2, 0, 50), stepFinish(2, 0, 2, 0, true, 0)), porcupine.Ok, ""},
		{"OK/CaughtUpThenNothing", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepFinish(1, 0, 1, 0, true, 0),
			stepNext(1, 0, 1, 1, 101), stepFinish(1, 0, 1, 1, true, 0), stepNext(1, 0, 1, 2, 201), stepFinish(1, 0, 1, 2, true, 0),
			stepNext(1, 0, 1, 3, 301), stepFinish(1, 0, 1, 3, true, 0), stepNext(1, 0, 1, 4, 401), stepFinish(1, 0, 1, 4, true, 0),
			stepNext(1, 0, 1, 5, 501), stepFinish(1, 0, 1, 5, true, 0), stepNext(1, 0, 1, 6, 601), stepFinish(1, 0, 1, 6, true, 0),
			stepNext(1, 0, 1, 7, 701), stepFinish(1, 0, 1, 7, true, 0), stepNext(1, 0, 1, -1, 0), stepHolder(rel, 1, 0, 1, true),
			stepNothing(2)), porcupine.Ok, ""},
		{"OK/HeartbeatRacingTakeoverLoses", 1, linHistory(stepLease(1, 0, 1, false), stepTick(11),
			stepHolder(hb, 1, 0, 1, false).during(1), stepLease(2, 0, 2, true)), porcupine.Ok, ""},
		{"OK/HeartbeatRacingClock", 1, linHistory(stepLease(1, 0, 1, false), stepTick(6),
			stepHolder(hb, 1, 0, 1, true).during(1), stepTick(6), stepNothing(2)), porcupine.Ok, ""},
		{"OK/FencesMaySkip", 1, linHistory(stepLease(1, 0, 1, false), stepHolder(rel, 1, 0, 1, true), stepLease(2, 0, 7, false)), porcupine.Ok, ""},

		{"TwoHolders", 1, linHistory(stepLease(1, 0, 1, false), stepLease(2, 0, 2, true)), porcupine.Illegal, ""},
		{"TwoHoldersConcurrent", 1, linHistory(stepLease(1, 0, 1, false).during(1), stepLease(2, 0, 2, false)), porcupine.Illegal, ""},
		{"TakeoverAtExactlyTTL", 1, linHistory(stepLease(1, 0, 1, false), stepTick(10), stepLease(2, 0, 2, true)), porcupine.Illegal, ""},
		{"HeartbeatDidNotExtend", 1, linHistory(stepLease(1, 0, 1, false), stepTick(6), stepHolder(hb, 1, 0, 1, true), stepTick(6),
			stepLease(2, 0, 2, true)), porcupine.Illegal, ""},
		{"SupersededFenceAccepted", 1, linHistory(stepLease(1, 0, 1, false), stepTick(11), stepLease(2, 0, 2, true),
			stepHolder(hb, 1, 0, 1, true)), porcupine.Illegal, ""},
		{"HeartbeatAcceptedDuringTakeover", 1, linHistory(stepLease(1, 0, 1, false), stepTick(11),
			stepHolder(hb, 1, 0, 1, true).during(1), stepLease(2, 0, 2, true)), porcupine.Illegal, ""},
		{"OtherNodeAtHoldersFence", 1, linHistory(stepLease(1, 0, 1, false), stepHolder(hb, 2, 0, 1, true)), porcupine.Illegal, ""},
		{"FenceReused", 1, linHistory(stepLease(1, 0, 1, false), stepHolder(rel, 1, 0, 1, true), stepLease(2, 0, 1, false)), porcupine.Illegal, ""},
		{"FenceWentDown", 1, linHistory(stepLease(1, 0, 3, false), stepHolder(rel, 1, 0, 3, true), stepLease(2, 0, 2, false)), porcupine.Illegal, ""},
		{"ReleasedLeaseAccepted", 1, linHistory(stepLease(1, 0, 1, false), stepHolder(rel, 1, 0, 1, true),
			stepHolder(hb, 1, 0, 1, true)), porcupine.Illegal, ""},
		{"ReleaseKeptTheHolder", 1, linHistory(stepLease(1, 0, 1, false), stepHolder(rel, 1, 0, 1, true), stepNothing(2)), porcupine.Illegal, ""},
		{"HeldLeaseRefused", 1, linHistory(stepLease(1, 0, 1, false), stepTick(10), stepHolder(hb, 1, 0, 1, false)), porcupine.Illegal, ""},
		{"NothingWhileQuiet", 1, linHistory(stepLease(1, 0, 1, false), stepTick(10.001), stepNothing(2)), porcupine.Illegal, ""},
		{"NothingWhileAnotherGroupFree", 2, linHistory(stepLease(1, 0, 1, false), stepNothing(2)), porcupine.Illegal, ""},
		{"TakeoverNotSaid", 1, linHistory(stepLease(1, 0, 1, false), stepTick(11), stepLease(2, 0, 2, false)), porcupine.Illegal, ""},
		{"TakeoverOfAFreeGroup", 1, linHistory(stepLease(1, 0, 1, true)), porcupine.Illegal, ""},
		{"FinishAtOlderFenceOfSameNode", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepHolder(rel, 1, 0, 1, true),
			stepLease(1, 0, 2, false), stepNext(1, 0, 2, 0, 1), stepFinish(1, 0, 1, 0, true, 0)), porcupine.Illegal, ""},
		{"FinishAfterTakeover", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepTick(11), stepLease(2, 0, 2, true),
			stepFinish(1, 0, 1, 0, true, 0)), porcupine.Illegal, ""},
		{"ProgressAtOlderFence", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepHolder(rel, 1, 0, 1, true),
			stepLease(1, 0, 2, false), stepNext(1, 0, 2, 0, 1), stepProgress(1, 0, 1, 0, 30, true, 0)), porcupine.Illegal, ""},
		{"ProgressWentBack", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepProgress(1, 0, 1, 0, 50, true, 0),
			stepProgress(1, 0, 1, 0, 40, true, 0)), porcupine.Illegal, ""},
		{"ProgressLostOnTakeover", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepProgress(1, 0, 1, 0, 50, true, 0),
			stepTick(11), stepLease(2, 0, 2, true), stepNext(2, 0, 2, 0, 1)), porcupine.Illegal, ""},
		{"FinishedRangeLeasedAgain", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepFinish(1, 0, 1, 0, true, 0),
			stepNext(1, 0, 1, 0, 101)), porcupine.Illegal, ""},
		{"NextSkippedAPlannedRange", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 1, 101)), porcupine.Illegal, ""},
		{"FinishOfAnotherNodesRange", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepTick(11), stepLease(2, 0, 2, true),
			stepFinish(2, 0, 2, 0, true, 0)), porcupine.Illegal, ""},
		{"LeasedWithNoWorkLeft", 1, linHistory(stepLease(1, 0, 1, false), stepNext(1, 0, 1, 0, 1), stepFinish(1, 0, 1, 0, true, 0),
			stepNext(1, 0, 1, 1, 101), stepFinish(1, 0, 1, 1, true, 0), stepNext(1, 0, 1, 2, 201), stepFinish(1, 0, 1, 2, true, 0),
			stepNext(1, 0, 1, 3, 301), stepFinish(1, 0, 1, 3, true, 0), stepNext(1, 0, 1, 4, 401), stepFinish(1, 0, 1, 4, true, 0),
			stepNext(1, 0, 1, 5, 501), stepFinish(1, 0, 1, 5, true, 0), stepNext(1, 0, 1, 6, 601), stepFinish(1, 0, 1, 6, true, 0),
			stepNext(1, 0, 1, 7, 701), stepFinish(1, 0, 1, 7, true, 0), stepHolder(rel, 1, 0, 1, true),
			stepLease(2, 0, 2, false)), porcupine.Illegal, ""},
		// The partitioned check's blind spot, written down: "nothing" while
		// g0 and g1 are each live at some point of the call but never both
		// at once. Only the whole check rejects it.
		{"NothingWhileGroupsLiveInTurn", 2, linHistory(stepLease(1, 0, 1, false), stepNothing(3).during(2),
			stepHolder(rel, 1, 0, 1, true), stepLease(2, 1, 1, false)), porcupine.Ok, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wholeWant := tt.whole
			if wholeWant == "" {
				wholeWant = tt.want
			}
			for _, c := range []struct {
				partition bool
				want      porcupine.CheckResult
			}{{true, tt.want}, {false, wholeWant}} {
				if got := porcupine.CheckOperationsTimeout(leaseModel(linTTL, tt.groups, c.partition), tt.ops, 0); got != c.want {
					t.Errorf("partitioned %t: got %s, want %s", c.partition, got, c.want)
				}
			}
		})
	}
}
