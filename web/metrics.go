package web

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// Metrics are the node's Prometheus metrics. Make them before the
// appliance, so its Recorder (leases, finishes, failures, quarantines)
// and the store's batch sizes report into them; the first server on them
// logs the ranges failed at the attempt limit that they count. Every gauge is read
// without counting the catalog (tallies, seeks), so a scrape costs the
// same at a million groups as at ten.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	batch     prometheus.Histogram
	leases    prometheus.Counter
	takeovers prometheus.Counter

	finished    prometheus.Counter
	headers     prometheus.Counter
	failures    *prometheus.CounterVec // by outcome: retried, failed
	quarantines prometheus.Counter
	snapshot    *prometheus.CounterVec // bytes by direction: in, out
	refused     *prometheus.CounterVec // holder calls by error code
	build       *prometheus.GaugeVec
	connRefused *prometheus.CounterVec // connections over a cap, by reason
	connOpen    prometheus.Gauge
	authFailed  *prometheus.CounterVec // refused tokens and sign-ins, by kind

	// watch is the watchman's collector, counted again by each scrape;
	// the first server on these Metrics sets it.
	watch atomic.Pointer[watchCollector]
	// operator is the server whose operator's log (its log and timeline)
	// tells of ranges failed at the attempt limit: the appliance is made
	// with these Metrics as its Recorder before any server exists, so the
	// first server on them sets it, as it sets watch.
	operator atomic.Pointer[Server]
}

// refusedCodes are the answers that refuse a holder call (a lease lost,
// a range not in the caller's hands, a group or range gone), counted by
// leasehold_holder_calls_refused_total.
var refusedCodes = []leasehold.ErrorKind{leasehold.KindLeaseLost, leasehold.KindConflict, leasehold.KindNotFound}

// NewMetrics registers the node's metrics on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_http_requests_total", Help: "HTTP requests answered, by route and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasehold_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"method", "route"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_commit_batch_writes", Help: "Writes sharing one committed transaction (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_leases_granted_total", Help: "Group leases granted.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_takeovers_total", Help: "Group leases taken over from a quiet holder.",
		}),
		finished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_ranges_finished_total", Help: "Ranges finished by their holders.",
		}),
		headers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_headers_indexed_total", Help: "Headers indexed, as holders report them when they finish a range.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_range_failures_total", Help: "Ranges failed (rule 10), by outcome: retried (a worker's failure, planned again) or failed (for good: by a worker, or at the attempt limit).",
		}, []string{"outcome"}),
		quarantines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_quarantines_total", Help: "Groups quarantined because a worker could not load their window (rule 10).",
		}),
		snapshot: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_snapshot_bytes_total", Help: "Window snapshot bytes received (in: uploads) and sent (out: downloads) over HTTP.",
		}, []string{"direction"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_holder_calls_refused_total", Help: "Holder calls refused, by error code (lease_lost: the caller no longer holds the group at its fence).",
		}, []string{"code"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leasehold_build_info", Help: "1, labelled with the running build's version, VCS revision and Go version.",
		}, []string{"version", "revision", "goversion"}),
	}
	// Every labelled counter starts at zero, so a rate over it exists
	// before the first event (alerts and panels see 0, not nothing).
	m.failures.WithLabelValues("retried")
	m.failures.WithLabelValues("failed")
	m.snapshot.WithLabelValues("in")
	m.snapshot.WithLabelValues("out")
	for _, k := range refusedCodes {
		m.refused.WithLabelValues(string(k))
	}
	m.connRefused, m.connOpen = newConnectionMetrics()
	m.authFailed = newAuthFailureMetric()
	m.SetBuild(leasehold.Build())
	m.reg.MustRegister(m.requests, m.latency, m.batch, m.leases, m.takeovers,
		m.finished, m.headers, m.failures, m.quarantines, m.snapshot, m.refused, m.build,
		m.connRefused, m.connOpen, m.authFailed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetBuild labels leasehold_build_info with the running build (the one
// `leasehold version` prints).
func (m *Metrics) SetBuild(b leasehold.BuildInfo) {
	m.build.Reset()
	m.build.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
}

// Register adds collectors (the appliance's gauges) to the registry.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.reg.MustRegister(cs...) }

// ObserveBatch records the size of one committed batch.
func (m *Metrics) ObserveBatch(n int) { m.batch.Observe(float64(n)) }

// LeaseGranted counts a lease, and a takeover when it was one
// (appliance.Recorder).
func (m *Metrics) LeaseGranted(takeover bool) {
	m.leases.Inc()
	if takeover {
		m.takeovers.Inc()
	}
}

// RangeFinished counts a finished range and its headers
// (appliance.Recorder).
func (m *Metrics) RangeFinished(headers int64) {
	m.finished.Inc()
	m.headers.Add(float64(headers))
}

// RangeFailed counts a range a worker failed (appliance.Recorder).
func (m *Metrics) RangeFailed(failed bool) {
	if failed {
		m.failures.WithLabelValues("failed").Inc()
	} else {
		m.failures.WithLabelValues("retried").Inc()
	}
}

// RangesFailedAtLimit counts ranges a write failed because they had used
// up their attempts as failed, and has the operator's log tell of each
// (appliance.Recorder). The worker's own fail is counted by RangeFailed,
// never here, so no failure is counted twice.
func (m *Metrics) RangesFailedAtLimit(ctx context.Context, failed []leasehold.Range) {
	m.failures.WithLabelValues("failed").Add(float64(len(failed)))
	if s := m.operator.Load(); s != nil {
		s.logRangesAtLimit(ctx, failed)
	}
}

// GroupQuarantined counts a quarantine (appliance.Recorder).
func (m *Metrics) GroupQuarantined() { m.quarantines.Inc() }

// snapshotBytes counts window bytes received ("in") or sent ("out").
func (m *Metrics) snapshotBytes(direction string, n int64) {
	if n > 0 {
		m.snapshot.WithLabelValues(direction).Add(float64(n))
	}
}

// holderCallRefused counts a refused holder call by its error code.
func (m *Metrics) holderCallRefused(code leasehold.ErrorKind) {
	m.refused.WithLabelValues(string(code)).Inc()
}

var _ appliance.Recorder = (*Metrics)(nil)

// Handler serves a scrape of these metrics, as GET /metrics does: for a
// program that serves them elsewhere, and for tests of parts (the
// connection cap) that report into them without a server.
func (m *Metrics) Handler() http.Handler { return m.handler() }

// handler serves a scrape: the watchman's counts are refreshed under the
// scrape's own request, then the registry gathered.
func (m *Metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w := m.watch.Load(); w != nil {
			w.refresh(r.Context())
		}
		h.ServeHTTP(rw, r)
	})
}

