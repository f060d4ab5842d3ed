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

	"leasehold"
	"leasehold/internal/nodetest"
	"leasehold/web/client"
)

// Linearizability of the fenced lease (issue 6, item 2). Several worker
// nodes lease, heartbeat, call next on and release a few groups of a real
// node while the test moves the node's clock; every call and its answer is
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
//   - a holder call (heartbeat, next, release) succeeds exactly when the
//     caller holds the group at that fence, else 409 lease_lost; a success
//     of heartbeat or next is a heartbeat, a release frees the group.
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

type linKind uint8

const (
	linLease linKind = iota
	linHeartbeat
	linNext
	linRelease
	linTick
)

var linKindNames = [...]string{"lease", "heartbeat", "next", "release", "tick"}

func (k linKind) String() string { return linKindNames[k] }

// linInput is a call. Node is the caller (1-based); Group and Fence name
// the lease of a holder call; Tick is how far the clock moves (ms). Only,
// in a lease call, is the one group a partition checks a "nothing to
// lease" answer against; -1 checks every group.
type linInput struct {
	Kind  linKind
	Node  int
	Group int
	Fence int64
	Tick  int64
	Only  int
}

// linOutput is an answer. OK: a holder call was answered 200, a lease was
// granted (Group, Fence, Takeover).
type linOutput struct {
	OK       bool
	Group    int
	Fence    int64
	Takeover bool
}

// linGroupLease is one group's lease in the model: Holder 0 is nobody.
type linGroupLease struct {
	Holder int
	Fence  int64
	Beat   int64 // ms, the model's clock at the last heartbeat
}

