package web_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
)

// page drives one signed-in browser tab in a test.
type page struct {
	t   *testing.T
	ctx context.Context
	url string
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// js evaluates expr in the page.
func (p *page) js(what, expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// until polls expr in the page until it is true: the pages update
// themselves every few seconds, and a click's answer is a new page.
// An evaluation that fails (the page is being replaced) counts as
// false.
func (p *page) until(what, expr string) {
	p.t.Helper()
	err := poll.Wait(20*time.Second, 100*time.Millisecond, func() error {
		ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](expr))
		if err == nil && !ok {
			return errors.New("not yet")
		}
		return err
	})
	if err != nil {
		p.t.Fatalf("%s: not so after 20s (last error %v)", what, err)
	}
}

// open navigates to path and waits for sel.
func (p *page) open(path, sel string) {
	p.t.Helper()
	p.do("open "+path, chromedp.Navigate(p.url+path), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// click clicks the element sel in one step of the page's own event loop,
// so the live update (which swaps <main> every few seconds) cannot swap
// the element out between finding it and clicking it.
func (p *page) click(what, sel string) {
	p.t.Helper()
	if got := p.js(what, fmt.Sprintf(`(function(){var e=document.querySelector(%q); if(!e) return "missing"; e.click(); return "ok"})()`, sel)); got != "ok" {
		p.t.Fatalf("%s: no %s on the page", what, sel)
	}
}

// shot saves a full-page screenshot as artifacts/name.
func (p *page) shot(name string) {
	p.t.Helper()
	// live.js redraws the page every few seconds; a screenshot taken
	// while it swaps the body finds no width, so it is taken again once
	// the page is laid out, for a bounded time.
	deadline := time.Now().Add(10 * time.Second)
	var b []byte
	var err error
	for {
		b, err = chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
		if err == nil || !strings.Contains(err.Error(), "0 width") || time.Now().After(deadline) {
			break
		}
		p.until("the page laid out again", `document.body !== null && document.body.scrollWidth > 0`)
	}
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifacts(p.t), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

// signIn opens a tab on node n's dashboard signed in with its admin
// token.
func signIn(t *testing.T, ctx context.Context, n *nodetest.Node) *page {
	t.Helper()
	p := &page{t: t, ctx: ctx, url: n.URL}
	p.do("sign in", chromedp.Navigate(n.URL+"/signin"), chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), n.AdminToken), chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#count-groups`)))
	return p
}

// TestDashboardTroubleInBrowser drives, in headless Chromium, a node
// with trouble of every kind the dashboard shows first: two groups
// quarantined (q1, q2), one with a failed range (f), one whose holder
// went quiet (g), one caught up (idle). Each subtest checks one part of
// the dashboard and saves a screenshot of the page it checks.
func TestDashboardTroubleInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	clock := nodetest.NewClock()
	w := newWorld(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute})
	must := func(what string, a answer, status int) answer {
		t.Helper()
		if a.status != status {
			t.Fatalf("%s: %d %s, want %d", what, a.status, a.body, status)
		}
		return a
	}
	// Each lease below has one free group to choose: g is w1's.
	lease := func(name string) (gid, fence int64) {
		t.Helper()
		must("create "+name, w.j("PUT", "/groups/"+name, w.admin, `{"range_size":100}`), 201)
		must("plan "+name, w.j("POST", "/groups/"+name+"/tail", w.admin, `{"high":500}`), 200)
		l := must("lease "+name, w.j("POST", "/leases", w.w2, ""), 200).json(t)
		if l["group"].(map[string]any)["name"] != name {
			t.Fatalf("w2 leased %v, want %s", l["group"], name)
		}
		return num(l, "group", "id"), num(l, "fence")
	}
	for _, q := range []string{"q1", "q2"} {
		gid, fence := lease(q)
		must("quarantine "+q, w.j("POST", fmt.Sprintf("/leases/%d/release", gid), w.w2,
			fmt.Sprintf(`{"fence":%d,"window_error":"load window: invalid character 'h'"}`, fence)), 200)
	}
	fid, ffence := lease("f")
	next := func() int64 {
		return num(must("next", w.j("POST", fmt.Sprintf("/leases/%d/next", fid), w.w2, fmt.Sprintf(`{"fence":%d}`, ffence)), 200).json(t), "range", "id")
	}
	must("finish", w.j("POST", fmt.Sprintf("/ranges/%d/finish", next()), w.w2, fmt.Sprintf(`{"fence":%d,"headers":90}`, ffence)), 200)
	failed := next()
	must("fail", w.j("POST", fmt.Sprintf("/ranges/%d/fail", failed), w.w2, fmt.Sprintf(`{"fence":%d,"error":"article 7 malformed","retry":false}`, ffence)), 200)
	must("create idle", w.j("PUT", "/groups/idle", w.admin, `{"range_size":100}`), 201)
	clock.Advance(2 * time.Minute) // g's and f's holders are quiet past the TTL

	p := signIn(t, ctx, w.node)

	rows := `Array.from(document.querySelectorAll('#groups tbody tr[data-group]')).map(r => r.dataset.group).join(" ")`
	t.Run("GroupsByState", func(t *testing.T) {
		p.t = t
		p.open("/groups", `#filters`)
		for _, c := range []struct{ state, want string }{
			{"quarantined", "q1 q2"}, {"failing", "f"}, {"held", "g f"}, {"idle", "idle"}, {"", "g q1 q2 f idle"},
		} {
			p.click("filter "+c.state, fmt.Sprintf(`#filters a[data-state=%q]`, c.state))
			p.until("the "+c.state+" groups", fmt.Sprintf(`location.search.includes(%q) && %s === %q`, c.state, rows, c.want))
		}
		if got := p.js("stale rows", `Array.from(document.querySelectorAll('#groups tr[data-stale]')).map(r => r.dataset.group + ":" + r.querySelector('.stale').textContent).join(" ")`); got != "g:stale f:stale" {
			t.Errorf("rows marked stale: %q, want g and f (quiet past the TTL)", got)
		}
		p.click("sort by state", `#groups a.sort[data-sort="state"]`)
		p.until("trouble first", rows+` === "q1 q2 f g idle"`)
		p.shot("dashboard-groups.png")
	})

	// A takeover: w3 takes over a quiet holder's group (g or f).
	w3 := must("register w3", w.j("POST", "/nodes", w.admin, `{"name":"w3"}`), 201).json(t)["token"].(string)
	if l := must("w3 leases", w.j("POST", "/leases", w3, ""), 200).json(t); l["takeover"] != true {
		t.Fatalf("w3's lease %v is no takeover", l)
	}

	t.Run("Timeline", func(t *testing.T) {
		p.t = t
		p.open("/", `#timeline`)
		if order := p.js("the order", `String(document.querySelector('#count-groups').compareDocumentPosition(document.querySelector('#timeline')) & Node.DOCUMENT_POSITION_FOLLOWING ? "tiles first" : "timeline first") + " " + String(document.querySelector('#throughput').compareDocumentPosition(document.querySelector('#timeline')) & Node.DOCUMENT_POSITION_FOLLOWING ? "chart first" : "timeline first")`); order != "tiles first chart first" {
			t.Errorf("overview order: %q, want the tiles and the chart above the timeline", order)
		}
		first := p.js("the newest entry", `(function(){var r=document.querySelector('#timeline tbody tr'); return r.dataset.kind + " " + r.querySelector('td[data-label=group] a').getAttribute('href') + " " + r.querySelector('td[data-label=who]').textContent.trim().split(" ")[0]})()`)
		if !strings.HasPrefix(first, "takeover /groups/") || !strings.HasSuffix(first, " w3") {
			t.Errorf("the newest timeline entry: %q, want w3's takeover linking its group", first)
		}
		p.shot("dashboard-overview.png")
		// The timeline is paged: walk it through its "older" links.
		var kinds []string
		q1, detail := 0, ""
		for pages := 1; ; pages++ {
			if rows, _ := strconv.Atoi(p.js("the rows", `String(document.querySelectorAll('#timeline tbody tr').length)`)); rows < 1 || rows > 10 {
				t.Fatalf("timeline page %d has %d rows, want 1 to 10", pages, rows)
			}
			// Between them, the admin writes that made the groups and w3.
			if k := p.js("the kinds", `Array.from(document.querySelectorAll('#timeline tbody tr')).map(r => r.dataset.kind).filter(k => k !== "admin_write").join(" ")`); k != "" {
				kinds = append(kinds, k)
			}
			n, _ := strconv.Atoi(p.js("the admin writes", `String(document.querySelectorAll('#timeline tr[data-kind=admin_write] a[href="/groups/q1"]').length)`))
			q1 += n
			if d := p.js("the failure", `(function(){var d=document.querySelector('#timeline tr[data-kind=range_failed] td.detail'); return d ? d.textContent : ""})()`); d != "" {
				detail = d
			}
			if p.js("an older page", `String(!!document.querySelector('#timeline-older'))`) != "true" {
				break
			}
			if pages > 10 {
				t.Fatal("more than 10 timeline pages")
			}
			p.click("older", `#timeline-older`)
			p.until("the older page", fmt.Sprintf(`location.search === "?older=%d" && !!document.querySelector('#timeline-newer')`, pages*10))
		}
		if got := strings.Join(kinds, " "); got != "takeover range_failed quarantine quarantine" {
			t.Errorf("timeline kinds but admin writes, newest first: %q, want takeover, range_failed, quarantine twice", got)
		}
		if q1 != 2 {
			t.Errorf("%d admin writes link q1, want 2 (create, plan)", q1)
		}
		if !strings.Contains(detail, fmt.Sprintf("range %d", failed)) || !strings.Contains(detail, "article 7 malformed") {
			t.Errorf("the failure's entry says %q, want its range and error", detail)
		}
	})

	t.Run("Findings", func(t *testing.T) {
		p.t = t
		p.open("/", `#findings`)
		advice := p.js("lease_quiet's advice", `document.querySelector('#findings tr[data-kind=lease_quiet] td.action').textContent`)
		if !strings.Contains(advice, "Awaits a takeover") {
			t.Errorf("lease_quiet says %q, want that it awaits a takeover", advice)
		}
		why := p.js("range_failed's reason", `document.querySelector('#findings tr[data-kind=range_failed] td.detail').textContent`)
		if !strings.Contains(why, "article 7 malformed") {
			t.Errorf("range_failed says %q, want the worker's error", why)
		}
		p.shot("dashboard-overview-trouble.png")

		p.click("retry the failed range", fmt.Sprintf(`#findings button.retry[data-range="%d"]`, failed))
		p.until("the failed range retried", `location.pathname === "/" && !document.querySelector('#findings tr[data-kind=range_failed]') && document.querySelector('#timeline tbody tr').dataset.kind === "admin_write"`)
		if a := w.j("GET", "/groups/f/ranges?status=failed", w.admin, "").json(t)["ranges"].([]any); len(a) != 0 {
			t.Errorf("f still has failed ranges after retry: %v", a)
		}
		if d := p.js("the retry's entry", `document.querySelector('#timeline tbody tr td.detail').textContent`); !strings.Contains(d, fmt.Sprintf("POST /ranges/%d/retry → 303", failed)) || !strings.Contains(d, "(dashboard)") {
			t.Errorf("the retry's timeline entry: %q", d)
		}

		p.click("keep q1's window", `#findings tr[data-kind=window_unreadable][data-group=q1] button.lift`)
		p.until("q1's quarantine lifted", `location.pathname === "/" && !document.querySelector('#findings tr[data-group=q1]')`)
		if q := w.j("GET", "/groups/q1", w.admin, "").json(t)["quarantine"]; q != nil {
			t.Errorf("q1 after keeping its window: quarantine %v, want none", q)
		}

		p.open("/groups/q2", `#quarantine-box`)
		p.shot("dashboard-group-quarantine.png")
		p.do("open the drop", chromedp.Click(chromedp.CSS(`#quarantine-box details.drop summary`)), chromedp.WaitVisible(chromedp.CSS(`#quarantine-box button.drop`)))
		p.click("drop q2's window", `#quarantine-box button.drop`)
		p.until("q2's quarantine gone", `location.pathname === "/groups/q2" && !document.querySelector('#quarantine-box')`)
		if q := w.j("GET", "/groups/q2", w.admin, "").json(t)["quarantine"]; q != nil {
			t.Errorf("q2 after dropping its window: quarantine %v, want none", q)
		}
	})

	t.Run("Throughput", func(t *testing.T) {
		p.t = t
		p.open("/", `#throughput`)
		start := clock.Now().Truncate(time.Minute).Add(time.Minute).Add(-time.Hour)
		var ticks []string
		for i := 0; i <= 60; i += 10 {
			ticks = append(ticks, start.Add(time.Duration(i)*time.Minute).Format("15:04"))
		}
		axes := p.js("the axes", `["#tp-y-ranges", "#tp-y-headers", "#tp-x"].map(s => Array.from(document.querySelectorAll(s + " span")).map(e => e.textContent).join(" ")).join(" | ")`)
		if want := "1 0.5 0 | 90 45 0 | " + strings.Join(ticks, " "); axes != want {
			t.Errorf("throughput axes %q, want %q (ranges, headers, time)", axes, want)
		}
		finished := clock.Now().Add(-2 * time.Minute).Format("15:04") // before the clock moved
		values := p.js("the values", `Array.from(document.querySelectorAll('#tp-values tbody tr')).map(r => r.textContent).join(" | ")`)
		if values != finished+"190" {
			t.Errorf("throughput values %q, want one minute, %s, with 1 range and 90 headers", values, finished)
		}
	})

	t.Run("GroupWatermarks", func(t *testing.T) {
		p.t = t
		must("report f's marks", w.j("POST", "/groups/f/watermark", w.w2, `{"low":40,"high":480}`), 200)
		must("report idle's source error", w.j("POST", "/groups/idle/watermark", w.w2, `{"error":"411 no such group"}`), 200)
		p.open("/groups/f", `#watermarks`)
		if marks := p.js("f's marks", `document.querySelector('#watermarks').textContent`); !strings.Contains(marks, "40 … 480, last reported") {
			t.Errorf("f's page says %q, want its water marks 40 … 480 and when", marks)
		}
		p.shot("dashboard-group.png")
		p.open("/groups/idle", `#source-error`)
		if e := p.js("idle's source error", `document.querySelector('#source-error').textContent`); !strings.Contains(e, "411 no such group") {
			t.Errorf("idle's page says %q, want its source error", e)
		}
		if marks := p.js("idle's marks", `document.querySelector('#watermarks').textContent`); !strings.Contains(marks, "No water marks") {
			t.Errorf("idle's page says %q, want no water marks", marks)
		}
		p.shot("dashboard-group-source-error.png")
	})

	t.Run("Phone", func(t *testing.T) {
		p.t = t
		p.do("a phone's screen", chromedp.EmulateViewport(390, 844))
		for _, c := range []struct{ path, sel, shot string }{
			{"/", "#findings", "dashboard-overview-phone.png"},
			{"/groups", "#groups", "dashboard-groups-phone.png"},
			{"/groups/f", "#watermarks", "dashboard-group-phone.png"},
			{"/groups/idle", "#source-error", "dashboard-group-source-error-phone.png"},
			{"/nodes", "#nodes", "dashboard-nodes-phone.png"},
			{"/fleet", "#alone", "dashboard-fleet-phone.png"},
		} {
			p.open(c.path, c.sel)
			wide := p.js("what overflows", `(function(){
				var w = document.documentElement.clientWidth, out = [];
				if (document.documentElement.scrollWidth > w) out.push("the page " + document.documentElement.scrollWidth);
				document.querySelectorAll("main table").forEach(function(t){
					var r = t.getBoundingClientRect();
					if (r.right > w + 0.5 || t.scrollWidth > t.clientWidth + 1) out.push("table#" + t.id + " " + Math.round(r.width) + "/" + t.scrollWidth);
				});
				return out.join(", ");
			})()`)
			if wide != "" {
				t.Errorf("%s is wider than a 390px phone: %s", c.path, wide)
			}
			p.shot(c.shot)
		}
	})
}
