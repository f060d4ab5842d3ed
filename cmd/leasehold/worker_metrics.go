package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// workerMetricsConnections is how many scrapes a worker answers at once:
// a Prometheus or two, and someone's curl; more are closed at once, so a
// client that opens many takes no file descriptors the news server's
// connections need.
const workerMetricsConnections = 16

// workerMetrics are a worker's Prometheus metrics (--metrics-listen), on a
// registry of their own: what it indexed and failed, what it holds and
// how far each held group lags its source's high mark, and, for the
// Usenet worker, the news server's connections and bytes, the overview
// lines skipped and the index writes refused by fence. Everything is
// counted as the work goes or read at scrape time from counters kept
// anyway: a scrape sends nothing to the node or the news server.
type workerMetrics struct {
	reg      *prometheus.Registry
	finished prometheus.Counter
	failed   prometheus.Counter
	headers  prometheus.Counter
	lag      *prometheus.Desc
	worker   atomic.Pointer[client.Worker]
	srv      *http.Server

	mu   sync.Mutex
	next map[string]int64 // first id not yet read, by group
	high map[string]int64 // the source's high mark as last seen, by group
}

func newWorkerMetrics() *workerMetrics {
	m := &workerMetrics{
		reg: prometheus.NewRegistry(),
		finished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_worker_ranges_finished_total", Help: "Ranges this worker read to their end.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_worker_ranges_failed_total", Help: "Ranges this worker failed (reported to the node as failures; not a lost lease or a stop).",
		}),
		headers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_worker_headers_read_total", Help: "Items (Usenet: headers) read into windows; its rate is the worker's speed.",
		}),
		lag: prometheus.NewDesc("leasehold_worker_lag_items",
			"Items between the source's high mark and the first id not yet read, for each group held (a group let go has no series).", []string{"group"}, nil),
		next: map[string]int64{}, high: map[string]int64{},
	}
	build := leasehold.Build()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_worker_build_info", Help: "1, labelled with the running build's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "goversion": build.GoVersion},
	})
	info.Set(1)
	m.reg.MustRegister(m.finished, m.failed, m.headers, info, m,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_worker_groups_held", Help: "Groups this worker holds now.",
		}, func() float64 {
			if w := m.worker.Load(); w != nil {
				return float64(w.Held())
			}
			return 0
		}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watch sets the worker whose held groups and ranges are counted, and
// wraps its IndexFunc to count them. high, when not nil, asks the
// source for a group's high mark as each range starts (one command a
// range); without it the high mark is the one the node last heard.
func (m *workerMetrics) watch(w *client.Worker, high func(ctx context.Context, group string) (int64, error)) {
	if m == nil {
		return
	}
	index := w.IndexFunc
	w.IndexFunc = func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
		name := g.Group.Name
		mark := max(g.Group.TailEnd, r.End)
		if g.Group.High != nil {
			mark = max(mark, *g.Group.High)
		}
		m.mu.Lock()
		m.high[name] = max(m.high[name], mark)
		m.next[name] = r.Next
		m.mu.Unlock()
		if high != nil {
			// After the node's mark is in: a source slow to answer
			// shows the group lagging by at least that much meanwhile.
			if h, err := high(ctx, name); err == nil {
				m.mu.Lock()
				m.high[name] = max(m.high[name], h)
				m.mu.Unlock()
			}
		}
		var counted int64
		err := index(ctx, g, r, win, func(next, headers int64) {
			m.mu.Lock()
			m.next[name] = next
			if headers > counted {
				m.headers.Add(float64(headers - counted))
				counted = headers
			}
			m.mu.Unlock()
			progress(next, headers)
		})
		switch {
		case err == nil:
			m.finished.Inc()
		case ctx.Err() == nil:
			m.failed.Inc()
		}
		return err
	}
	m.worker.Store(w)
}

