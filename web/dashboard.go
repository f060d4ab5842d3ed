package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"html"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/dustin/go-humanize"
	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// The dashboard: server-rendered pages over the appliance, signed in with
// the admin token. Its templates and static files are embedded, so the
// binary serves it with nothing else installed.
//
//go:embed dashboard/*.html dashboard/static/*
var dashboardFS embed.FS

const (
	sessionCookie = "leasehold_session"
	sessionTTL    = 12 * time.Hour
	groupsPerPage = 50
)

// sessions are the signed-in browsers, by random id, kept in memory: a
// restart signs everyone out, which is the safe side for an admin token.
type sessions struct {
	mu  sync.Mutex
	m   map[string]time.Time // id → expiry, on the node's clock
	now func() time.Time     // the node's clock
}

func (s *sessions) create() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, exp := range s.m { // sweep on sign-in: sessions are few
		if now.After(exp) {
			delete(s.m, k)
		}
	}
	s.m[id] = now.Add(sessionTTL)
	return id, nil
}

func (s *sessions) valid(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.m[id]
	if ok && s.now().After(exp) {
		delete(s.m, id)
		return false
	}
	return ok
}

// endAll signs every browser out (the admin token they signed in with
// was replaced).
func (s *sessions) endAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.m)
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

type dashboard struct {
	s        *Server
	sessions sessions
	pages    map[string]*template.Template
}

// pageData is what every template gets.
type pageData struct {
	Title    string
	SignedIn bool
	Live     bool
	Now      time.Time
	// Fleet is the node's place in its fleet for the nav; nil when the
	// node runs alone (--nats off) or nobody is signed in.
	Fleet *fleetBadge
	// Build is the running build for the footer; shown only to someone
	// signed in, as a version tells a stranger what to try.
	Build leasehold.BuildInfo
	Data  any
}

// fleetBadge is what the nav says of peer sync on every page: the node's
// name and whether it reaches NATS now. Unknown means the fleet status
// could not be read, which the nav says rather than failing the page.
type fleetBadge struct {
	Name      string
	Connected bool
	Unknown   bool
}

// fleetStatusKey carries a status the handler already read to render, so
// the fleet page asks for it once.
const fleetStatusKey = "leasehold.fleet"

func (s *Server) mountDashboard(e *echo.Echo) {
	d := &dashboard{s: s, sessions: sessions{m: map[string]time.Time{}, now: s.node.Watchman.Now}, pages: map[string]*template.Template{}}
	s.admin.endSessionsFunc = d.sessions.endAll
	funcs := template.FuncMap{
		"ago":        ago,
		"stamp":      stamp,
		"seconds":    func(s float64) string { return human(time.Duration(s * float64(time.Second))) },
		"bytes":      bytesText,
		"progress":   progressSVG,
		"rangesSVG":  rangesSVG,
		"throughput": throughputSVG,
		"groupsLink": groupsLink,
		"clears":     clears,
		"band":       band,
		"deref":      func(p *int64) int64 { return *p },
		// count is a range count by status: a template's status is a
		// string, the maps' keys are range statuses.
		"count": func(counts map[leasehold.RangeStatus]int64, status string) int64 {
			return counts[leasehold.RangeStatus(status)]
		},
	}
	for _, name := range []string{"signin", "overview", "groups", "group", "nodes", "fleet"} {
		d.pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(dashboardFS, "dashboard/layout.html", "dashboard/"+name+".html"))
	}
	static, _ := fs.Sub(dashboardFS, "dashboard/static")
	e.GET("/static/*", echo.WrapHandler(http.StripPrefix("/static/", http.FileServer(http.FS(static)))), headers)

	e.GET("/signin", d.signinForm, headers)
	e.POST("/signin", d.signin, headers, d.sameOrigin)
	e.POST("/signout", d.signout, headers, d.sameOrigin, d.requireSession)
	view := func(path string, h echo.HandlerFunc) { e.GET(path, h, headers, d.requireSession) }
	view("/", d.overview)
	view("/groups", d.groups)
	view("/groups/:name", d.group)
	view("/groups/:name/snapshot", d.snapshot)
	view("/nodes", d.nodes)
	view("/fleet", d.fleet)
	act := func(path string, h echo.HandlerFunc) {
		e.POST(path, h, headers, d.sameOrigin, d.requireSession, s.auditAdmin("dashboard"))
	}
	act("/nodes/:id/pause", func(c echo.Context) error { return d.setPaused(c, true) })
	act("/nodes/:id/resume", func(c echo.Context) error { return d.setPaused(c, false) })
	act("/ranges/:id/retry", d.retry)
	act("/groups/:name/quarantine/lift", d.liftQuarantine)
	act("/groups/:name/window/drop", d.dropWindow)
}

