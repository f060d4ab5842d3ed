package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
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
