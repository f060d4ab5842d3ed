// Package web is leasehold's HTTP face: the JSON API of API.md with echo,
// snapshot streaming, bearer-token auth, health, Prometheus metrics and the
// operator's dashboard (embedded pages behind a session cookie). It calls
// the appliance and never touches SQL.
package web

import (
	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// Options configure a Server.
type Options struct {
	// AdminToken is the token of the admin endpoints.
	AdminToken string
	// AdminTokenFile, when set, is the file the admin token is kept in:
	// POST /api/v1/admin/token replaces it (0600) before it answers.
	AdminTokenFile string
	Metrics        *Metrics
	// Logger writes the operator's log; when its handler is a
	// TimelineFeed, the lines it marks are on this server's timeline.
	Logger *slog.Logger
	// Peers, when set, answers GET /api/v1/peers (peer sync runs); without
	// it the node answers that it runs alone.
	Peers func(context.Context) (leasehold.FleetStatus, error)
	// Members, when set, removes members from the fleet and approves
	// them again (DELETE /api/v1/peers/{name}); without it the node
	// answers that it runs alone.
	Members Members
	// Timeouts against slow clients; zero takes the defaults below. Tests
	// shorten them to see a slow client cut off.
	ReadHeaderTimeout time.Duration
	JSONReadTimeout   time.Duration
	StreamIdleTimeout time.Duration
	// TrustedProxies are the addresses whose X-Forwarded-Proto is
	// believed: a browser that reached such a proxy over HTTPS gets a
	// Secure cookie and HSTS, as one served with TLS does.
	TrustedProxies []netip.Prefix
	// SnapshotUploadTimeout is how long a whole snapshot upload may take,
	// however steadily it trickles in.
	SnapshotUploadTimeout time.Duration
	// WrapFunc, when set, wraps the server's handler (the tests record
	// every answer to check it against the OpenAPI description).
	WrapFunc func(http.Handler) http.Handler
}

// Server serves the API over one node, through the doors it declares
// (Doors).
type Server struct {
	node    Doors
	echo    *echo.Echo
	http    *http.Server
	admin   *adminToken
	metrics *Metrics
	log     *slog.Logger
	peers   func(context.Context) (leasehold.FleetStatus, error)
	members Members
	refused refusals
	// trustedProxies may say a request came over HTTPS (overHTTPS).
	trustedProxies []netip.Prefix
	// authFails rate-limits the log of failed authentication.
	authFails authFailures
	// timeline is the operator's log as the dashboard shows it.
	timeline *timeline
	// agents are the worker nodes' last User-Agent and address.
	agents workerAgents

	jsonRead   time.Duration // how long a JSON request may take to arrive
	streamIdle time.Duration // how long a snapshot stream may stall
	// uploadTotal is how long a whole snapshot upload may take.
	uploadTotal time.Duration
}

// Timeouts against slow clients. A JSON request must arrive whole within
// jsonReadTimeout; a snapshot body may take as long as it needs, but no
// read or write may stall longer than streamIdleTimeout.
const (
	readHeaderTimeout = 10 * time.Second
	jsonReadTimeout   = 30 * time.Second
	streamIdleTimeout = 60 * time.Second
	idleTimeout       = 120 * time.Second
	// DefaultSnapshotUploadTimeout lets the largest default snapshot
	// (64 GiB) arrive at about 20 MB/s.
	DefaultSnapshotUploadTimeout = time.Hour
)

// New builds the server and its routes over node's doors (node.DoorsOf).
func New(node Doors, o Options) *Server {
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = readHeaderTimeout
	}
	if o.JSONReadTimeout <= 0 {
		o.JSONReadTimeout = jsonReadTimeout
	}
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = streamIdleTimeout
	}
	if o.SnapshotUploadTimeout <= 0 {
		o.SnapshotUploadTimeout = DefaultSnapshotUploadTimeout
	}
	s := &Server{node: node, admin: &adminToken{token: o.AdminToken, file: o.AdminTokenFile}, metrics: o.Metrics, log: o.Logger, peers: o.Peers, members: o.Members,
		jsonRead: o.JSONReadTimeout, streamIdle: o.StreamIdleTimeout, uploadTotal: o.SnapshotUploadTimeout, refused: refusals{nodes: map[int64]*refusalSum{}},
		timeline: newTimeline(node.Watchman.Now()), trustedProxies: o.TrustedProxies}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.metrics.middleware, recoverPanics(s.log), s.deadlines, rememberRequest)
	e.Use(s.transportSecurity)
	s.echo = e
	// A second server on the same Metrics keeps the first one's gauges,
	// and the first one's operator's log.
	if wc := newWatchCollector(node.Watchman, s.log); s.metrics.reg.Register(wc) == nil {
		s.metrics.watch.Store(wc)
	}
	s.metrics.operator.CompareAndSwap(nil, s)
	// The fleet's marked lines reach the timeline through the log.
	if f, ok := s.log.Handler().(*TimelineFeed); ok {
		f.feed(s.timeline)
	}
	// The room left on the data disk, read at scrape time: a disk filling
	// up is seen before writes fail with 507 (the low-disk alert).
	s.metrics.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasehold_data_free_bytes", Help: "Bytes free on the data directory's disk for the node (-1: unreadable).",
	}, func() float64 { return float64(node.Reads.DataFreeBytes()) }))

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(s.metrics.handler()))
	e.GET("/api/v1/openapi.json", s.openAPI)

	const v1 = "/api/v1"
	// Admin writes are logged once answered (who, from where, what).
	admin := func(method, path string, h echo.HandlerFunc) {
		if writeMethod(method) {
			e.Add(method, v1+path, h, s.requireAdmin, s.auditAdmin(""))
			return
		}
		e.Add(method, v1+path, h, s.requireAdmin)
	}
	admin(http.MethodPost, "/nodes", s.registerNode)
	admin(http.MethodGet, "/nodes", s.listNodes)
	admin(http.MethodPost, "/nodes/:id/pause", s.pauseNode)
	admin(http.MethodPost, "/nodes/:id/resume", s.resumeNode)
	admin(http.MethodPatch, "/nodes/:id", s.changeNode)
	admin(http.MethodDelete, "/nodes/:id", s.deleteNode)
	admin(http.MethodPost, "/admin/token", s.rotateAdminToken)
	// A node may change its own token; the admin any node's.
	e.Add(http.MethodPost, v1+"/nodes/:id/token", s.rotateNodeToken, s.requireAdminOrSelf, s.auditAdmin(""))
	admin(http.MethodPut, "/groups/:name", s.putGroup)
	admin(http.MethodGet, "/groups", s.listGroups)
	admin(http.MethodGet, "/groups/:name", s.getGroup)
	admin(http.MethodDelete, "/groups/:name", s.deleteGroup)
	admin(http.MethodPost, "/groups/:name/tail", s.planTail)
	admin(http.MethodPost, "/groups/:name/history", s.planHistory)
	admin(http.MethodGet, "/groups/:name/ranges", s.listRanges)
	admin(http.MethodGet, "/groups/:name/snapshot", s.adminGetSnapshot)
	admin(http.MethodPut, "/groups/:name/snapshot", s.adminPutSnapshot)
	admin(http.MethodDelete, "/groups/:name/snapshot", s.dropSnapshot)
	admin(http.MethodDelete, "/groups/:name/quarantine", s.liftQuarantine)
	admin(http.MethodPost, "/ranges/:id/retry", s.retryRange)
	admin(http.MethodPut, "/rules", s.putRules)
	admin(http.MethodGet, "/rules", s.getRules)
	admin(http.MethodGet, "/findings", s.findings)
	admin(http.MethodGet, "/peers", s.listPeers)
	admin(http.MethodDelete, "/peers/:name", s.removeMember)
	admin(http.MethodPost, "/peers/:name/approve", s.approveMember)
	admin(http.MethodGet, "/backup", s.backup)

	// Refused holder calls are counted, and logged once a minute a node.
	worker := func(method, path string, h echo.HandlerFunc) {
		e.Add(method, v1+path, h, s.requireNode, s.noteRefusals)
	}
	worker(http.MethodPost, "/leases", s.lease)
	worker(http.MethodPost, "/leases/:group/next", s.next)
	worker(http.MethodPost, "/leases/:group/heartbeat", s.heartbeat)
	worker(http.MethodPost, "/leases/:group/release", s.release)
	worker(http.MethodPut, "/leases/:group/snapshot", s.putSnapshot)
	worker(http.MethodGet, "/leases/:group/snapshot", s.getSnapshot)
	worker(http.MethodPost, "/ranges/:id/progress", s.progress)
	worker(http.MethodPost, "/ranges/:id/finish", s.finish)
	worker(http.MethodPost, "/ranges/:id/fail", s.fail)
	worker(http.MethodGet, "/watermarks", s.watermarks)
	worker(http.MethodPost, "/groups/:name/watermark", s.reportWatermarks)

	s.mountDashboard(e)
	s.mountPprof(e)

	var h http.Handler = e
	if o.WrapFunc != nil {
		h = o.WrapFunc(e)
	}
	s.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		// A request that authenticates takes its connection out of the
		// listener's unauthenticated budget (LimitConnectionsBudget).
		ConnContext: withConn,
		ErrorLog:    slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Handler is the server's HTTP handler, for tests.