// headers keep the pages to themselves: no framing (clickjacking), no
// script or style from anywhere but the node, no caching of admin pages.
func headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(c.Request().URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		return next(c)
	}
}

var (
	errNoSession   = leasehold.Errorf(leasehold.KindForbidden, "sign in first")
	errCrossOrigin = leasehold.Errorf(leasehold.KindForbidden, "the request's Origin is not this node")
)

func (d *dashboard) session(c echo.Context) (string, bool) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return "", false
	}
	if !d.sessions.valid(ck.Value) {
		return ck.Value, false
	}
	markAuthenticated(c.Request())
	return ck.Value, true
}

// requireSession sends a browser without a session to the sign-in page;
// a state-changing request without one is refused outright.
func (d *dashboard) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, ok := d.session(c); ok {
			return next(c)
		}
		if c.Request().Method == http.MethodGet || c.Request().Method == http.MethodHead {
			return c.Redirect(http.StatusSeeOther, "/signin")
		}
		return errNoSession
	}
}

// sameOrigin refuses a POST whose Origin (or, lacking one, Referer) is not
// this node: SameSite=Strict already keeps the cookie off cross-site
// requests, and this check holds even for a browser that ignores it. A
// POST that names neither is refused too.
func (d *dashboard) sameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		src := r.Header.Get("Origin")
		if src == "" {
			src = r.Header.Get("Referer")
		}
		u, err := url.Parse(src)
		if src == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host != r.Host {
			return errCrossOrigin
		}
		return next(c)
	}
}

func (d *dashboard) render(c echo.Context, status int, name, title string, data any) error {
	_, signedIn := d.session(c)
	var buf bytes.Buffer
	p := pageData{Title: title, SignedIn: signedIn && name != "signin", Live: name != "signin", Now: d.s.node.Config.NowFunc(), Data: data}
	if p.SignedIn {
		p.Fleet = d.badge(c)
		p.Build = leasehold.Build()
	}
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// badge reads the nav's fleet state: nil when peer sync does not run.
func (d *dashboard) badge(c echo.Context) *fleetBadge {
	if d.s.peers == nil {
		return nil
	}
	st, ok := c.Get(fleetStatusKey).(leasehold.FleetStatus)
	if !ok {
		var err error
		if st, err = d.fleetStatus(c.Request().Context()); err != nil {
			return &fleetBadge{Unknown: true}
		}
	}
	return &fleetBadge{Name: st.Name, Connected: st.Connected}
}

// fleetStatus asks peer sync for the fleet, bounded: the nav of every
// page waits for it, and a page must not hang on it.
func (d *dashboard) fleetStatus(ctx context.Context) (leasehold.FleetStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.s.peers(ctx)
}

func (d *dashboard) signinForm(c echo.Context) error {
	if _, ok := d.session(c); ok {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return d.render(c, http.StatusOK, "signin", "Sign in", "")
}

func (d *dashboard) signin(c echo.Context) error {
	if !d.s.admin.is(c.FormValue("token")) {
		d.s.authFailed(c, authDashboard)
		return d.render(c, http.StatusUnauthorized, "signin", "Sign in", "That is not the admin token.")
	}
	markAuthenticated(c.Request())
	id, err := d.sessions.create()
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.s.overHTTPS(c.Request()),
	})
	return c.Redirect(http.StatusSeeOther, "/")
}

