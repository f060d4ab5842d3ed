package proccpu

import (
	"testing"
	"time"
)

// TestUsed: 50 ms of a busy loop show in Used as at least 25 ms (the
// loop may be scheduled off its core now and then).
func TestUsed(t *testing.T) {
	before := Used()
	x := 0
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	if got := Used() - before; got < 25*time.Millisecond || x == 0 {
		t.Fatalf("a 50 ms busy loop used %v of CPU", got)
	}
}
