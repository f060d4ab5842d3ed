package poll

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestWait: a condition that comes true is waited for; one that never does
// gives up after the time given with its last error.
func TestWait(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		var n atomic.Int64
		if err := Wait(5*time.Second, Every, func() error {
			if n.Add(1) < 3 {
				return errors.New("not three")
			}
			return nil
		}); err != nil || n.Load() != 3 {
			t.Fatalf("got %v after %d asks, want nil after 3", err, n.Load())
		}
	})
	t.Run("TimeUp", func(t *testing.T) {
		start := time.Now()
		err := Wait(50*time.Millisecond, Every, func() error { return errors.New("never") })
		if err == nil || err.Error() != "never" {
			t.Fatalf("got %v, want the condition's last error", err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Fatalf("gave up after %s, before the 50ms given", d)
		}
	})
}
