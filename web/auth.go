package web

import (
	"errors"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

const nodeKey = "leasehold.node"

// bearer is the request's bearer token, or "".
func bearer(c echo.Context) string {
	h := c.Request().Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

var (
	errNoToken    = leasehold.Errorf(leasehold.KindUnauthorized, "an Authorization: Bearer token is required")
	errWrongToken = leasehold.Errorf(leasehold.KindUnauthorized, "the token is not known")
)

// requireAdmin lets only the admin token through; a node's token is
// forbidden here, anything else unauthorized.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		t := bearer(c)
		if t == "" {
			return errNoToken
		}
		if s.admin.is(t) {
			markAuthenticated(c.Request())
			return next(c)
		}
		if _, err := s.node.Holders.AuthNode(c.Request().Context(), t); err == nil {
			return leasehold.Errorf(leasehold.KindForbidden, "this endpoint takes the admin token, not a node's")
		} else if !errors.Is(err, leasehold.ErrUnauthorized) {
			return err
		}
		s.authFailed(c, authAdmin)
		return errWrongToken
	}
}

// requireNode lets only node tokens through and remembers the node; the
// admin token is forbidden here.
func (s *Server) requireNode(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		t := bearer(c)
		if t == "" {
			return errNoToken
		}
		a, err := s.node.Holders.AuthNode(c.Request().Context(), t)
		if err == nil {
			markAuthenticated(c.Request())
			c.Set(nodeKey, a)
			r := c.Request()
			s.agents.seen(a.ID, r.UserAgent(), r.RemoteAddr, s.node.Config.NowFunc())
			return next(c)
		}
		if !errors.Is(err, leasehold.ErrUnauthorized) {
			return err
		}
		if s.admin.is(t) {
			return leasehold.Errorf(leasehold.KindForbidden, "this endpoint takes a node's token, not the admin token")
		}
		s.authFailed(c, authNode)
		if errors.Is(err, appliance.ErrNameTaken) {
			// A good token of a peer's node kept out by a node of its name
			// here: its worker is told why, which only names nodes.
			return err
		}
		return errWrongToken
	}
}

func nodeOf(c echo.Context) appliance.NodeAuth {
	a, _ := c.Get(nodeKey).(appliance.NodeAuth)
	return a
}
