package service

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestStopWaits checks Stop's order: the soft stop first (Go takes no
// more work), then the cancel, then the wait for every goroutine, even
// one that takes its time to wind down.
func TestStopWaits(t *testing.T) {
	t.Parallel()
	var b Base
	var ended atomic.Int32
	slow := func(ctx context.Context) error {
		<-ctx.Done()
		// Deliberately slow to wind down, no step to wait for: a Stop
		// that did not wait would return before it ends.
		time.Sleep(50 * time.Millisecond)
		ended.Add(1)
		return nil
	}
	if err := b.Begin(context.Background(), slow, slow); err != nil {
		t.Fatal(err)
	}
	if !b.Go(slow) {
		t.Fatal("Go refused work before Stop")
	}
	b.Stop()
	if got := ended.Load(); got != 3 {
		t.Fatalf("Stop returned with %d of 3 goroutines ended", got)
	}
	if !b.Stopped() || b.Go(slow) {
		t.Fatal("Go took work after Stop")
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	b.Stop() // twice: safe
}

// TestDerivesContext checks the service's context is its owner's: the
// owner's values reach it and the owner's cancel ends the service.
func TestDerivesContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "owner"))
	var b Base
	got := make(chan any, 1)
	b.Begin(ctx, func(ctx context.Context) error {
		got <- ctx.Value(key{})
		<-ctx.Done()
		return ctx.Err() // after the end: not the service's error
	})
	if v := <-got; v != "owner" {
		t.Fatalf("the service's context holds %v, want the owner's value", v)
	}
	cancel()
	select {
	case <-b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the owner's cancel did not end the service")
	}
	if err := b.Err(); err != nil {
		t.Fatalf("Err = %v after the owner's cancel, want nil", err)
	}
	b.Stop()
}

// TestErrorEnds checks a goroutine's error ends the service, stops its
// other goroutines and is its Err.
func TestErrorEnds(t *testing.T) {
	t.Parallel()
	var b Base
	boom := errors.New("boom")
	b.Begin(context.Background(),
		func(ctx context.Context) error { <-ctx.Done(); return nil },
		func(context.Context) error { return boom })
	select {
	case <-b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a goroutine's error did not end the service")
	}
	if err := b.Err(); !errors.Is(err, boom) {
		t.Fatalf("Err = %v, want %v", err, boom)
	}
	if b.Go(func(context.Context) error { return nil }) {
		t.Fatal("Go took work after the service ended")
	}
	b.Stop()
}

// TestStopBeforeStart checks Stop without Start returns, a second Start
// is refused, and a service stopped starts again.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	var b Base
	b.Stop()
	var runs atomic.Int32
	run := func(ctx context.Context) error { runs.Add(1); <-ctx.Done(); return nil }
	if err := b.Begin(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if err := b.Begin(context.Background(), run); !errors.Is(err, ErrStarted) {
		t.Fatalf("a second Start: %v, want ErrStarted", err)
	}
	b.Stop()
	if err := b.Begin(context.Background(), run); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	if b.Stopped() {
		t.Fatal("Stopped after a new Start")
	}
	select {
	case <-b.Done():
		t.Fatal("Done is closed once started again")
	default:
	}
	b.Stop()
	if got := runs.Load(); got != 2 {
		t.Fatalf("ran %d times, want 2", got)
	}
}
