package web_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
)

// nodeStates is the nodes page's state of each node, "name:state" sorted
// by name, where a state counts only with the class that styles it.
const nodeStates = `Array.from(document.querySelectorAll('#nodes tbody tr[data-node]')).map(function(r){
	var s = r.querySelector('td[data-label=state] span');
	return r.dataset.node + ":" + (s && s.classList.contains("node-" + s.textContent) ? s.textContent : "unstyled " + (s ? s.textContent : ""));
}).sort().join(" ")`

// untilText polls expr, a string, in the page until it is want, and
// says what it was last when it never is.
func (p *page) untilText(what, expr, want string) {
	p.t.Helper()
	var got string
	err := poll.Wait(20*time.Second, 100*time.Millisecond, func() error {
		var err error
		if got, err = chromedp.Run(p.ctx, chromedp.Evaluate[string](expr)); err == nil && got != want {
			return errors.New("not yet")
		}
		return err
	})
	if err != nil {
		p.t.Fatalf("%s: %q after 20s, want %q (last error %v)", what, got, want, err)
	}
}

// TestNodeStatesInBrowser drives worker nodes into every state and reads
// them on the dashboard's nodes page in headless Chromium: active
// (holds a group), idle (seen, holds nothing), unseen (not seen past the
// unseen bound), paused. When the node's clock passes the bound, the open
// page shows the holder and the idle node unseen without a reload.
func TestNodeStatesInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	clock := nodetest.NewClock()
	n := nodetest.Start(t, nodetest.Options{Clock: clock.Now})
	want := nodetest.SeedNodeStates(t, n, clock)
	p := signIn(t, ctx, n)

	states := func(m map[string]string) string {
		var s []string
		for name, state := range m {
			s = append(s, name+":"+state)
		}
		slices.Sort(s)
		return strings.Join(s, " ")
	}
	p.open("/nodes", `#nodes`)
	p.untilText("each node in its state", nodeStates, states(want))
	if by := p.js("held's pause", `document.querySelector('tr[data-node="held"] td[data-label=state]').textContent`); !strings.Contains(by, "paused by ops") {
		t.Errorf("held's state cell says %q, want who paused it", by)
	}
	// The groups' state pill is for a word, not a cell: a cell styled as
	// one is a grey slab with the state in its corner.
	if bg := p.js("the state cells' background", `Array.from(document.querySelectorAll('#nodes tbody td[data-label=state]')).map(td => getComputedStyle(td).backgroundColor).filter(c => c !== "rgba(0, 0, 0, 0)").join(" ")`); bg != "" {
		t.Errorf("the nodes' state cells have a background (%s), want the table's", bg)
	}
	p.shot("dashboard-nodes-states.png")

	clock.Advance(n.App.Config.NodeUnseen + time.Second)
	for _, name := range []string{"busy", "spare"} {
		want[name] = "unseen"
	}
	p.untilText("busy and spare unseen without a reload", `location.pathname + " " + `+nodeStates, "/nodes "+states(want))
}

// TestFlappingAdviceInBrowser: a worker that leases a group and releases
// it five times in a row without a range progressing makes a flapping
// finding; the dashboard's overview, in headless Chromium, shows it with
// its reason, the worker holding the group, and the advice that clears
// it. A lease under which a range progresses ends it, and the open page
// drops it without a reload.
func TestFlappingAdviceInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	n := nodetest.Start(t, nodetest.Options{})
	bg := context.Background()
	admin := client.New(n.URL, n.AdminToken)
	size := int64(100)
	if _, _, err := admin.PutGroup(bg, "alt.flap", client.GroupSpec{RangeSize: &size}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PlanTail(bg, "alt.flap", 300); err != nil {
		t.Fatal(err)
	}
	nd, err := admin.RegisterNode(bg, client.NodeSpec{Name: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	w := client.New(n.URL, nd.Token)
	lease := func() *client.Grant {
		t.Helper()
		g, err := w.Lease(bg)
		if err != nil || g == nil || g.Group.Name != "alt.flap" {
			t.Fatalf("lease: %+v, %v, want alt.flap", g, err)
		}
		return g
	}
	// Each lease takes a range and lets it go untouched, as a worker that
	// cannot work the group does.
	for range 5 {
		g := lease()
		if _, err := w.Next(bg, g.Group.ID, g.Fence); err != nil {
			t.Fatal(err)
		}
		if err := w.Release(bg, g.Group.ID, g.Fence); err != nil {
			t.Fatal(err)
		}
	}
	g := lease() // the sixth: w1 holds the group the finding names

	p := signIn(t, ctx, n)
	p.open("/", `main`)
	row := `#findings tr[data-kind=flapping][data-group="alt.flap"]`
	p.until("the flapping finding", fmt.Sprintf(`document.querySelector(%q) !== null`, row))
	cell := func(sel string) string {
		return p.js(sel, fmt.Sprintf(`document.querySelector(%q).textContent.trim()`, row+" "+sel))
	}
	if got, want := cell("td.action .advice"), "Look at the group: its ranges' last errors and its workers' logs; pause the node that cannot work it."; got != want {
		t.Errorf("the flapping finding's advice: %q, want %q", got, want)
	}
	if got := cell("td.detail"); !strings.HasPrefix(got, "released or taken over 5 times in a row with no range progressing") {
		t.Errorf("the flapping finding's reason: %q, want that it was released or taken over 5 times with no progress", got)
	}
	if got := p.js("the links", fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(a => a.getAttribute("href")).join(" ")`, row+" a")); got != "/groups/alt.flap /nodes#node-w1" {
		t.Errorf("the flapping finding links %q, want its group and its holder w1", got)
	}
	p.shot("dashboard-overview-flapping.png")

	r, err := w.Next(bg, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		t.Fatalf("next: %v, %v", r, err)
	}
	if _, err := w.Progress(bg, r.ID, g.Fence, r.Next+10); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(bg, g.Group.ID, g.Fence); err != nil {
		t.Fatal(err)
	}
	p.until("the flapping finding gone without a reload once a range progressed", fmt.Sprintf(`location.pathname === "/" && document.querySelector(%q) === null`, row))
}
