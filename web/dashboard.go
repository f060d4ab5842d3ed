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
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

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
	d := &dashboard{s: s, sessions: sessions{m: map[string]time.Time{}, now: s.app.Watchman.Now}, pages: map[string]*template.Template{}}
	funcs := template.FuncMap{
		"ago":        ago,
		"stamp":      stamp,
		"seconds":    func(s float64) string { return human(time.Duration(s * float64(time.Second))) },
		"bytes":      bytesText,
		"progress":   progressSVG,
		"rangesSVG":  rangesSVG,
		"throughput": throughputSVG,
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
	return ck.Value, d.sessions.valid(ck.Value)
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
	p := pageData{Title: title, SignedIn: signedIn && name != "signin", Live: name != "signin", Now: d.s.app.Config.NowFunc(), Data: data}
	if p.SignedIn {
		p.Fleet = d.badge(c)
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
	if !appliance.TokenEqual(c.FormValue("token"), d.s.admin) {
		return d.render(c, http.StatusUnauthorized, "signin", "Sign in", "That is not the admin token.")
	}
	id, err := d.sessions.create()
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request().TLS != nil,
	})
	return c.Redirect(http.StatusSeeOther, "/")
}

func (d *dashboard) signout(c echo.Context) error {
	if id, ok := d.session(c); ok {
		d.sessions.end(id)
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, "/signin")
}

func (d *dashboard) overview(c echo.Context) error {
	o, err := d.s.app.Overview(c.Request().Context(), recentBacklog)
	if err != nil {
		return err
	}
	return d.render(c, http.StatusOK, "overview", "Overview", o)
}

func (d *dashboard) groups(c echo.Context) error {
	prefix := strings.TrimSpace(c.QueryParam("q"))
	after, _ := strconv.ParseInt(c.QueryParam("after"), 10, 64)
	rows, err := d.s.app.GroupRows(c.Request().Context(), prefix, after, groupsPerPage)
	if err != nil {
		return err
	}
	var next int64
	if len(rows) == groupsPerPage {
		next = rows[len(rows)-1].ID
	}
	return d.render(c, http.StatusOK, "groups", "Groups", struct {
		Rows        []appliance.GroupRow
		Prefix      string
		After, Next int64
		Now         time.Time
	}{rows, prefix, after, next, d.s.app.Config.NowFunc()})
}

func (d *dashboard) group(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	p, err := d.s.app.GroupPage(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return d.render(c, http.StatusOK, "group", p.Name, struct {
		appliance.GroupPage
		Now time.Time
	}{p, d.s.app.Config.NowFunc()})
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
	ns, err := d.s.app.Coordinator.Nodes(c.Request().Context())
	if err != nil {
		return err
	}
	return d.render(c, http.StatusOK, "nodes", "Nodes", struct {
		Nodes []leasehold.Node
		Now   time.Time
	}{ns, d.s.app.Config.NowFunc()})
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
	}{Alone: d.s.peers == nil, Now: d.s.app.Config.NowFunc()}
	if !v.Alone {
		var err error
		if v.Status, err = d.fleetStatus(c.Request().Context()); err != nil {
			return err
		}
		c.Set(fleetStatusKey, v.Status)
		if v.Nodes, err = d.s.app.PeerNodes(c.Request().Context()); err != nil {
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
	if _, err := d.s.app.Coordinator.SetPaused(c.Request().Context(), id, paused, "dashboard"); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/nodes")
}

func (d *dashboard) retry(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if _, err := d.s.app.Coordinator.Retry(c.Request().Context(), id); err != nil {
		return err
	}
	back := c.FormValue("back")
	// Only a path on this node: never an open redirect.
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.Contains(back, "\\") {
		back = "/"
	}
	return c.Redirect(http.StatusSeeOther, back)
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

var statusOrder = []string{leasehold.StatusDone, leasehold.StatusLeased, leasehold.StatusPlanned, leasehold.StatusFailed}

// progressSVG draws a group's ranges as one bar: done, leased, planned,
// failed, each by its share of the ranges.
func progressSVG(counts map[string]int64) template.HTML {
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
			html.EscapeString(r.Status), r.ID, x, w, height, r.ID, r.Start, r.End, html.EscapeString(r.Status), r.Next)
	}
	// The axis is labelled in HTML: text inside a stretched SVG would
	// shrink to nothing on a phone.
	fmt.Fprintf(&b, `</svg><p class="axis"><span>%d</span><span>%d</span></p>`, lo, hi)
	return template.HTML(b.String())
}

// throughputSVG draws ranges finished per minute as bars and headers per
// minute as a line, each on its own scale.
func throughputSVG(ms []appliance.Minute) template.HTML {
	const width, height = 1000.0, 140.0
	var maxR, maxH, sumR, sumH int64
	for _, m := range ms {
		maxR, maxH = max(maxR, m.Ranges), max(maxH, m.Headers)
		sumR, sumH = sumR+m.Ranges, sumH+m.Headers
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="throughput" viewBox="0 0 %g %g" role="img" aria-label="%d ranges and %d headers in the last hour">`, width, height+16, sumR, sumH)
	if len(ms) > 0 {
		bw := width / float64(len(ms))
		var line strings.Builder
		for i, m := range ms {
			if maxR > 0 && m.Ranges > 0 {
				h := height * float64(m.Ranges) / float64(maxR)
				fmt.Fprintf(&b, `<rect class="tp-ranges" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s: %d ranges, %d headers</title></rect>`,
					float64(i)*bw+1, height-h, bw-2, h, m.At.Format("15:04"), m.Ranges, m.Headers)
			}
			y := height
			if maxH > 0 {
				y = height - height*float64(m.Headers)/float64(maxH)
			}
			fmt.Fprintf(&line, "%.2f,%.2f ", float64(i)*bw+bw/2, y)
		}
		fmt.Fprintf(&b, `<polyline class="tp-headers" points="%s"/>`, strings.TrimSpace(line.String()))
		fmt.Fprintf(&b, `<text x="0" y="%g">%s</text><text x="%g" y="%g" text-anchor="end">%s</text>`,
			height+14, ms[0].At.Format("15:04"), width, height+14, ms[len(ms)-1].At.Add(time.Minute).Format("15:04"))
	}
	b.WriteString(`</svg>`)
	fmt.Fprintf(&b, `<p class="note"><span class="st-leased">■</span> ranges finished a minute (peak %d) · <span class="st-done">━</span> headers a minute (peak %d) · <span id="tp-total">%d ranges, %d headers this hour</span></p>`, maxR, maxH, sumR, sumH)
	return template.HTML(b.String())
}

// bytesText is a size for people: 512 B, 1.5 KiB, 2.0 GiB.
func bytesText(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }
