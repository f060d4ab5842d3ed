package fleetfault

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRejoinTakeovers: node-b is killed and restarted at 10 s; node-c,
// paused at 16 s, had g and h in work. g is granted at node-a 20 s into
// the pause and h owned there 22 s in: the takeover after b's rejoin
// completes 22 s in, within a bound of 25 s and not within one of 20 s. A
// group never taken over leaves it incomplete; the first fault, after no
// rejoin, is not listed.
func TestRejoinTakeovers(t *testing.T) {
	history := []Call{
		call("node-b", "wb1", "f", 1, 1, KindLease, 0.0, 0.01, 200),
		call("node-c", "wc1", "g", 2, 1, KindLease, 1.0, 1.01, 200),
		call("node-c", "wc2", "h", 3, 1, KindLease, 1.0, 1.01, 200),
		call("node-c", "wc1", "g", 2, 1, KindHeartbeat, 17.0, 17.0, NoAnswer),
		call("node-c", "wc2", "h", 3, 1, KindHeartbeat, 17.0, 17.0, NoAnswer),
		call("node-a", "wa1", "g", 4, 2, KindLease, 36.0, 36.0, 200),
	}
	faults := []Fault{
		{Kind: "kill", Node: "node-b", Start: at(5), End: at(10)},
		{Kind: "pause", Node: "node-c", Start: at(16), End: at(56)},
	}
	final := &Final{Adoptions: []Adoption{{Node: "node-a", Group: "h", At: at(38)}}}
	r := Check(history, faults, final)
	got := r.RejoinTakeovers()
	if len(got) != 1 {
		t.Fatalf("takeovers after a rejoin: %d, want 1 (the pause)", len(got))
	}
	tk := got[0]
	if tk.Rejoined != "node-b" || tk.Since != at(6) || tk.Moved != 2 || tk.Complete != at(22) {
		t.Fatalf("after %s's rejoin (%s before): %d moved, complete %s; want node-b, 6s, 2, 22s", tk.Rejoined, tk.Since, tk.Moved, tk.Complete)
	}
	if !tk.Within(25*time.Second) || tk.Within(20*time.Second) {
		t.Errorf("within 25s: %v, within 20s: %v; want true, false", tk.Within(25*time.Second), tk.Within(20*time.Second))
	}
	var b bytes.Buffer
	r.CheckTakeovers(25*time.Second, false)
	r.Print(&b)
	if want := "takeover after a rejoin: pause     node-c [16.0s, 56.0s] began 6.0s after node-b rejoined: all 2 taken over (granted or owned elsewhere) 22.0s after it began; within 25s"; !strings.Contains(b.String(), want) {
		t.Errorf("the summary lacks %q:\n%s", want, b.String())
	}

	// h never taken over: incomplete, whatever the bound.
	r = Check(history, faults, &Final{})
	if got := r.RejoinTakeovers(); len(got) != 1 || got[0].Moved != 1 || got[0].Complete != -1 || got[0].Within(time.Hour) {
		t.Errorf("with h never taken over: %+v, want 1 of 2 moved, incomplete", got)
	}
}