// Describe is empty: the lag's series come and go with the groups held.
func (m *workerMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect reports the lag of each group held now and forgets every
// other group, so the series are bounded by the groups held.
func (m *workerMetrics) Collect(ch chan<- prometheus.Metric) {
	w := m.worker.Load()
	if w == nil {
		return
	}
	held := map[string]bool{}
	for _, g := range w.HeldGroups() {
		held[g] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, next := range m.next {
		if !held[g] {
			delete(m.next, g)
			delete(m.high, g)
			continue
		}
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, float64(max(m.high[g]-(next-1), 0)), g)
	}
}

// watchUsenet adds the Usenet worker's counts: the news server's
// connections and bytes, the overview lines skipped by reason, and the
// index writes refused for an older fence (index nil: no shared index).
func (m *workerMetrics) watchUsenet(src *nntp.Client, skips *binaries.Skips, index *binaries.Postgres) {
	if m == nil {
		return
	}
	counter := func(name, help string, f func(nntp.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(src.Stats())) })
	}
	m.reg.MustRegister(
		counter("leasehold_nntp_dials_total", "Connections to the news server opened and logged in.", func(s nntp.Stats) int64 { return s.Dials }),
		counter("leasehold_nntp_redials_total", "Connections to the news server opened to replace one that failed.", func(s nntp.Stats) int64 { return s.Redials }),
		counter("leasehold_nntp_connection_errors_total", "Connections to the news server that failed: dial, greeting or login, or broken under a command.", func(s nntp.Stats) int64 { return s.ConnErrors }),
		counter("leasehold_nntp_read_bytes_total", "Bytes read from the news server off the network (compressed, encrypted).", func(s nntp.Stats) int64 { return s.WireBytes }),
		counter("leasehold_nntp_text_bytes_total", "Bytes of the news server's answers once decrypted and inflated.", func(s nntp.Stats) int64 { return s.TextBytes }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_nntp_compression_ratio", Help: "Answers' bytes over the bytes read off the network since the worker started (1: uncompressed).",
		}, func() float64 {
			s := src.Stats()
			if s.WireBytes == 0 {
				return 1
			}
			return float64(s.TextBytes) / float64(s.WireBytes)
		}),
		&skipsCollector{skips: skips, desc: prometheus.NewDesc("leasehold_usenet_skipped_total",
			"Overview lines not used, by reason (docs/USENET.md \"Bad input\").", []string{"reason"}, nil)},
	)
	// Served at 0 without a shared index too: one board and one rule
	// set fit every Usenet worker.
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "leasehold_worker_index_writes_refused_total", Help: "Writes to the shared index (postgres://) refused because a newer lease holds the group (fence).",
	}, func() float64 {
		if index == nil {
			return 0
		}
		return float64(index.Refused())
	}))
}

// skipReasons are the reasons counted from 0, so a rate over them exists
// before the first skip.
var skipReasons = []string{nntp.SkipFields, nntp.SkipNumber, binaries.SkipNoMessageID, binaries.SkipSubjectTooLong}

// skipsCollector reports the worker's Skips as counters by reason.
type skipsCollector struct {
	skips *binaries.Skips
	desc  *prometheus.Desc
}

func (s *skipsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *skipsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := s.skips.Counts()
	for _, r := range skipReasons {
		if _, ok := counts[r]; !ok {
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, 0, r)
		}
	}
	for r, n := range counts {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(n), r)
	}
}

// serveWorkerMetrics listens on addr before anything else starts, so an
// address that cannot be bound is said at once (a usage error, exit 2),
// and serves GET /metrics until close. It returns nil metrics for "".
func serveWorkerMetrics(addr string, log *slog.Logger) (*workerMetrics, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError(fmt.Errorf("worker: --metrics-listen %s: %v", addr, err))
	}
	m := newWorkerMetrics()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := m.srv.Serve(&cappedListener{Listener: ln, slots: make(chan struct{}, workerMetricsConnections)}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("serving metrics stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return m, nil
}

// close stops serving; nil metrics serve nothing.
func (m *workerMetrics) close() {
	if m != nil {
		m.srv.Close()
	}
}

// cappedListener hands out at most cap(slots) connections at once and
// closes any more at once.
type cappedListener struct {
	net.Listener
	slots chan struct{}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &cappedConn{Conn: c, slots: l.slots}, nil
		default:
			c.Close()
		}
	}
}

type cappedConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
