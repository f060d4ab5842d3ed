package nodetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// Signal is a test's wait for a step a node tells through a hook (such
// as Options.UploadStoring), instead of a sleep or a poll for the step's
// traces: Fire is the hook, Wait waits for its next call.
type Signal struct{ fired chan int64 }

// NewSignal returns a signal no one has fired.
func NewSignal() *Signal { return &Signal{fired: make(chan int64, 64)} }

// Fire tells the step, with what it concerns (a group's id, say). It
// never blocks: past 64 calls no one waited for, the rest are dropped.
func (s *Signal) Fire(id int64) {
	select {
	case s.fired <- id:
	default:
	}
}

// Drain forgets the calls fired so far, so that Wait waits for a next.
func (s *Signal) Drain() {
	for {
		select {
		case <-s.fired:
		default:
			return
		}
	}
}

// Wait returns what the next call told, failing the test when none comes
// within ten seconds.
func (s *Signal) Wait(t testing.TB, what string) int64 {
	t.Helper()
	select {
	case id := <-s.fired:
		return id
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not told within 10s", what)
		return 0
	}
}

// RangesHanded is a web.Options.WrapFunc (Options.Web) that fires s with
// a group's id each time the node hands a worker one of its ranges (a
// POST /api/v1/leases/{group}/next answered with a range): a test lands
// a step (a stop, a kill) while a worker process reads a range by
// waiting for it, not by sleeping a guessed while.
func RangesHanded(s *Signal) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var group int64
			if _, err := fmt.Sscanf(r.URL.Path, "/api/v1/leases/%d/next", &group); err != nil || r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			tw := &teeWriter{ResponseWriter: w}
			next.ServeHTTP(tw, r)
			var a leasehold.NextAnswer
			if json.Unmarshal(tw.body.Bytes(), &a) == nil && a.Range != nil {
				s.Fire(group)
			}
		})
	}
}

// teeWriter keeps a copy of the answer it writes.
type teeWriter struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}
