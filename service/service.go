// Package service is the one way a node's long-lived parts start and
// stop, after River's start/stop services: Start derives the service's
// context from its owner's, Stop signals a soft stop (no new work is
// taken), then cancels, then waits for every goroutine the service
// started. A goroutine's error ends the service and is its Err. A
// service stopped may be started again.
package service

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is Begin's answer for a service started already.
var ErrStarted = errors.New("service: started already")

// Base is embedded by a service. Its Start calls Begin with the
// service's goroutines; its Stop, if it has one, does what must come
// before the cancel (unsubscribing, say) and calls Base.Stop. The zero
// Base is ready; it is not copied after first use.
type Base struct {
	mu      sync.Mutex
	started bool // Begin was, and Stop has not finished since
	stopped bool // Stop was called: the soft stop; Go takes nothing more
	ended   bool // the context ended: Go takes nothing more, done follows
	cancel  context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup
	done    chan struct{} // closed once ended and every goroutine returned
	err     error         // the first error a goroutine returned before the end
}

// doneLocked is the done channel, made on first use. b.mu is held.
func (b *Base) doneLocked() chan struct{} {
	if b.done == nil {
		b.done = make(chan struct{})
	}
	return b.done
}

// Begin starts the service under a context derived from ctx and runs
// each of runs in its own goroutine (see Go). Errors: ErrStarted, until
// Stop has returned.
func (b *Base) Begin(ctx context.Context, runs ...func(context.Context) error) error {
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return ErrStarted
	}
	b.started, b.stopped, b.ended, b.err = true, false, false, nil
	ctx, b.cancel = context.WithCancel(ctx)
	b.ctx = ctx
	done := make(chan struct{})
	b.done = done
	b.mu.Unlock()
	for _, run := range runs {
		b.Go(run)
	}
	go func() {
		<-ctx.Done()
		b.mu.Lock()
		b.ended = true // every Add is before this, under the lock
		b.mu.Unlock()
		b.wg.Wait()
		close(done)
	}()
	return nil
}

// Go runs fn in a goroutine of the service, with the service's context,
// and reports whether it did: not before Begin, nor after Stop or the
// context's end. An error fn returns before the end ends the service.
func (b *Base) Go(fn func(context.Context) error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started || b.stopped || b.ended {
		return false
	}
	ctx := b.ctx
	b.wg.Go(func() {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
		b.cancel()
	})
	return true
}

// Stop signals the soft stop (Stopped is true, Go takes no more work),
// cancels the service's context and waits for its goroutines. It is
// safe before Start, and twice.
func (b *Base) Stop() {
	b.mu.Lock()
	b.stopped = true
	cancel, done := b.cancel, b.doneLocked()
	if !b.started {
		select {
		case <-done:
		default:
			close(done) // never started: nothing to wait for
		}
	}
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-done
	b.mu.Lock()
	if b.done == done { // not started again meanwhile
		b.started, b.cancel = false, nil
	}
	b.mu.Unlock()
}

// Stopped reports whether Stop was called since the service started.
func (b *Base) Stopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// Done is closed once the service has ended (Stop, its owner's context,
// or a goroutine's error) and all its goroutines have returned.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.doneLocked()
}

// Err is the error that ended the service, or nil; read it after Done.
func (b *Base) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
