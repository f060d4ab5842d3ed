package nodetest

import (
	"testing"
	"time"
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