func (s *Server) Handler() http.Handler { return s.echo }

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops taking requests and waits for those in flight until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// readyz answers anyone, without a token: its reason says what the node
// waits for, with every URL in it cut to its scheme (publicReason).
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	if err := s.node.Reads.Ready(ctx); err != nil {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": publicReason(err.Error())})
	}
	// Trouble outside the node's own API (peer sync stuck) is told, not
	// made a 503: the node still serves its workers.
	if ts := s.node.Reads.Troubles(); len(ts) > 0 {
		return c.JSON(http.StatusOK, map[string]string{"status": "ready", "reason": publicReason(string(ts[0].Kind) + ": " + ts[0].Detail)})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// urlInText is a URL in a message: a scheme, "://", and what follows up
// to a space or a comma (URLs listed). A password may hold quotes and
// parentheses, so they do not end it; the punctuation of the sentence
// after it is given back (publicReason).
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s,]+`)

// publicReason is a readiness reason as a caller without a token may read
// it: each URL in it (an external NATS's, with any user and password in
// it) is cut to its scheme, "nats://…", so /readyz does not map the
// fleet's network for whoever reaches the port. The node's log names
// the URL with its credentials hidden (fleet.ShownURL; the join's
// still-waiting line, the WARNs of a stuck peer sync).
func publicReason(s string) string {
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		scheme, rest, _ := strings.Cut(u, "://")
		host := strings.TrimRight(rest, ":.;)\"'")
		return scheme + "://…" + rest[len(host):] // "(nats://…): 0 peers routed"
	})
}

// deadlines bounds how long a request body may take to arrive; streaming
// handlers lift the bound and set their own idle deadlines.
func (s *Server) deadlines(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		rc := http.NewResponseController(c.Response().Writer)
		_ = rc.SetReadDeadline(time.Now().Add(s.jsonRead))
		return next(c)
	}
}

func recoverPanics(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					log.Error("panic in handler", "path", c.Path(), "panic", p)
					err = errors.New("panic in handler")
				}
			}()
			return next(c)
		}
	}
}
