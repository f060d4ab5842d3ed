package fleetfault

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
	"time"
)

// at is a time in the run, in seconds.
func at(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// call makes an acknowledged (or not) call of lease on group g.
func call(node, worker, g string, lease int, fence int64, kind string, sent, recv float64, status int) Call {
	return Call{Node: node, Worker: worker, Group: g, Lease: lease, Fence: fence, Kind: kind, Sent: at(sent), Recv: at(recv), Status: status}
}

func withRange(c Call, start, end int64) Call { c.Range = &Span{start, end}; return c }

func withUpload(c Call, name string, next int64) Call { c.Upload, c.Next = name, next; return c }

// cleanHistory is group g worked by lease 1 at node-b, released, then by
// lease 2 at node-c: one holder at a time, every finish kept, the second
// holder downloading the first one's last window.
func cleanHistory() []Call {
	return []Call{
		call("node-b", "wb1", "g", 1, 1, KindLease, 0.0, 0.01, 200),
		withUpload(call("node-b", "wb1", "g", 1, 1, KindSnapGet, 0.01, 0.02, 204), "", 0),
		withRange(call("node-b", "wb1", "g", 1, 1, KindNext, 0.02, 0.03, 200), 1, 50),
		call("node-b", "wb1", "g", 1, 1, KindHeartbeat, 0.5, 0.51, 200),
		withRange(call("node-b", "wb1", "g", 1, 1, KindFinish, 1.0, 1.01, 200), 1, 50),
		withUpload(call("node-b", "wb1", "g", 1, 1, KindSnapPut, 1.01, 1.02, 201), "L1.1", 51),
		call("node-b", "wb1", "g", 1, 1, KindRelease, 1.1, 1.11, 200),
		call("node-c", "wc1", "g", 2, 2, KindLease, 2.0, 2.01, 200),
		withUpload(call("node-c", "wc1", "g", 2, 2, KindSnapGet, 2.01, 2.02, 200), "L1.1", 51),
		withRange(call("node-c", "wc1", "g", 2, 2, KindNext, 2.02, 2.03, 200), 51, 100),
		withRange(call("node-c", "wc1", "g", 2, 2, KindFinish, 3.0, 3.01, 200), 51, 100),
		withUpload(call("node-c", "wc1", "g", 2, 2, KindSnapPut, 3.01, 3.02, 201), "L2.1", 101),
		call("node-c", "wc1", "g", 2, 2, KindRelease, 3.1, 3.11, 200),
	}
}

// cleanFinal is the fleet agreeing that node-c owns g, both ranges done,
// and its window covering both.
func cleanFinal() *Final {
	view := GroupView{Owner: "node-c", Ranges: []RangeView{{Span{1, 50}, "done"}, {Span{51, 100}, "done"}}}
	return &Final{
		Nodes: []string{"node-a", "node-b", "node-c"},
		Catalogs: map[string]map[string]GroupView{
			"node-a": {"g": view}, "node-b": {"g": view}, "node-c": {"g": view},
		},
		Windows: map[string]*Window{"g": {Group: "g", Upload: "L2.1", Next: 101, Covered: []Span{{1, 100}}}},
	}
}

func TestCheckClean(t *testing.T) {
	t.Parallel()
	r := Check(cleanHistory(), nil, cleanFinal())
	if v := r.Violations(); v != 0 {
		var b bytes.Buffer
		r.Print(&b)
		t.Fatalf("a clean history has %d violations:\n%s", v, b.String())
	}
	if r.Leases != 2 || r.AckedFinishes != 2 || r.WindowsChecked != 2 || r.GroupsChecked != 1 {
		t.Errorf("leases %d, finishes %d, windows %d, groups %d; want 2, 2, 2, 1", r.Leases, r.AckedFinishes, r.WindowsChecked, r.GroupsChecked)
	}
	if got, want := r.AckedHolderCalls, len(cleanHistory()); got != want {
		t.Errorf("acknowledged holder calls = %d, want %d", got, want)
	}
}

// TestSelfTestDoubleHolding plants a double holding: node-b is killed
// while lease 1 works g, node-c grants g to lease 2, then node-b comes back
// and acknowledges lease 1's retried finish. The check must fail.
func TestSelfTestDoubleHolding(t *testing.T) {
	t.Parallel()
	h := []Call{
		call("node-b", "wb1", "g", 1, 1, KindLease, 0.0, 0.01, 200),
		withRange(call("node-b", "wb1", "g", 1, 1, KindNext, 0.02, 0.03, 200), 1, 50),
		withRange(call("node-b", "wb1", "g", 1, 1, KindFinish, 1.0, 1.0, NoAnswer), 1, 50),
		call("node-c", "wc3", "g", 2, 2, KindLease, 5.0, 5.01, 200),
		withRange(call("node-c", "wc3", "g", 2, 2, KindNext, 5.02, 5.03, 200), 1, 50),
		withRange(call("node-b", "wb1", "g", 1, 1, KindFinish, 8.0, 8.01, 200), 1, 50),
	}
	r := Check(h, []Fault{{Kind: "kill", Node: "node-b", Start: at(0.5), End: at(7.9)}}, nil)
	if len(r.DoubleHoldings) == 0 {
		t.Fatal("a planted double holding was not found")
	}
	d := r.DoubleHoldings[0]
	if d.A != 1 || d.B != 2 || d.Intrusion.Kind != KindLease {
		t.Errorf("found %s; want lease 1 holding through lease 2's grant", d)
	}
	if r.Violations() == 0 {
		t.Error("a double holding is not a violation")
	}
	f := r.Faults[0]
	if len(f.InWork) != 1 || f.FirstTakeover() != at(5.01)-at(0.5) || f.OldCalls["ack"] != 1 || f.OldCalls["no answer"] != 1 {
		t.Errorf("fault figures %+v: want g in work, taken over after 4.51s, one ack and one no answer on the old lease", f)
	}
}

// TestCheckInFlightNotCertain: calls of two leases that may have been
// answered in either order are no certain double holding.
func TestCheckInFlightNotCertain(t *testing.T) {
	t.Parallel()
	h := []Call{
		call("node-b", "wb1", "g", 1, 1, KindLease, 0.0, 0.01, 200),
		// In flight while lease 2 is granted: it may have been answered
		// before the grant.
		call("node-b", "wb1", "g", 1, 1, KindHeartbeat, 4.9, 5.5, 200),
		call("node-c", "wc1", "g", 2, 2, KindLease, 5.0, 5.01, 200),
		call("node-b", "wb1", "g", 1, 1, KindHeartbeat, 5.6, 5.7, 409),
		call("node-c", "wc1", "g", 2, 2, KindHeartbeat, 5.8, 5.9, 200),
	}
	if r := Check(h, nil, nil); len(r.DoubleHoldings) != 0 {
		t.Errorf("overlapping calls taken for a certain double holding: %v", r.DoubleHoldings)
	}
}

// TestSelfTestLostFinish plants a finish acknowledged and then missing
// from the owner's final catalog. The check must fail.
func TestSelfTestLostFinish(t *testing.T) {
	t.Parallel()
	final := cleanFinal()
	lost := GroupView{Owner: "node-c", Ranges: []RangeView{{Span{1, 50}, "done"}, {Span{51, 100}, "planned"}}}
	final.Catalogs["node-c"]["g"] = lost
	r := Check(cleanHistory(), nil, final)
	if len(r.LostFinishes) != 1 || r.LostFinishes[0].Finish.Range.Start != 51 {
		t.Fatalf("lost finishes %v; want the finish of [51, 100]", r.LostFinishes)
	}
	if len(r.Unconverged) == 0 {
		t.Error("node-c's catalog differs from its peers' and has a range not done, yet the fleet counts as converged")
	}
	if r.Violations() == 0 {
		t.Error("a lost finish is not a violation")
	}
}

func TestCheckUnconvergedOwner(t *testing.T) {
	t.Parallel()
	final := cleanFinal()
	v := final.Catalogs["node-a"]["g"]
	v.Owner = "node-a"
	final.Catalogs["node-a"]["g"] = v
	r := Check(cleanHistory(), nil, final)
	if len(r.Unconverged) != 1 || !strings.Contains(r.Unconverged[0], "owner") {
		t.Errorf("unconverged %q; want one owner disagreement", r.Unconverged)
	}
}

// TestSelfTestUnsettled plants a final state every node agrees on while a
// node's events are still unpublished: the fleet agrees without a cut-off
// node's plans and finishes, which is no convergence.
func TestSelfTestUnsettled(t *testing.T) {
	t.Parallel()
	final := cleanFinal()
	final.Unsettled = []string{"node-a: 3 event(s) of its not yet acknowledged by the stream"}
	r := Check(cleanHistory(), nil, final)
	if len(r.Unconverged) != 1 || !strings.Contains(r.Unconverged[0], "not yet acknowledged") {
		t.Fatalf("unconverged %q; want the unpublished events", r.Unconverged)
	}
	if r.Violations() == 0 {
		t.Error("a fleet that has not seen every change counts as converged")
	}
}

// TestSelfTestStaleWindow plants a new holder on the node of the newest
// acknowledged upload, the group not granted elsewhere between, that
// downloads an older window, or none, or one never uploaded; and the same
// older download after a takeover across nodes, which is a figure (work
// redone), not a violation.
func TestSelfTestStaleWindow(t *testing.T) {
	t.Parallel()
	sameNode := func() []Call {
		h := cleanHistory()
		for i, c := range h {
			if c.Lease == 2 {
				h[i].Node, h[i].Worker = "node-b", "wb2"
			}
			if c.Kind == KindSnapGet && c.Lease == 2 {
				h[i].Upload = "L0.1"
			}
		}
		return append(h, withUpload(call("node-b", "wb1", "g", 1, 1, KindSnapPut, 0.2, 0.21, 201), "L0.1", 1))
	}
	h := sameNode()
	r := Check(h, nil, cleanFinal())
	if len(r.StaleWindows) != 1 {
		t.Fatalf("stale windows %v; want lease 2's download", r.StaleWindows)
	}
	h[8].Upload = ""
	if r := Check(h, nil, cleanFinal()); len(r.StaleWindows) != 1 || !strings.Contains(r.StaleWindows[0].Why, "no window") {
		t.Errorf("a missing window: %v", r.StaleWindows)
	}
	h[8].Upload = "L9.9"
	if r := Check(h, nil, cleanFinal()); len(r.StaleWindows) != 1 || !strings.Contains(r.StaleWindows[0].Why, "never uploaded") {
		t.Errorf("an invented window: %v", r.StaleWindows)
	}
	// Across nodes (lease 2 at node-c, as in cleanHistory): older, not stale.
	h = cleanHistory()
	for i, c := range h {
		if c.Kind == KindSnapGet && c.Lease == 2 {
			h[i].Upload = "L0.1"
		}
	}
	h = append(h, withUpload(call("node-b", "wb1", "g", 1, 1, KindSnapPut, 0.2, 0.21, 201), "L0.1", 1))
	if r := Check(h, nil, cleanFinal()); len(r.StaleWindows) != 0 || len(r.OlderWindows) != 1 {
		t.Errorf("a takeover across nodes from an older window: stale %v, older %v; want 0 stale, 1 older", r.StaleWindows, r.OlderWindows)
	}
	// The same, but the newer upload was answered kept (replicated): the
	// takeover had to resume from it. A violation, also with no window.
	for i, c := range h {
		if c.Kind == KindSnapPut && c.Upload == "L1.1" {
			h[i].Kept = true
		}
	}
	for _, got := range []string{"L0.1", ""} {
		for i, c := range h {
			if c.Kind == KindSnapGet && c.Lease == 2 {
				h[i].Upload = got
			}
		}
		if r := Check(h, nil, cleanFinal()); len(r.StaleWindows) != 1 || len(r.OlderWindows) != 0 || !strings.Contains(r.StaleWindows[0].Why, "keeps") {
			t.Errorf("a takeover across nodes from %q, older than a window answered kept: stale %v, older %v; want 1 stale", got, r.StaleWindows, r.OlderWindows)
		}
	}
	// On the same node, but the group was adopted by another node between
	// the newer upload and the grant (an ownership change with no lease
	// granted there): the window came back as the fleet had replicated
	// it, older, not stale. An adoption outside that span changes nothing.
	for _, c := range []struct {
		at    float64
		stale int
	}{{1.5, 0}, {2.5, 1}, {0.5, 1}} {
		final := cleanFinal()
		final.Adoptions = []Adoption{{Node: "node-a", Group: "g", At: at(c.at)}}
		if r := Check(sameNode(), nil, final); len(r.StaleWindows) != c.stale || len(r.OlderWindows) != 1-c.stale {
			t.Errorf("adopted by node-a at %.1fs: stale %v, older %v; want %d stale", c.at, r.StaleWindows, r.OlderWindows, c.stale)
		}
	}
}

func TestCheckWindowHoles(t *testing.T) {
	t.Parallel()
	final := cleanFinal()
	final.Windows["g"] = &Window{Group: "g", Upload: "L2.1", Next: 101, Covered: []Span{{1, 20}, {31, 100}}}
	r := Check(cleanHistory(), nil, final)
	if len(r.WindowHoles) != 1 || !strings.Contains(r.WindowHoles[0], "misses 10 ids") {
		t.Errorf("window holes %q; want ids 21..30", r.WindowHoles)
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	w := &Window{}
	for _, s := range []Span{{51, 100}, {1, 20}, {21, 30}, {200, 250}} {
		w.Add(s)
	}
	if got, want := w.Covered, []Span{{1, 30}, {51, 100}, {200, 250}}; !equalSpans(got, want) {
		t.Errorf("covered %v, want %v", got, want)
	}
	if got, want := w.Missing(Span{25, 260}), []Span{{31, 50}, {101, 199}, {251, 260}}; !equalSpans(got, want) {
		t.Errorf("missing %v, want %v", got, want)
	}
	back, err := DecodeWindow(w.Encode())
	if err != nil || !equalSpans(back.Covered, w.Covered) {
		t.Errorf("decoded %v, %v", back, err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(w.Encode())
	zw.Close()
	if back, err := DecodeWindow(z.Bytes()); err != nil || !equalSpans(back.Covered, w.Covered) {
		t.Errorf("decoded from gzip %v, %v", back, err)
	}
}

func equalSpans(a, b []Span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSelfTestLateTakeover plants a partition of 30 s whose group in work
// is granted elsewhere only 27 s in, past a bound of 25 s: reported, and a
// violation when takeovers are required; a grant 20 s in is neither, nor
// is a group owned elsewhere 19 s in and granted late.
func TestSelfTestLateTakeover(t *testing.T) {
	t.Parallel()
	history := func(grantAt float64) []Call {
		return []Call{
			call("node-b", "wb1", "g", 1, 1, KindLease, 0.0, 0.01, 200),
			call("node-b", "wb1", "g", 1, 1, KindHeartbeat, 1.5, 1.51, 200),
			call("node-c", "wc1", "g", 2, 2, KindLease, grantAt, grantAt+0.01, 200),
		}
	}
	cut := []Fault{{Kind: "partition", Node: "node-b", Start: at(1.0), End: at(31.0)}}
	for _, tc := range []struct {
		grantAt  float64
		adopted  float64 // when node-a took g over, 0 for never
		require  bool
		late, vs int
	}{{28.0, 0, false, 1, 0}, {28.0, 0, true, 1, 1}, {21.0, 0, true, 0, 0},
		// Owned elsewhere in time, granted late (no free worker there):
		// the fleet's promise is kept.
		{28.0, 20.0, true, 0, 0},
		// Owned elsewhere too late as well.
		{28.0, 27.0, true, 1, 1}} {
		final := &Final{}
		if tc.adopted > 0 {
			final.Adoptions = []Adoption{{Node: "node-a", Group: "g", At: at(tc.adopted)}}
		}
		r := Check(history(tc.grantAt), cut, final)
		r.LostFinishes, r.Unconverged, r.WindowHoles = nil, nil, nil // the planted final state has no catalogs
		r.CheckTakeovers(25*time.Second, tc.require)
		if len(r.Late) != tc.late || r.Violations() != tc.vs {
			var b bytes.Buffer
			r.Print(&b)
			t.Errorf("granted elsewhere %.0fs after the cut, required %v: %d late, %d violations; want %d, %d\n%s",
				tc.grantAt-1, tc.require, len(r.Late), r.Violations(), tc.late, tc.vs, b.String())
		}
	}
}

// TestCheckDowns: a member shown down during, or within the grace after,
// a fault of its own or of the node showing it is explained, and so is
// one whose own life lapsed (claims lost) just before or just after; one
// shown down with neither is a false down, and a violation.
func TestCheckDowns(t *testing.T) {
	t.Parallel()
	faults := []Fault{{Kind: "kill", Node: "node-b", Start: at(10), End: at(20)}, {Kind: "pause", Node: "node-c", Start: at(40), End: at(50)}}
	downs := []Down{
		{Node: "node-a", Peer: "node-b", At: at(15)},  // b killed
		{Node: "node-a", Peer: "node-b", At: at(28)},  // within the grace
		{Node: "node-c", Peer: "node-a", At: at(52)},  // c paused: its view is stale
		{Node: "node-a", Peer: "node-c", At: at(5)},   // before any fault of c or a
		{Node: "node-a", Peer: "node-b", At: at(35)},  // past the grace
		{Node: "node-a", Peer: "node-b", At: at(60)},  // b's life lapsed at 57s
		{Node: "node-a", Peer: "node-b", At: at(77)},  // b, starved, said so at 80s
		{Node: "node-c", Peer: "node-b", At: at(70)},  // but not at 70s
		{Node: "node-c", Peer: "node-b", At: at(100)}, // nor at 100s: its lapse at 110s is another
	}
	lapsed := map[string][]time.Duration{"node-b": {at(57), at(80), at(110)}}
	r := Check(cleanHistory(), faults, cleanFinal())
	before := r.Violations()
	r.CheckDowns(downs, faults, lapsed, 4*time.Second)
	var got []string
	for _, d := range r.FalseDowns {
		got = append(got, d.String())
	}
	want := "node-a showed node-c down at 5.0s; node-a showed node-b down at 35.0s; node-c showed node-b down at 70.0s; node-c showed node-b down at 100.0s"
	if strings.Join(got, "; ") != want || r.DownsChecked != 9 || r.DownsByFault != 3 || r.DownsByLapse != 2 {
		t.Fatalf("false downs %q of %d (%d by a fault, %d by a lapse); want %q of 9 (3, 2)", got, r.DownsChecked, r.DownsByFault, r.DownsByLapse, want)
	}
	if r.Violations() != before+4 {
		t.Errorf("violations %d, want %d", r.Violations(), before+4)
	}
}
