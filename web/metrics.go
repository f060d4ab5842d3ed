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
// appliance, so its hooks (batch sizes, leases) can report into them.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	batch     prometheus.Histogram
	leases    prometheus.Counter
	takeovers prometheus.Counter

	// watch is the watchman's collector, counted again by each scrape;
	// the first server on these Metrics sets it.
	watch atomic.Pointer[watchCollector]
}

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
	}
	m.reg.MustRegister(m.requests, m.latency, m.batch, m.leases, m.takeovers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds collectors (the appliance's gauges) to the registry.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.reg.MustRegister(cs...) }

// ObserveBatch records the size of one committed batch.
func (m *Metrics) ObserveBatch(n int) { m.batch.Observe(float64(n)) }

// LeaseGranted counts a lease, and a takeover when it was one.
func (m *Metrics) LeaseGranted(takeover bool) {
	m.leases.Inc()
	if takeover {
		m.takeovers.Inc()
	}
}

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
		method := c.Request().Method
		m.requests.WithLabelValues(method, route, strconv.Itoa(c.Response().Status)).Inc()
		m.latency.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
		return nil
	}
}

// recentBacklog is how old a backlog count the gauges and the dashboard
// may show: polls within it share one count.
const recentBacklog = 2 * time.Second

// watchCollector reports the watchman's findings by kind and the backlog
// by lane as gauges, counted at scrape time (refresh, under the scrape's
// request context, which Collect lacks): the finding counts are index
// seeks (store/findings.go) and the backlog count is shared for
// recentBacklog, so a scrape every few seconds stays cheap and there is
// no refresh loop to own.
type watchCollector struct {
	watchman *appliance.Watchman
	log      *slog.Logger

	// Scrapes within recentBacklog of the last count share it (on the
	// wall clock and on the node's, which tests move).
	mu          sync.Mutex
	at, nodeAt  time.Time // wall and node time of the count
	counts      map[string]int64
	lastBacklog leasehold.Backlog
	failed      bool // the last count failed: the gauges sit this scrape out

	findings *prometheus.Desc
	backlog  *prometheus.Desc
	oldest   *prometheus.Desc
}

func newWatchCollector(w *appliance.Watchman, log *slog.Logger) *watchCollector {
	return &watchCollector{
		watchman: w, log: log,
		findings: prometheus.NewDesc("leasehold_findings", "What the watchman reports as stuck now, by kind.", []string{"kind"}, nil),
		backlog:  prometheus.NewDesc("leasehold_backlog_ranges", "Planned ranges waiting for a worker, by lane (tail, history); backlog, not a stall.", []string{"lane"}, nil),
		oldest:   prometheus.NewDesc("leasehold_backlog_oldest_age_seconds", "Age of the oldest planned range waiting, by lane.", []string{"lane"}, nil),
	}
}

func (w *watchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- w.findings
	ch <- w.backlog
	ch <- w.oldest
}

// refresh counts the findings and the backlog again under ctx, unless the
// last count is recent. A failed count is logged and leaves the gauges
// out of the scrape: it must not fail the scrape of the other metrics.
func (w *watchCollector) refresh(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.counts != nil && !w.failed && time.Since(w.at) < recentBacklog && w.watchman.Now().Sub(w.nodeAt) < recentBacklog {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	counts, b, err := w.watchman.Counts(ctx, recentBacklog)
	if err != nil {
		w.failed = true
		w.log.Warn("metrics: watchman counts", "err", err)
		return
	}
	w.counts, w.lastBacklog, w.at, w.nodeAt, w.failed = counts, b, time.Now(), w.watchman.Now(), false
}

func (w *watchCollector) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	if w.counts == nil || w.failed {
		w.mu.Unlock()
		return
	}
	counts, b := w.counts, w.lastBacklog
	w.mu.Unlock()
	for _, k := range appliance.FindingKinds {
		ch <- prometheus.MustNewConstMetric(w.findings, prometheus.GaugeValue, float64(counts[k]), k)
	}
	ch <- prometheus.MustNewConstMetric(w.backlog, prometheus.GaugeValue, float64(b.Tail), "tail")
	ch <- prometheus.MustNewConstMetric(w.backlog, prometheus.GaugeValue, float64(b.History), "history")
	ch <- prometheus.MustNewConstMetric(w.oldest, prometheus.GaugeValue, b.TailOldestS, "tail")
	ch <- prometheus.MustNewConstMetric(w.oldest, prometheus.GaugeValue, b.HistOldestS, "history")
}