type linState struct {
	Now    int64 // ms since the history began
	Groups [linMaxGroups]linGroupLease
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
		Init: func() any { return linState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(linState), input.(linInput), output.(linOutput)
			switch in.Kind {
			case linTick:
				s.Now += in.Tick
				return true, s
			case linLease:
				if !out.OK {
					for g := range groups {
						if (in.Only < 0 || in.Only == g) && !live(s.Groups[g], s.Now) {
							return false, s
						}
					}
					return true, s
				}
				if out.Group < 0 || out.Group >= groups {
					return false, s
				}
				l := s.Groups[out.Group]
				if live(l, s.Now) || out.Fence <= l.Fence || out.Takeover != (l.Holder != 0) {
					return false, s
				}
				s.Groups[out.Group] = linGroupLease{Holder: in.Node, Fence: out.Fence, Beat: s.Now}
				return true, s
			default:
				l := s.Groups[in.Group]
				holds := l.Holder == in.Node && l.Fence == in.Fence
				if out.OK != holds {
					return false, s
				}
				if holds && in.Kind == linRelease {
					s.Groups[in.Group] = linGroupLease{Fence: l.Fence}
				} else if holds {
					s.Groups[in.Group].Beat = s.Now
				}
				return true, s
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
					res = "lease_lost"
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
					parts = append(parts, fmt.Sprintf("g%d n%d@%d beat %gs", g, l.Holder, l.Fence, float64(l.Beat)/1000))
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

// fencedCall makes a holder call of kind on group groupID at fence; a
// refusal with lease_lost is an answer (OK false), not an error.
func fencedCall(c *client.Client, kind linKind, groupID, fence int64) (linOutput, error) {
	var err error
	switch kind {
	case linHeartbeat:
		_, err = c.Heartbeat(bg, groupID, fence)
	case linNext:
		_, err = c.Next(bg, groupID, fence)
	case linRelease:
		err = c.Release(bg, groupID, fence)
	default:
		return linOutput{}, fmt.Errorf("%s is not a holder call", kind)
	}
	if errors.Is(err, leasehold.ErrLeaseLost) {
		return linOutput{}, nil
	}
	return linOutput{OK: err == nil}, err
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
	f.Injected += o.Injected
}

// recordLeaseHistory runs cfg.Nodes worker nodes against a new real node
// with a test clock and returns the history. Each worker, in a loop:
// leases; heartbeats, calls next on or releases a lease it believes it
// holds; calls with a fence it or another worker was granted earlier (a
// stale call, mostly refused); goes quiet on what it holds, as a crashed
// worker would; or moves the clock one to six seconds. Leases it neglects
// lapse and are taken over. Any answer other than success or lease_lost
// fails the test.
func recordLeaseHistory(t *testing.T, cfg linConfig) ([]porcupine.Operation, linFigures) {
	t.Helper()
	if cfg.Groups > linMaxGroups {
		t.Fatalf("%d groups: the model holds at most %d", cfg.Groups, linMaxGroups)
	}
	clock := nodetest.NewClock()
	e := start(t, nodetest.Options{LeaseTTL: linTTL, Clock: clock.Now, MaxAttempts: 1 << 30})
	groupIndex := map[int64]int{}
	for g := range cfg.Groups {
		name := fmt.Sprintf("lin-%d", g)
		size, first := int64(100), int64(1)
		gr, _, err := e.admin.PutGroup(bg, name, client.GroupSpec{RangeSize: &size, Start: &first})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.PlanTail(bg, name, 10000); err != nil {
			t.Fatal(err)
		}
		groupIndex[gr.ID] = g
	}
	workers := make([]*client.Client, cfg.Nodes)
	for i := range workers {
		c, _ := e.workerClient(fmt.Sprintf("lin-w%d", i+1), int64(cfg.Groups), nil)
		c.Retry = client.Backoff{Attempts: 1} // one call, one request
		workers[i] = c
	}

	type grant struct {
		node, group int
		id, fence   int64
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
			// holderCall runs one fenced call and reports whether it succeeded.
			holderCall := func(kind linKind, g grant) (bool, error) {
				in := linInput{Kind: kind, Node: node, Group: g.group, Fence: g.fence}
				out, err := rec.record(i, in, func() (linOutput, error) { return fencedCall(c, kind, g.id, g.fence) })
				if err != nil {
					return false, fmt.Errorf("node %d: %s of group %d at fence %d: %w", node, kind, g.id, g.fence, err)
				}
				if !out.OK {
					count(func(f *linFigures) { f.Refused++ })
				}
				return out.OK, nil
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
					g := grant{node: node, group: out.Group, id: gr.Group.ID, fence: gr.Fence}
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
				case r < 46:
					// A stale call: a fence this node or another was granted
					// at some time, called as this node.
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
					kind := linHeartbeat
					if rng.IntN(3) == 0 {
						kind = linRelease
					}
					count(func(f *linFigures) { f.StaleTried++ })
					if _, err := holderCall(kind, g); err != nil {
						errs <- err
						return
					}
				case len(held) > 0:
					k := rng.IntN(len(held))
					kind := linHeartbeat
					switch x := rng.IntN(10); {
					case x < 2:
						kind = linNext
					case x < 4:
						kind = linRelease
					}
					ok, err := holderCall(kind, held[k])
					if err != nil {
						errs <- err
						return
					}
					if !ok || kind == linRelease {
						drop(k)
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
	// One stale call after everything: the first grant a later grant of its
	// group superseded, called by its node. The node must refuse it, and the
	// history then surely holds a refusal that no linearization can excuse.
	for _, old := range granted {
		if !slices.ContainsFunc(granted, func(g grant) bool { return g.group == old.group && g.fence > old.fence }) {
			continue
		}
		c := workers[old.node-1]
		in := linInput{Kind: linHeartbeat, Node: old.node, Group: old.group, Fence: old.fence}
		if _, err := rec.record(old.node-1, in, func() (linOutput, error) { return fencedCall(c, linHeartbeat, old.id, old.fence) }); err != nil {
			t.Fatalf("node %d: stale heartbeat of group %d at fence %d: %v", old.node, old.id, old.fence, err)
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
		ops, fig := recordLeaseHistory(t, cfg)
		took := checkLeaseHistory(t, fmt.Sprintf("seed%d", cfg.Seed), groups, ops)
		checking += took
		// The same checker must reject the history with a violation planted.
		began := time.Now()
		for _, inj := range linInjections(ops) {
			// The whole check's exhaustive search of a rejected history is
			// slow under -race; it runs on the first history only, which is
			// also drawn, to show a failure leaves a picture behind.
			checkPlanted(t, cfg.Seed, groups, inj, true, h == 0)
			if h == 0 {
				checkPlanted(t, cfg.Seed, groups, inj, false, false)
			}
			caught[inj.name]++
			fig.Injected++
		}
		rejecting += time.Since(began)
		total.add(fig)
		t.Logf("history seed %d: %d operations, %d grants (%d takeovers), %d nothing to lease, %d refused lease_lost (%d stale calls), %d clock moves, %d nodes gone quiet; linearizable, checked in %s; %d planted violations rejected",
			cfg.Seed, fig.Ops, fig.Grants, fig.Takeovers, fig.Nothing, fig.Refused, fig.StaleTried, fig.Ticks, fig.Forgotten, took.Round(time.Millisecond), fig.Injected)
	}
	t.Logf("%d histories linearizable: %d operations, %d grants, %d takeovers, %d nothing to lease, %d refused; checking took %s; %d planted violations rejected in %s (%v)",
		histories, total.Ops, total.Grants, total.Takeovers, total.Nothing, total.Refused, checking.Round(time.Millisecond), total.Injected, rejecting.Round(time.Millisecond), caught)
	for _, name := range []string{"FenceReused", "SupersededFenceAccepted", "RefusedCallAccepted", "ReleaseLost"} {
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
}

// checkPlanted checks that a history with a violation planted is rejected,
// and with draw that porcupine can draw the rejection.
func checkPlanted(t *testing.T, seed uint64, groups int, inj linInjection, partition, draw bool) {
	t.Helper()
	model := leaseModel(linTTL, groups, partition)
	if !draw {
		if got := porcupine.CheckOperationsTimeout(model, inj.ops, 0); got != porcupine.Illegal {
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
		out = append(out, linInjection{"FenceReused", appended(porcupine.Operation{
			ClientId: other - 1,
			Input:    linInput{Kind: linLease, Node: other, Only: -1},
			Output:   linOutput{OK: true, Group: first.group, Fence: first.fence, Takeover: true},
		})})
	}
	for _, g := range grants {
		if superseded(g.group, g.fence, end+1) {
			out = append(out, linInjection{"SupersededFenceAccepted", appended(porcupine.Operation{
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
			out = append(out, linInjection{"RefusedCallAccepted", h})
			break
		}
	}
	for i, op := range ops {
		in, res := op.Input.(linInput), op.Output.(linOutput)
		if in.Kind == linRelease && res.OK && superseded(in.Group, in.Fence, end+1) {
			out = append(out, linInjection{"ReleaseLost", slices.Delete(slices.Clone(ops), i, i+1)})
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
		{"OK/NextIsAHeartbeat", 1, linHistory(stepLease(1, 0, 1, false), stepTick(6), stepHolder(next, 1, 0, 1, true), stepTick(6), stepNothing(2)), porcupine.Ok, ""},
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
