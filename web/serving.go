package web

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/service"
)

// Serving is a Server on a listener as a service (service.Service):
// Start serves; Stop is the graceful end, the node's first on SIGTERM:
// no new request is taken, and those in flight may finish within the
// grace period, then the server is closed.
type Serving struct {
	srv   *Server
	ln    net.Listener
	grace time.Duration

	service.Base
	mu          sync.Mutex
	ctx         context.Context // the owner's, without its cancel: the graceful end's
	shutdownErr error           // the graceful end's, but its deadline
}

// On is s serving ln, not started; grace bounds how long Stop lets
// requests in flight finish.
func (s *Server) On(ln net.Listener, grace time.Duration) *Serving {
	return &Serving{srv: s, ln: ln, grace: grace}
}

// Handler is the served server's HTTP handler (Server.Handler), for
// tests that read its routes.
func (v *Serving) Handler() http.Handler { return v.srv.Handler() }

// Start serves ln in the background until Stop or ctx's end, either of
// which ends the serving gracefully. A listener that fails ends the
// service with its error. Errors: service.ErrStarted.
func (v *Serving) Start(ctx context.Context) error {
	v.mu.Lock()
	v.ctx = context.WithoutCancel(ctx)
	v.mu.Unlock()
	return v.Begin(ctx, func(context.Context) error { return v.srv.Serve(v.ln) },
		func(ctx context.Context) error {
			<-ctx.Done()
			v.shutdown()
			return nil
		})
}

// Stop takes no new request, lets those in flight finish within the grace
// period, and closes the server.
func (v *Serving) Stop() {
	v.shutdown()
	v.Base.Stop()
	v.ln.Close() // never served: Serve closes it otherwise
}

// shutdown is the graceful end, once; later calls wait for it.
func (v *Serving) shutdown() {
	v.mu.Lock()
	defer v.mu.Unlock()
	// The owner's context may be cancelled: the grace period is the bound.
	ctx := v.ctx
	if ctx == nil {
		ctx = context.TODO() // never started: there is nothing to wait for
	}
	ctx, cancel := context.WithTimeout(ctx, v.grace)
	defer cancel()
	if err := v.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && v.shutdownErr == nil {
		v.shutdownErr = err
	}
}

// Err is why the serving ended: its listener's failure, or a graceful
// end that failed other than by running out of time; nil otherwise.
func (v *Serving) Err() error {
	if err := v.Base.Err(); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.shutdownErr
}
