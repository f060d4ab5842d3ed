package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Service is the one shape of a long-lived part: Start derives its
// context from ctx and starts its goroutines; Stop stops it and waits
// for them; Done is closed once it has ended, and Err says why (nil for
// a Stop or its owner's context). Base gives all four but Start.
type Service interface {
	Start(ctx context.Context) error
	Stop()
	Done() <-chan struct{}
	Err() error
}

// Part is a service in a List, with the name its errors are told by.
type Part struct {
	Name    string
	Service Service
}

// ErrEndedByItself is the error of a part that ended by itself with no
// error of its own: the list ends all the same, since nothing restarts it.
var ErrEndedByItself = errors.New("ended by itself")

// List is a service made of services, after River's startstop: Start
// starts its parts in order, and Stop stops them in reverse, so a part
// starts after, and stops before, the parts it uses. A part that ends by
// itself ends the list (Done, and Err is the part's error, named), but
// the other parts are not cancelled with it: they run on until the
// owner's Stop stops them, in order.
type List struct {
	Base
	parts []Part

	mu       sync.Mutex  // orders Start and Stop
	started  int         // parts[:started] are started
	stopping atomic.Bool // Stop began: a part's end is no error
}

// NewList returns a list of parts, started in their order.
func NewList(parts ...Part) *List { return &List{parts: parts} }

// Start starts each part with ctx, in order. A part that refuses to
// start stops those started before it, in reverse, and its error is
// Start's, named. Errors: ErrStarted, a part's.
func (l *List) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.Begin(ctx); err != nil {
		return err
	}
	l.stopping.Store(false)
	for _, p := range l.parts {
		if err := p.Service.Start(ctx); err != nil {
			l.stopLocked()
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		l.started++
		l.Go(func(lctx context.Context) error { return l.watch(ctx, lctx, p) })
	}
	return nil
}

// watch waits for p to end and returns its error unless the list or its
// owner ended first. ctx is the owner's: its end is checked first, since
// it reaches a part before it reaches the list's own context.
func (l *List) watch(ctx, lctx context.Context, p Part) error {
	select {
	case <-lctx.Done():
		return nil
	case <-p.Service.Done():
	}
	// Not l.mu: Stop holds it while it waits for this goroutine.
	if l.stopping.Load() || ctx.Err() != nil {
		return nil
	}
	err := p.Service.Err()
	if err == nil {
		err = ErrEndedByItself
	}
	return fmt.Errorf("%s: %w", p.Name, err)
}

// Stop stops the started parts in reverse order, each waited for before
// the next, then the list. It is safe before Start, and twice.
func (l *List) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
}

// stopLocked is Stop with l.mu held.
func (l *List) stopLocked() {
	l.stopping.Store(true)
	for i := l.started - 1; i >= 0; i-- {
		l.parts[i].Service.Stop()
	}
	l.started = 0
	l.Base.Stop()
}
