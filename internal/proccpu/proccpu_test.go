package proccpu

import (
	"testing"
	"time"
)

// TestUsed: a busy loop in user space shows in Used. The loop runs until
// Used has grown by 200 ms, for at most 10 s of wall time (a loaded
// machine may give it little of a core, never none for that long).
func TestUsed(t *testing.T) {
	before := Used()
	x := 0
	for deadline := time.Now().Add(10 * time.Second); Used()-before < 200*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("a 10 s busy loop used %v of CPU", Used()-before)
		}
		for i := range 10_000_000 {
			x += i
		}
	}
	if x == 0 {
		t.Fatal("the loop did not run")
	}
}
