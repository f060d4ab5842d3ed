package web

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// Tokens that change, and failed authentication counted and told.

// adminToken is the node's admin token, which rotation replaces while
// the node serves. file, when set, is where the token is kept (the data
// dir's admin.token, or --admin-token-file): rotation replaces it before
// the new token is answered, so a restart keeps it.
type adminToken struct {
	mu    sync.RWMutex
	token string
	file  string
	// endSessionsFunc signs every dashboard session out: they were
	// signed in with the token rotation replaces.
	endSessionsFunc func()
}

func (a *adminToken) is(presented string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return appliance.TokenEqual(presented, a.token)
}

// rotate makes a new admin token, keeps it in the file (if any), then
// uses it: the old token and every session signed in with it are
// refused from then on. A file that cannot be written changes nothing.
func (a *adminToken) rotate() (string, error) {
	token, err := appliance.NewToken("lha_")
	if err != nil {
		return "", leasehold.Wrap(leasehold.KindInternal, err, "making a token")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file != "" {
		// Checked again at each rotation: the directory may have been
		// opened to others since the start. Unavailable, as for a file
		// that cannot be written: the call was right, but the node
		// cannot keep a new token safely.
		if err := appliance.CheckTokenDir(a.file); err != nil {
			return "", leasehold.Wrap(leasehold.KindUnavailable, err, "the admin token is not rotated: %v", err)
		}
		if err := appliance.WriteAdminToken(a.file, token); err != nil {
			return "", err
		}
	}
	a.token = token
	if a.endSessionsFunc != nil {
		a.endSessionsFunc()
	}
	return token, nil
}

// noBody refuses a rotation sent with a body: the call takes none, and
// a client that sends one means something this node does not do.
func noBody(c echo.Context) error {
	if c.Request().ContentLength != 0 {
		return leasehold.Errorf(leasehold.KindInvalid, "this call takes no body")
	}
	return nil
}

// rotateAdminToken answers POST /api/v1/admin/token.
func (s *Server) rotateAdminToken(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	token, err := s.admin.rotate()
	if err != nil {
		return err
	}
	if s.admin.file == "" {
		s.log.Warn("admin token rotated in memory only: it was given on the command line or in the environment, and a restart brings that one back", caller(c)...)
	}
	return c.JSON(http.StatusCreated, leasehold.NewToken{Token: token})
}

// requireAdminOrSelf lets the admin token through, or the token of the
// node the path's :id names (a worker rotating its own token); another
// node's token is forbidden.
func (s *Server) requireAdminOrSelf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		t := bearer(c)
		if t == "" {
			return errNoToken
		}
		if s.admin.is(t) {
			markAuthenticated(c.Request())
			return next(c)
		}
		a, err := s.node.Holders.AuthNode(c.Request().Context(), t)
		if err != nil {
			s.authFailed(c, authNode)
			return errWrongToken
		}
		markAuthenticated(c.Request())
		if id, err := pathID(c, "id"); err != nil || id != a.ID {
			return leasehold.Errorf(leasehold.KindForbidden, "a node may change its own token only")
		}
		c.Set(nodeKey, a)
		return next(c)
	}
}

// rotateNodeToken answers POST /api/v1/nodes/{id}/token.
func (s *Server) rotateNodeToken(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	token, err := s.node.Holders.RotateNodeToken(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, leasehold.NewToken{Token: token})
}

// The kinds of failed authentication: a bearer token refused on an admin
// route, on a node's route, and a refused dashboard sign-in.
const (
	authAdmin     = "admin"
	authNode      = "node"
	authDashboard = "dashboard"
)

func newAuthFailureMetric() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_auth_failures_total", Help: "Tokens refused, by kind: admin (on an admin route), node (on a worker route), dashboard (a sign-in).",
	}, []string{"kind"})
	for _, k := range []string{authAdmin, authNode, authDashboard} {
		v.WithLabelValues(k)
	}
	return v
}

// authLogEvery is how often failed authentication from one remote
// address is logged: the first, then a line a minute with the count.
const authLogEvery = time.Minute

// authFailures remembers, by remote address, when a failure was last
// logged and how many came since; at most authLogRemotes addresses, so
// a flood from many addresses cannot grow it without bound.
type authFailures struct {
	mu      sync.Mutex
	remotes map[string]*authTally
}

type authTally struct {
	logged time.Time
	since  int
}

const authLogRemotes = 4096

// authFailed counts a refused token of kind and logs it, at most once a
// minute a remote address. The token is never logged.
func (s *Server) authFailed(c echo.Context, kind string) {
	s.metrics.authFailed.WithLabelValues(kind).Inc()
	remote := c.Request().RemoteAddr
	if host, _, err := net.SplitHostPort(remote); err == nil {
		remote = host
	}
	now := time.Now()
	f := &s.authFails
	f.mu.Lock()
	if f.remotes == nil {
		f.remotes = map[string]*authTally{}
	}
	t, ok := f.remotes[remote]
	if !ok {
		if len(f.remotes) >= authLogRemotes {
			for r, t := range f.remotes {
				if now.Sub(t.logged) >= authLogEvery {
					delete(f.remotes, r)
				}
			}
		}
		if len(f.remotes) >= authLogRemotes {
			f.mu.Unlock()
			return // counted; the log waits for room
		}
		t = &authTally{}
		f.remotes[remote] = t
	}
	t.since++
	if ok && now.Sub(t.logged) < authLogEvery {
		f.mu.Unlock()
		return
	}
	n := t.since
	t.logged, t.since = now, 0
	f.mu.Unlock()
	s.log.Warn("authentication failed", "kind", kind, "remote", remote, "route", c.Request().Method+" "+c.Path(), "failures", n)
}
