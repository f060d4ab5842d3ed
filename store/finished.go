package store

import (
	"sync"
	"time"
)

// finishedMinutes counts the ranges a node running alone finished, and
// their headers, by minute for the last hour: the dashboard's throughput
// chart reads it there, as a fleet node reads its outbox, which a node
// alone does not write. It is memory only: a restart starts the chart
// anew.
type finishedMinutes struct {
	mu      sync.Mutex
	minutes [finishedKept]Minute // by minute, at index (unix minute % finishedKept)
}

// finishedKept is how many minutes are kept: the chart's hour.
const finishedKept = 60

// add counts one range finished at t with headers.
func (f *finishedMinutes) add(t time.Time, headers int64) {
	at := t.Truncate(time.Minute)
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &f.minutes[at.Unix()/60%finishedKept]
	if !m.At.Equal(at) {
		*m = Minute{At: at}
	}
	m.Ranges++
	m.Headers += headers
}

// fill adds the minutes it holds to out, out[0] being the minute at start.
func (f *finishedMinutes) fill(out []Minute, start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.minutes {
		if m.At.IsZero() || m.At.Before(start) {
			continue
		}
		if i := int(m.At.Sub(start) / time.Minute); i < len(out) {
			out[i].Ranges += m.Ranges
			out[i].Headers += m.Headers
		}
	}
}

// headersOf is the headers count of a range_finished event's body.
func headersOf(body map[string]any) int64 {
	switch h := body["headers"].(type) {
	case int64:
		return h
	case int:
		return int64(h)
	case float64:
		return int64(h)
	}
	return 0
}
