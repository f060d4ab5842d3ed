package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with jitter: the n-th wait (from
// 0) is drawn from [d/2, d] with d = min(Max, Min·2ⁿ), and never below Min.
// Jitter keeps many workers that lost the node at once from coming back in
// step.
type Backoff struct {
	// Min is the first wait and the floor of every wait.
	Min time.Duration
	// Max caps the wait.
	Max time.Duration
	// Attempts is how many tries a retried call gets, the first included.
	// Polling loops ignore it.
	Attempts int
}

// DefaultRetry is the client's retry: five tries over about six seconds,
// enough to ride out a node restart without hiding a dead one for long.
var DefaultRetry = Backoff{Min: 200 * time.Millisecond, Max: 3 * time.Second, Attempts: 5}

// Delay is the wait before try n+1 (n counts from 0).
func (b Backoff) Delay(n int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	d = d/2 + rand.N(d/2+1)
	return max(d, lo)
}

// Sleep waits Delay(n), or at least floor when that is longer (a node's
// Retry-After), capped at Max. It returns early with the context's cause.
func (b Backoff) Sleep(ctx context.Context, n int, floor time.Duration) error {
	d := b.Delay(n)
	if floor > d {
		d = min(floor, max(b.Max, b.Min))
	}
	return sleep(ctx, d)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
