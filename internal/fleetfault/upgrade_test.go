package fleetfault

import (
	"bytes"
	"strings"
	"testing"
)

// TestUpgradeFigures: a node of g's replaced between its two holders
// (settled at 1.5 s): the first finish counts as acknowledged before the
// upgrade, the second as the fleet working on the new build; when the
// first is not done at the end it is a lost finish of the upgrade, and
// the run fails.
func TestUpgradeFigures(t *testing.T) {
	t.Parallel()
	reps := []Replacement{{Node: "node-b", Stop: ReplaceTerm, Graceful: true, Stopped: at(0.4), Ready: at(1.2), Settled: at(0.1), End: at(1.5)}}
	rep := Check(cleanHistory(), nil, cleanFinal())
	u := upgradeFigures("old", "new", reps, cleanHistory(), rep)
	if u.FinishesBefore != 1 || u.LostBefore != 0 || u.GroupsAfter != 1 || u.Groups != 1 {
		t.Errorf("clean: finishes before %d, lost %d, groups after %d of %d; want 1, 0, 1 of 1", u.FinishesBefore, u.LostBefore, u.GroupsAfter, u.Groups)
	}
	rep.Upgrade = u
	var b bytes.Buffer
	rep.Print(&b)
	for _, want := range []string{"upgrade: from old to new, 1 node(s) replaced", "node-b: SIGTERM, exited in 0.4s; new build /readyz 200 1.2s", "lost at the end: 0", "VERDICT: PASS"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, b.String())
		}
	}

	// The first range lost across the upgrade: not done at the owner.
	final := cleanFinal()
	lost := GroupView{Owner: "node-c", Ranges: []RangeView{{Span{1, 50}, "planned"}, {Span{51, 100}, "done"}}}
	for _, n := range final.Nodes {
		final.Catalogs[n]["g"] = lost
	}
	rep = Check(cleanHistory(), nil, final)
	u = upgradeFigures("old", "new", reps, cleanHistory(), rep)
	if u.LostBefore != 1 || rep.Violations() == 0 {
		t.Errorf("a finish lost across the upgrade: lost before %d, violations %d; want 1 and some", u.LostBefore, rep.Violations())
	}
}
