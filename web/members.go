package web

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// Members removes members from the node's fleet for good and approves
// them again: *fleet.Fleet is one.
type Members interface {
	// RemoveMember removes node; one whose life is renewed now only when
	// forced. Errors: invalid (this node), conflict (running), unavailable.
	RemoveMember(ctx context.Context, node string, force bool) error
	// ApproveMember undoes node's removal. Errors: not found (not removed),
	// unavailable.
	ApproveMember(ctx context.Context, node string) error
}

// fleetMembers is the fleet's, or an error saying the node runs alone.
func (s *Server) fleetMembers() (Members, error) {
	if s.members == nil {
		return nil, leasehold.Errorf(leasehold.KindConflict, "this node runs alone (peer sync off): it has no fleet members to remove or approve")
	}
	return s.members, nil
}

// removeMember removes a member from the fleet for good (?force=true for
// one that is running).
func (s *Server) removeMember(c echo.Context) error {
	force, err := queryForce(c)
	if err != nil {
		return err
	}
	m, err := s.fleetMembers()
	if err != nil {
		return err
	}
	if err := m.RemoveMember(c.Request().Context(), c.Param("name"), force); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// approveMember undoes a member's removal.
func (s *Server) approveMember(c echo.Context) error {
	m, err := s.fleetMembers()
	if err != nil {
		return err
	}
	if err := m.ApproveMember(c.Request().Context(), c.Param("name")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