func (d *dashboard) signout(c echo.Context) error {
	if id, ok := d.session(c); ok {
		d.sessions.end(id)
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.s.overHTTPS(c.Request())})
	return c.Redirect(http.StatusSeeOther, "/signin")
}

// overviewPage is the overview: the findings (each with what clears
// it), then the counts, the throughput and the backlog, and last one page
// of the timeline of the operator's log, with links to older and newer
// pages.
type overviewPage struct {
	appliance.Overview
	Timeline      []timelineEntry
	TimelineKept  int
	TimelineSince time.Time
	// Older is the timeline entries skipped (the page shows the newest
	// after them), FirstShown and LastShown the entries shown, counted
	// from the newest; the links to newer and older pages skip NewerAt and
	// OlderAt, shown when HasNewer and HasOlder.
	Older, FirstShown, LastShown int
	NewerAt, OlderAt             int
	HasNewer, HasOlder           bool
}

func (d *dashboard) overview(c echo.Context) error {
	skip := 0
	if q := c.QueryParam("older"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 || n > timelineSize {
			return leasehold.Errorf(leasehold.KindInvalid, "older %q: want a count of timeline entries, 0 to %d", q, timelineSize)
		}
		skip = n
	}
	o, err := d.s.node.Reads.Overview(c.Request().Context(), recentBacklog)
	if err != nil {
		return err
	}
	p := overviewPage{Overview: o, Older: skip}
	p.Timeline, p.HasOlder = d.s.timeline.page(skip, timelinePage)
	p.FirstShown, p.LastShown = skip+1, skip+len(p.Timeline)
	p.HasNewer, p.NewerAt, p.OlderAt = skip > 0, max(skip-timelinePage, 0), skip+timelinePage
	p.TimelineKept, p.TimelineSince = d.s.timeline.held()
	return d.render(c, http.StatusOK, "overview", "Overview", p)
}

// groupView is a row of the groups table with what the page marks on
// it: a failed range, and a holder's heartbeat older than the lease TTL
// (stale: the holder is quiet, and the group awaits a takeover).
type groupView struct {
	appliance.GroupRow
	Failing bool
	Stale   bool
}

// trouble orders rows for sort=state: quarantined, failing, stale, held,
// waiting, idle, inactive.
func (v groupView) trouble() int {
	switch {
	case v.State == leasehold.GroupQuarantined:
		return 0
	case v.Failing:
		return 1
	case v.Stale:
		return 2
	}
	return 3 + slices.Index([]string{leasehold.GroupHeld, leasehold.GroupWaiting, leasehold.GroupIdle, leasehold.GroupInactive}, v.State)
}

// groupSorts are the orders of a page of the groups table: by id (the
// default), by trouble first, by oldest heartbeat, by name. A sort orders
// the page's rows; which rows are on the page is the filter's.
var groupSorts = []string{"", "state", "heartbeat", "name"}

// filterTab is a filter of the groups table with its count (the tallies).
type filterTab struct {
	State, Label string
	Count        int64
}

// groupsLink is the groups table's address with a filter, sort and page.
func groupsLink(prefix, state, sortBy string, after int64) string {
	v := url.Values{}
	if prefix != "" {
		v.Set("q", prefix)
	}
	if state != "" {
		v.Set("state", state)
	}
	if sortBy != "" {
		v.Set("sort", sortBy)
	}
	if after > 0 {
		v.Set("after", strconv.FormatInt(after, 10))
	}
	if len(v) == 0 {
		return "/groups"
	}
	return "/groups?" + v.Encode()
}

