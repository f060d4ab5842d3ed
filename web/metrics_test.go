package web_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestWatchmanGauges: /metrics shows findings by kind and the backlog by
// lane, as the watchman sees them on the node's clock.
func TestWatchmanGauges(t *testing.T) {
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
