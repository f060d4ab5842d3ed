package syncbuf_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestConcurrentWrites: lines written by many goroutines while another
// reads all arrive whole (go test -race sees no race).
func TestConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&b, "w%d line %d\n", i, j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got, want := strings.Count(b.String(), "\n"), 800; got != want {
		t.Errorf("got %d lines, want %d", got, want)
	}
	if got, want := strings.Count(b.String(), "w7 line 99\n"), 1; got != want {
		t.Errorf("got %d of the last line of w7, want %d", got, want)
	}
}