func (d *dashboard) groups(c echo.Context) error {
	ctx := c.Request().Context()
	prefix := strings.TrimSpace(c.QueryParam("q"))
	state, sortBy := c.QueryParam("state"), c.QueryParam("sort")
	after, _ := strconv.ParseInt(c.QueryParam("after"), 10, 64)
	if !slices.Contains(groupSorts, sortBy) {
		return leasehold.Errorf(leasehold.KindInvalid, "no sort %q: use state, heartbeat or name", sortBy)
	}
	var rows []appliance.GroupRow
	var next int64
	var err error
	if state == "" {
		if rows, err = d.s.node.Reads.GroupRows(ctx, prefix, after, groupsPerPage); err == nil && len(rows) == groupsPerPage {
			next = rows[len(rows)-1].ID
		}
	} else {
		prefix = "" // a state's groups are listed by id, whatever their names
		rows, next, err = d.s.node.Reads.GroupRowsIn(ctx, state, after, groupsPerPage)
	}
	if err != nil {
		return err
	}
	t, err := d.s.node.Reads.Tallies(ctx)
	if err != nil {
		return err
	}
	now := d.s.node.Config.NowFunc()
	views := make([]groupView, len(rows))
	for i, r := range rows {
		views[i] = groupView{GroupRow: r, Failing: r.Ranges[leasehold.StatusFailed] > 0,
			Stale: r.Holder != "" && r.HeartbeatAt != nil && now.Sub(*r.HeartbeatAt) > d.s.node.Config.LeaseTTL}
	}
	switch sortBy {
	case "state":
		slices.SortStableFunc(views, func(a, b groupView) int { return a.trouble() - b.trouble() })
	case "heartbeat": // oldest first; unheld groups last
		slices.SortStableFunc(views, func(a, b groupView) int {
			switch {
			case a.HeartbeatAt == nil || b.HeartbeatAt == nil:
				return boolInt(a.HeartbeatAt == nil) - boolInt(b.HeartbeatAt == nil)
			}
			return a.HeartbeatAt.Compare(*b.HeartbeatAt)
		})
	case "name":
		slices.SortStableFunc(views, func(a, b groupView) int { return strings.Compare(a.Name, b.Name) })
	}
	both := func(s string) int64 { return t.Owned[s] + t.Unowned[s] }
	tabs := []filterTab{
		{"", "all", 0},
		{"failing", "failing", t.Ranges[leasehold.StatusFailed]},
		{"quarantined", "quarantined", both(leasehold.GroupQuarantined)},
		{"held", "held", both(leasehold.GroupHeld)},
		{"idle", "idle", both(leasehold.GroupIdle)},
	}
	for _, g := range leasehold.GroupStates {
		tabs[0].Count += both(g)
	}
	return d.render(c, http.StatusOK, "groups", "Groups", struct {
		Rows          []groupView
		Tabs          []filterTab
		Prefix, State string
		Sort          string
		After, Next   int64
		Now           time.Time
		LeaseTTL      time.Duration
	}{views, tabs, prefix, state, sortBy, after, next, now, d.s.node.Config.LeaseTTL})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (d *dashboard) group(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	p, err := d.s.node.Reads.GroupPage(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return d.render(c, http.StatusOK, "group", p.Name, struct {
		appliance.GroupPage
		Now time.Time
	}{p, d.s.node.Config.NowFunc()})
}

// snapshot downloads a group's window snapshot, as the admin endpoint
// does, on the session instead of the bearer token.
func (d *dashboard) snapshot(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.window.gz"`, name))
	return d.s.adminGetSnapshot(c)
}

func (d *dashboard) nodes(c echo.Context) error {
	ns, err := d.s.node.Admin.Nodes(c.Request().Context())
	if err != nil {
		return err
	}
	agents := make(map[int64]*workerAgent, len(ns))
	for _, n := range ns {
		if a, ok := d.s.agents.get(n.ID); ok {
			agents[n.ID] = &a
		}
	}
	return d.render(c, http.StatusOK, "nodes", "Nodes", struct {
		Nodes  []leasehold.Node
		Agents map[int64]*workerAgent
		Now    time.Time
	}{ns, agents, d.s.node.Config.NowFunc()})
}

// fleet shows the fleet as this node sees it: its own name, whether peer
// sync runs and reaches NATS, the groups it owns, its peers and their
// worker nodes. A node running alone says so.
func (d *dashboard) fleet(c echo.Context) error {
	v := struct {
		Alone  bool
		Status leasehold.FleetStatus
		Nodes  []appliance.PeerNode
		Now    time.Time
	}{Alone: d.s.peers == nil, Now: d.s.node.Config.NowFunc()}
	if !v.Alone {
		var err error
		if v.Status, err = d.fleetStatus(c.Request().Context()); err != nil {
			return err
		}
		c.Set(fleetStatusKey, v.Status)
		if v.Nodes, err = d.s.node.Reads.PeerNodes(c.Request().Context()); err != nil {
			return err
		}
	}
	return d.render(c, http.StatusOK, "fleet", "Fleet", v)
}

func (d *dashboard) setPaused(c echo.Context, paused bool) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if _, err := d.s.node.Admin.SetPaused(c.Request().Context(), id, paused, "dashboard"); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/nodes")
}

func (d *dashboard) retry(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if _, err := d.s.node.Admin.Retry(c.Request().Context(), id); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, back(c))
}

