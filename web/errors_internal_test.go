package web

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestTimedOut: only the request's own end is the client's doing (400);
// a step inside the node that timed out is unavailable (503, try again),
// and an error with a kind of its own keeps it.
func TestTimedOut(t *testing.T) {
	inside := fmt.Errorf("removing a member: %w", context.DeadlineExceeded)
	for _, c := range []struct {
		name  string
		err   error
		ended bool
		want  leasehold.ErrorKind
	}{
		{"the client gave up", inside, true, leasehold.KindInvalid},
		{"the client went away", context.Canceled, true, leasehold.KindInvalid},
		{"a step inside timed out", inside, false, leasehold.KindUnavailable},
		{"a kind of its own kept", leasehold.Wrap(leasehold.KindConflict, inside, "held"), false, leasehold.KindConflict},
		{"no context's end", fmt.Errorf("plain"), true, leasehold.KindInternal},
	} {
		if got := leasehold.KindOf(timedOut(c.err, c.ended)); got != c.want {
			t.Errorf("%s: kind %v, want %v", c.name, got, c.want)
		}
	}
}