// middleware counts and times every request by its route pattern, and
// answers errors here so the status it records is the one sent.
func (m *Metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		method := methodLabel(c.Request().Method)
		m.requests.WithLabelValues(method, route, strconv.Itoa(c.Response().Status)).Inc()
		m.latency.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
		return nil
	}
}

// methodLabel is the method as a label value: one of HTTP's methods, or
// "other". Go takes any token as a method, and a label a client chooses
// freely grows the series without bound (and every scrape with them).
// Routes need no such guard: c.Path() is a registered pattern or "".
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// recentBacklog is how old a backlog count the gauges and the dashboard
// may show: polls within it share one count.
const recentBacklog = 2 * time.Second

// watchCollector reports the watchman's findings by kind, the backlog by
// lane, ranges by status, groups by state and nodes by state as gauges,
// read at scrape time (refresh, under the scrape's request context,
// which Collect lacks). None counts the catalog: ranges and groups are
// tallies kept as the catalog is written, the findings count what is
// held or registered past a bound, the nodes table holds the workers.
// Scrapes within recentBacklog share one reading, and there is no
// refresh loop to own.
type watchCollector struct {
	watchman Watchman
	log      *slog.Logger

	// Scrapes within recentBacklog of the last reading share it (on the
	// wall clock and on the node's, which tests move).
	mu     sync.Mutex
	at     time.Time // wall and node time of the reading
	nodeAt time.Time
	last   *appliance.Gauges
	failed bool // the last reading failed: the gauges sit this scrape out

	findings *prometheus.Desc
	backlog  *prometheus.Desc
	oldest   *prometheus.Desc
	ranges   *prometheus.Desc
	groups   *prometheus.Desc
	nodes    *prometheus.Desc
}

func newWatchCollector(w Watchman, log *slog.Logger) *watchCollector {
	return &watchCollector{
		watchman: w, log: log,
		findings: prometheus.NewDesc("leasehold_findings", "What the watchman reports as stuck now, by kind.", []string{"kind"}, nil),
		backlog:  prometheus.NewDesc("leasehold_backlog_ranges", "Planned ranges waiting for a worker, by lane (tail, history); backlog, not a stall.", []string{"lane"}, nil),
		oldest:   prometheus.NewDesc("leasehold_backlog_oldest_age_seconds", "Age of the oldest planned range waiting, by lane.", []string{"lane"}, nil),
		ranges:   prometheus.NewDesc("leasehold_ranges", "Ranges in this node's catalog by status (planned, leased, done, failed).", []string{"status"}, nil),
		groups: prometheus.NewDesc("leasehold_groups", "Groups in this node's catalog by state (quarantined, held, inactive, waiting, idle) and whether this node owns them "+
			"(owned=\"false\": a peer's, or its own while unclaimed); sum the owned ones over a fleet.", []string{"state", "owned"}, nil),
		nodes: prometheus.NewDesc("leasehold_nodes", "Worker nodes registered here by state (paused, unseen, active, idle).", []string{"state"}, nil),
	}
}

func (w *watchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{w.findings, w.backlog, w.oldest, w.ranges, w.groups, w.nodes} {
		ch <- d
	}
}

// refresh reads the gauges again under ctx, unless the last reading is
// recent. A failed reading is logged and leaves the gauges out of the
// scrape: it must not fail the scrape of the other metrics.
func (w *watchCollector) refresh(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last != nil && !w.failed && time.Since(w.at) < recentBacklog && w.watchman.Now().Sub(w.nodeAt) < recentBacklog {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := w.watchman.Gauges(ctx, recentBacklog)
	if err != nil {
		w.failed = true
		w.log.Warn("metrics: reading the gauges", "err", err)
		return
	}
	w.last, w.at, w.nodeAt, w.failed = &g, time.Now(), w.watchman.Now(), false
}

func (w *watchCollector) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	if w.last == nil || w.failed {
		w.mu.Unlock()
		return
	}
	g := *w.last
	w.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, k := range appliance.FindingKinds {
		gauge(w.findings, float64(g.Findings[k]), string(k))
	}
	b := g.Backlog
	gauge(w.backlog, float64(b.Tail), "tail")
	gauge(w.backlog, float64(b.History), "history")
	gauge(w.oldest, b.TailOldestS, "tail")
	gauge(w.oldest, b.HistOldestS, "history")
	for _, s := range leasehold.RangeStatuses {
		gauge(w.ranges, float64(g.Tallies.Ranges[s]), string(s))
	}
	for _, s := range leasehold.GroupStates {
		gauge(w.groups, float64(g.Tallies.Owned[s]), s, "true")
		gauge(w.groups, float64(g.Tallies.Unowned[s]), s, "false")
	}
	for _, s := range leasehold.NodeStates {
		gauge(w.nodes, float64(g.Nodes[s]), s)
	}
}
