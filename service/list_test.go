package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorded is a service that notes its start and stop in a shared log,
// and can be made to refuse its start or to end by itself.
type recorded struct {
	Base
	name   string
	log    *[]string
	mu     *sync.Mutex
	refuse error
	die    chan error
}

func (r *recorded) note(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, what+" "+r.name)
}

func (r *recorded) Start(ctx context.Context) error {
	if r.refuse != nil {
		return r.refuse
	}
	r.note("start")
	return r.Begin(ctx, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case err := <-r.die:
			return err
		}
	})
}

func (r *recorded) Stop() {
	r.note("stop")
	r.Base.Stop()
}

func newRecorded(names ...string) ([]*recorded, []Part, func() []string) {
	var mu sync.Mutex
	var log []string
	var rs []*recorded
	var parts []Part
	for _, n := range names {
		r := &recorded{name: n, log: &log, mu: &mu, die: make(chan error, 1)}
		rs = append(rs, r)
		parts = append(parts, Part{Name: n, Service: r})
	}
	return rs, parts, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(log)
	}
}

// TestListOrder: parts start in order and stop in reverse, each stopped
// before the next is.
func TestListOrder(t *testing.T) {
	t.Parallel()
	_, parts, log := newRecorded("catalog", "fleet", "web")
	l := NewList(parts...)
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	want := []string{"start catalog", "start fleet", "start web", "stop web", "stop fleet", "stop catalog"}
	if got := log(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a list stopped by its owner ended with %v", err)
	}
	l.Stop() // twice: safe
}

// TestListStartRefused: a part that refuses to start stops those started
// before it, in reverse, and its error is Start's, named.
func TestListStartRefused(t *testing.T) {
	t.Parallel()
	rs, parts, log := newRecorded("catalog", "fleet", "web")
	refused := errors.New("address in use")
	rs[2].refuse = refused
	err := NewList(parts...).Start(context.Background())
	if !errors.Is(err, refused) || err.Error() != "web: address in use" {
		t.Fatalf("Start: %v, want web's refusal", err)
	}
	want := []string{"start catalog", "start fleet", "stop fleet", "stop catalog"}
	if got := log(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestListPartDies: a part that ends by itself ends the list with its
// error, named, and leaves the others running until the owner's Stop,
// which still stops them in reverse.
func TestListPartDies(t *testing.T) {
	t.Parallel()
	rs, parts, log := newRecorded("catalog", "fleet", "web")
	l := NewList(parts...)
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	died := errors.New("stream deleted")
	rs[1].die <- died
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the list did not end when a part died")
	}
	if err := l.Err(); !errors.Is(err, died) || err.Error() != "fleet: stream deleted" {
		t.Fatalf("Err: %v, want the fleet's", err)
	}
	for _, r := range []*recorded{rs[0], rs[2]} {
		select {
		case <-r.Done():
			t.Fatalf("%s ended with its neighbour: the owner's Stop must stop it, in order", r.name)
		default:
		}
	}
	l.Stop()
	want := []string{"start catalog", "start fleet", "start web", "stop web", "stop fleet", "stop catalog"}
	if got := log(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