// back is where an action sends the browser after it: the form's back
// field when it is a path on this node (never an open redirect), else
// the overview. A control character is refused too: browsers drop tabs
// and newlines from a Location, so "/\t/evil.example" would become
// "//evil.example".
func back(c echo.Context) string {
	b := c.FormValue("back")
	if !strings.HasPrefix(b, "/") || strings.HasPrefix(b, "//") || strings.Contains(b, "\\") ||
		strings.ContainsFunc(b, unicode.IsControl) {
		return "/"
	}
	return b
}

// liftQuarantine keeps a quarantined group's window: the group is leased
// again with it (rule 10), as DELETE /api/v1/groups/{name}/quarantine.
func (d *dashboard) liftQuarantine(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	if _, err := d.s.node.Admin.LiftQuarantine(c.Request().Context(), name); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, back(c))
}

// dropWindow drops a group's window and lifts its quarantine (rule 2
// without a snapshot), as DELETE /api/v1/groups/{name}/snapshot; refused
// while the group is held.
func (d *dashboard) dropWindow(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	if _, err := d.s.node.Reads.DropSnapshot(c.Request().Context(), name); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, back(c))
}

// clears says what clears a finding the dashboard has no button for.
// Retry (range_failed) and keep or drop the window (window_unreadable)
// are buttons in the template.
func clears(kind leasehold.FindingKind) string {
	switch kind {
	case leasehold.FindingLeaseQuiet:
		return "Awaits a takeover: the next worker that asks for a lease takes the group over from its window snapshot. Nothing to do unless no worker is free."
	case leasehold.FindingRangeStale:
		return "Awaits its holder's heartbeat, or a takeover of the group once the holder is quiet past the lease TTL."
	case leasehold.FindingNodeUnseen:
		return "Pause the node, or delete it if it is gone for good (leasehold admin nodes delete NAME): its groups are taken over."
	case leasehold.FindingSnapshotOld:
		return "Look at the holder's log: its worker should upload its window; a takeover would resume from this old one."
	case leasehold.FindingFlapping:
		return "Look at the group: its ranges' last errors and its workers' logs; pause the node that cannot work it."
	case leasehold.FindingNoWorkerForKind:
		return "Start a worker that reads this kind, or give a node the kind (leasehold admin nodes kinds NAME KIND)."
	case leasehold.FindingSourceUnreadable:
		return "Check the group at its source (does the server carry it, is the login right, is the host up); the next good report from the worker clears it."
	case leasehold.FindingPeerSyncStuck:
		return "Check this node's NATS (the peers page, the node's log); its writes wait in the outbox and are published once NATS takes them."
	}
	return ""
}

