package web_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestWatchmanGauges: /metrics shows findings by kind and the backlog by
// lane, as the watchman sees them on the node's clock.
func TestWatchmanGauges(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	w := newWorld(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute})
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`leasehold_findings{kind="range_stale"}`, 0},
		{`leasehold_backlog_ranges{lane="tail"}`, 9},
		{`leasehold_backlog_ranges{lane="history"}`, 0},
	} {
		if got := w.metric(c.series); got != c.want {
			t.Errorf("%s = %v, want %v", c.series, got, c.want)
		}
	}
	clock.Advance(2 * time.Minute)
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`leasehold_findings{kind="range_stale"}`, 1},
		{`leasehold_findings{kind="lease_quiet"}`, 1},
		{`leasehold_findings{kind="range_failed"}`, 0},
		{`leasehold_backlog_oldest_age_seconds{lane="tail"}`, 120},
	} {
		if got := w.metric(c.series); got != c.want {
			t.Errorf("%s = %v, want %v", c.series, got, c.want)
		}
	}
}

// TestDashboardMetrics: the counters and gauges the shipped dashboard and
// alerts are built from follow what the node does: ranges finished and
// their headers, failures by outcome, takeovers, quarantines, window
// bytes in and out, ranges by status, groups by state, nodes by state and
// the build.
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	clock := nodetest.NewClock()
	w := newWorld(t, nodetest.Options{Clock: clock.Now, LeaseTTL: time.Minute, SnapshotMaxBytes: 1 << 20})
	fb := func(fence int64, extra string) string { return fmt.Sprintf(`{"fence":%d%s}`, fence, extra) }
	want := func(when string, series map[string]float64) {
		t.Helper()
		clock.Advance(3 * time.Second) // past the gauges' shared reading
		for s, v := range series {
			if got := w.metric(s); got != v {
				t.Errorf("%s: %s = %v, want %v", when, s, got, v)
			}
		}
	}
	want("at the start", map[string]float64{
		`leasehold_ranges{status="planned"}`: 9, `leasehold_ranges{status="leased"}`: 1,
		`leasehold_groups{owned="true",state="held"}`: 1, `leasehold_groups{owned="true",state="waiting"}`: 0,
		`leasehold_nodes{state="active"}`: 1, `leasehold_nodes{state="idle"}`: 1,
		`leasehold_range_failures_total{outcome="failed"}`: 0, `leasehold_snapshot_bytes_total{direction="in"}`: 0,
	})

	if a := w.j("POST", fmt.Sprintf("/ranges/%d/finish", w.rangeID), w.w1, fb(w.fence, `,"headers":100`)); a.status != 200 {
		t.Fatalf("finish: %d %s", a.status, a.body)
	}
	window := gz(t, bytes.Repeat([]byte("window "), 1000))
	if a := w.do("PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=101", w.gid, w.fence), w.w1, bytes.NewReader(window), "Content-Type", "application/gzip"); a.status != 201 {
		t.Fatalf("snapshot: %d %s", a.status, a.body)
	}
	if a := w.j("GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", w.gid, w.fence), w.w1, ""); a.status != 200 || len(a.body) != len(window) {
		t.Fatalf("download: %d, %d bytes", a.status, len(a.body))
	}
	r := num(w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(w.fence, "")).json(t), "range", "id")
	w.j("POST", fmt.Sprintf("/ranges/%d/fail", r), w.w1, fb(w.fence, `,"error":"timeout"`))
	r = num(w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(w.fence, "")).json(t), "range", "id")
	w.j("POST", fmt.Sprintf("/ranges/%d/fail", r), w.w1, fb(w.fence, `,"error":"malformed","retry":false`))
	w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), w.w1, fb(w.fence, ""))
	want("after a finish, a window, two failures", map[string]float64{
		`leasehold_ranges_finished_total`: 1, `leasehold_headers_indexed_total`: 100,
		`leasehold_range_failures_total{outcome="retried"}`: 1, `leasehold_range_failures_total{outcome="failed"}`: 1,
		`leasehold_snapshot_bytes_total{direction="in"}`: float64(len(window)), `leasehold_snapshot_bytes_total{direction="out"}`: float64(len(window)),
		`leasehold_ranges{status="done"}`: 1, `leasehold_ranges{status="failed"}`: 1, `leasehold_ranges{status="leased"}`: 1, `leasehold_ranges{status="planned"}`: 7,
		`leasehold_findings{kind="range_failed"}`: 1,
	})

	clock.Advance(2 * time.Minute)
	l := w.j("POST", "/leases", w.w2, "")
	if l.status != 200 {
		t.Fatalf("takeover: %d %s", l.status, l.body)
	}
	fence2 := num(l.json(t), "fence")
	w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), w.w2, fb(fence2, `,"window_error":"bad window"`))
	w.j("POST", "/nodes/1/pause", w.admin, "")
	want("after a takeover and a quarantine", map[string]float64{
		`leasehold_takeovers_total`: 1, `leasehold_leases_granted_total`: 2, `leasehold_quarantines_total`: 1,
		`leasehold_groups{owned="true",state="quarantined"}`: 1, `leasehold_groups{owned="true",state="held"}`: 0,
		`leasehold_backlog_ranges{lane="tail"}`: 8, `leasehold_ranges{status="leased"}`: 0,
		`leasehold_nodes{state="paused"}`: 1, `leasehold_nodes{state="idle"}`: 1, `leasehold_nodes{state="active"}`: 0,
	})
	clock.Advance(11 * time.Minute) // past the unseen bound, 10 lease TTLs
	want("with w2 unseen", map[string]float64{`leasehold_nodes{state="unseen"}`: 1, `leasehold_nodes{state="paused"}`: 1, `leasehold_nodes{state="idle"}`: 0})

	m := string(api{t, w.node.URL}.j("GET", "/metrics", "", "").body)
	if !strings.Contains(m, `leasehold_build_info{goversion="go`) {
		t.Errorf("no leasehold_build_info with the Go version in:\n%s", m)
	}
}

// TestMetricsLabelsBounded: 300 requests with made-up methods, on made-up
// paths and on real routes, add no series a client chose: /metrics grows
// by less than 20 kB and names no method it was sent.
func TestMetricsLabelsBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	scrape := func() string { return string(api{w.t, w.node.URL}.j("GET", "/metrics", "", "").body) }
	before := len(scrape())
	for i := range 300 {
		method := fmt.Sprintf("M%06d%s", i, strings.Repeat("X", 1000))
		path := fmt.Sprintf("/nope/%d", i)
		if i%2 == 1 {
			path = "/api/v1/groups/g"
		}
		req, err := http.NewRequest(method, w.node.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	after := scrape()
	if grown := len(after) - before; grown >= 20<<10 {
		t.Errorf("/metrics grew by %d bytes after 300 odd methods, want under 20 kB", grown)
	}
	if strings.Contains(after, "M000001") || strings.Contains(after, "/nope/") {
		t.Errorf("/metrics carries a label value a client chose")
	}
	if !strings.Contains(after, `method="other"`) {
		t.Errorf("odd methods are not counted as other")
	}
}
