// Package poll is the tests' one way to wait for a condition: ask it
// again every few milliseconds until it holds or the time is up, never
// sleep a guessed while and then assert (a loaded machine makes any
// guess wrong). Only tests and harnesses import it.
package poll

import (
	"testing"
	"time"
)

// Every is how often a condition is asked again.
const Every = 10 * time.Millisecond

// Eventually asks cond until it is true, failing the test (t.Fatalf,
// naming what) if it is not within the time given.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, within, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Until asks cond until it returns nil, failing the test if it does not
// within the time given, with cond's last error: why it was not yet.
func Until(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Wait(within, Every, cond); err != nil {
		t.Fatalf("waited %s for %s: %v", within, what, err)
	}
}

// Wait asks cond every so often until it returns nil and returns nil, or
// returns cond's last error once the time given is up; for a caller that
// is no test (a harness), asks something costly (a browser) less often, or
// decides itself what a timeout means.
func Wait(within, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(every)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