// ago is how long before now t was, for people.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "just now"
	}
	return human(d) + " ago"
}

// stamp is an instant as the fleet page prints it: UTC to the second,
// the same on every node of the fleet whatever its time zone.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func human(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

var statusOrder = []leasehold.RangeStatus{leasehold.StatusDone, leasehold.StatusLeased, leasehold.StatusPlanned, leasehold.StatusFailed}

// progressSVG draws a group's ranges as one bar: done, leased, planned,
// failed, each by its share of the ranges.
func progressSVG(counts map[leasehold.RangeStatus]int64) template.HTML {
	var total int64
	for _, s := range statusOrder {
		total += counts[s]
	}
	var b strings.Builder
	b.WriteString(`<svg class="bar" viewBox="0 0 200 10" preserveAspectRatio="none" role="img" aria-label="progress">`)
	b.WriteString(`<rect x="0" y="0" width="200" height="10" fill="#e9ecef"/>`)
	x := 0.0
	for _, s := range statusOrder {
		if total == 0 || counts[s] == 0 {
			continue
		}
		w := 200 * float64(counts[s]) / float64(total)
		fmt.Fprintf(&b, `<rect class="st-%s" x="%.2f" y="0" width="%.2f" height="10"><title>%d %s</title></rect>`, s, x, w, counts[s], s)
		x += w
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// rangesSVG draws ranges at their place on the id axis, coloured by
// status.
func rangesSVG(rs []leasehold.Range) template.HTML {
	if len(rs) == 0 {
		return template.HTML(`<p class="note">No ranges planned.</p>`)
	}
	lo, hi := rs[0].Start, rs[0].End
	for _, r := range rs {
		lo, hi = min(lo, r.Start), max(hi, r.End)
	}
	span := float64(hi - lo + 1)
	const width, height = 1000.0, 40.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="ranges" viewBox="0 0 %g %g" preserveAspectRatio="none" role="img" aria-label="ranges from %d to %d">`, width, height, lo, hi)
	for _, r := range rs {
		x := width * float64(r.Start-lo) / span
		w := max(width*float64(r.End-r.Start+1)/span, 0.5)
		fmt.Fprintf(&b, `<rect class="st-%s" data-range="%d" x="%.3f" y="0" width="%.3f" height="%g"><title>range %d: %d … %d, %s, next %d</title></rect>`,
			html.EscapeString(string(r.Status)), r.ID, x, w, height, r.ID, r.Start, r.End, html.EscapeString(string(r.Status)), r.Next)
	}
	// The axis is labelled in HTML: text inside a stretched SVG would
	// shrink to nothing on a phone.
	fmt.Fprintf(&b, `</svg><p class="axis"><span>%d</span><span>%d</span></p>`, lo, hi)
	return template.HTML(b.String())
}

// throughputSVG draws ranges finished per minute as bars and headers per
// minute as a line, each on its own scale, with axes: ranges a minute on
// the left, headers a minute on the right, the time below every ten
// minutes, and the values of each minute with any work in a table under
// it. The labels are HTML around a stretched SVG, so they stay readable
// on a phone; the SVG's gridlines mark where they point.
func throughputSVG(ms []appliance.Minute) template.HTML {
	const width, height = 600.0, 150.0
	var maxR, maxH, sumR, sumH int64
	for _, m := range ms {
		maxR, maxH = max(maxR, m.Ranges), max(maxH, m.Headers)
		sumR, sumH = sumR+m.Ranges, sumH+m.Headers
	}
	scaleR, scaleH := float64(max(maxR, 1)), float64(max(maxH, 1))
	var b strings.Builder
	b.WriteString(`<figure class="chart">`)
	axis := func(id, class string, top float64) {
		fmt.Fprintf(&b, `<div class="y %s" id="%s"><span>%s</span><span>%s</span><span>0</span></div>`,
			class, id, axisValue(top), axisValue(top/2))
	}
	axis("tp-y-ranges", "left st-leased", scaleR)
	fmt.Fprintf(&b, `<svg id="throughput" viewBox="0 0 %g %g" preserveAspectRatio="none" role="img" aria-label="%d ranges and %d headers in the last hour">`,
		width, height, sumR, sumH)
	for _, y := range []float64{0.5, height / 2, height - 0.5} {
		fmt.Fprintf(&b, `<line class="grid" x1="0" x2="%g" y1="%g" y2="%g"/>`, width, y, y)
	}
	var ticks []time.Time
	if len(ms) > 0 {
		bw := width / float64(len(ms))
		for i := 0; i <= len(ms); i += 10 {
			x := float64(i) * bw
			fmt.Fprintf(&b, `<line class="grid" x1="%.2f" x2="%.2f" y1="0" y2="%g"/>`, x, x, height)
			ticks = append(ticks, ms[0].At.Add(time.Duration(i)*time.Minute))
		}
		var line strings.Builder
		for i, m := range ms {
			if m.Ranges > 0 {
				h := height * float64(m.Ranges) / scaleR
				fmt.Fprintf(&b, `<rect class="tp-ranges" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s: %d ranges, %d headers</title></rect>`,
					float64(i)*bw+1, height-h, bw-2, h, m.At.Format("15:04"), m.Ranges, m.Headers)
			}
			fmt.Fprintf(&line, "%.2f,%.2f ", float64(i)*bw+bw/2, height-height*float64(m.Headers)/scaleH)
		}
		fmt.Fprintf(&b, `<polyline class="tp-headers" points="%s"/>`, strings.TrimSpace(line.String()))
	}
	b.WriteString(`</svg>`)
	axis("tp-y-headers", "right st-done", scaleH)
	b.WriteString(`<div class="x" id="tp-x">`)
	for _, t := range ticks {
		fmt.Fprintf(&b, `<span>%s</span>`, t.Format("15:04"))
	}
	b.WriteString(`</div>`)
	fmt.Fprintf(&b, `<figcaption class="note"><span class="st-leased">■</span> ranges finished a minute, left axis (peak %d) · <span class="st-done">━</span> headers a minute, right axis (peak %d) · <span id="tp-total">%d ranges, %d headers this hour</span></figcaption></figure>`,
		maxR, maxH, sumR, sumH)
	b.WriteString(`<details id="tp-values"><summary>Values a minute</summary><table><thead><tr><th>minute</th><th>ranges</th><th>headers</th></tr></thead><tbody>`)
	busy := 0
	for i := len(ms) - 1; i >= 0; i-- {
		if m := ms[i]; m.Ranges > 0 || m.Headers > 0 {
			busy++
			fmt.Fprintf(&b, `<tr><td data-label="minute">%s</td><td data-label="ranges">%d</td><td data-label="headers">%d</td></tr>`, m.At.Format("15:04"), m.Ranges, m.Headers)
		}
	}
	if busy == 0 {
		b.WriteString(`<tr><td colspan="3">No range finished this hour.</td></tr>`)
	}
	b.WriteString(`</tbody></table></details>`)
	return template.HTML(b.String())
}

// axisValue is a value on the throughput's axes: 90, 12,345, 0.5.
func axisValue(f float64) string {
	if f == float64(int64(f)) {
		return humanize.Comma(int64(f))
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// bytesText is a size for people: 512 B, 1.5 KiB, 2.0 GiB.
func bytesText(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }

// band is a node's priority band as the nodes page shows it: "all" for
// the whole int32 range (the default), else "min … max".
func band(min, max int64) string {
	if min <= math.MinInt32 && max >= math.MaxInt32 {
		return "all"
	}
	return fmt.Sprintf("%d … %d", min, max)
}
