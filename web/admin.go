package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// pathID reads a positive integer path parameter.
func pathID(c echo.Context, name string) (int64, error) {
	v, err := strconv.ParseInt(c.Param(name), 10, 64)
	if err != nil || v < 1 {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "%s %q is not a positive integer id", name, c.Param(name))
	}
	return v, nil
}

// queryInt reads an optional integer query parameter.
func queryInt(c echo.Context, name string, def int64) (int64, error) {
	s := c.QueryParam(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "query parameter %s=%q is not an integer", name, s)
	}
	return v, nil
}

// queryForce reads ?force=, which an operator write that would undo work
// or take it from a running worker asks for: true or false (default).
func queryForce(c echo.Context) (bool, error) {
	s := c.QueryParam("force")
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, leasehold.Errorf(leasehold.KindInvalid, "query parameter force=%q is not true or false", s)
	}
	return v, nil
}

// page reads ?limit=&after= for a listing: limit 1..1000 (default 100).
func page(c echo.Context) (after int64, limit int, err error) {
	l, err := queryInt(c, "limit", 100)
	if err != nil {
		return 0, 0, err
	}
	if l < 1 || l > 1000 {
		return 0, 0, leasehold.Errorf(leasehold.KindInvalid, "limit must be 1 to 1000")
	}
	a, err := queryInt(c, "after", 0)
	if err != nil {
		return 0, 0, err
	}
	if a < 0 {
		return 0, 0, leasehold.Errorf(leasehold.KindInvalid, "after must be 0 or more")
	}
	return a, int(l), nil
}

func nextCursor(n, limit int, last int64) string {
	if n < limit {
		return ""
	}
	return strconv.FormatInt(last, 10)
}

// Bounds on ids and range sizes, so the planner's arithmetic (an id plus a
// range size) can never overflow int64: far beyond any real source, and
// refused with 400 rather than wrapped around.
const (
	maxID        = 1 << 62
	maxRangeSize = 1 << 40
)

func checkBound(field string, v *int64, limit int64) error {
	if v != nil && *v > limit {
		return leasehold.Errorf(leasehold.KindInvalid, "%s %d is over the limit of %d", field, *v, limit)
	}
	return nil
}

func groupName(c echo.Context) (string, error) {
	name := c.Param("name")
	if !leasehold.ValidGroupName(name) {
		return "", leasehold.Errorf(leasehold.KindInvalid, "group name %q: use 1-255 bytes of A-Za-z0-9._+- starting with a letter or digit", name)
	}
	return name, nil
}

func (s *Server) registerNode(c echo.Context) error {
	var req leasehold.NodeSpec
	if err := bind(c, &req, false); err != nil {
		return err
	}
	n, err := s.node.Admin.RegisterNode(c.Request().Context(), appliance.NodeSpec{
		Name: req.Name, PriorityMin: req.PriorityMin, PriorityMax: req.PriorityMax, Capacity: req.Capacity, Kinds: req.Kinds,
	})
	if err != nil {
		return err
	}
	c.Set(auditNameKey, n.Name)
	return c.JSON(http.StatusCreated, n)
}

func (s *Server) listNodes(c echo.Context) error {
	ns, err := s.node.Admin.Nodes(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ns)
}

// listPeers answers the fleet as this node sees it; a node without peer
// sync answers that it runs alone.
func (s *Server) listPeers(c echo.Context) error {
	if s.peers == nil {
		return c.JSON(http.StatusOK, leasehold.FleetStatus{Peers: []leasehold.Peer{}})
	}
	st, err := s.peers(c.Request().Context())
	if err != nil {
		return err
	}
	if st.Peers == nil {
		st.Peers = []leasehold.Peer{}
	}
	return c.JSON(http.StatusOK, st)
}

func (s *Server) pauseNode(c echo.Context) error  { return s.setPaused(c, true) }
func (s *Server) resumeNode(c echo.Context) error { return s.setPaused(c, false) }

func (s *Server) setPaused(c echo.Context, paused bool) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req leasehold.PauseCall
	if err := bind(c, &req, true); err != nil {
		return err
	}
	n, err := s.node.Admin.SetPaused(c.Request().Context(), id, paused, req.By)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, n)
}

// changeNode answers PATCH /nodes/{id}: its kinds or its capacity.
func (s *Server) changeNode(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req leasehold.NodeChange
	if err := bind(c, &req, false); err != nil {
		return err
	}
	if req.Kinds == nil && req.Capacity == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "give kinds or capacity to change")
	}
	n, err := s.node.Admin.ChangeNode(c.Request().Context(), id, appliance.NodeChange{Kinds: req.Kinds, Capacity: req.Capacity})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, n)
}

func (s *Server) deleteNode(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	force, err := queryForce(c)
	if err != nil {
		return err
	}
	if err := s.node.Admin.DeleteNode(c.Request().Context(), id, force); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) putGroup(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	var req leasehold.GroupSpec
	if err := bind(c, &req, true); err != nil {
		return err
	}
	if err := errors.Join(checkBound("range_size", req.RangeSize, maxRangeSize), checkBound("start", req.Start, maxID)); err != nil {
		return err
	}
	g, created, err := s.node.Admin.PutGroup(c.Request().Context(), name, appliance.GroupSpec{
		Priority: req.Priority, Active: req.Active, RangeSize: req.RangeSize, Start: req.Start, Kind: req.Kind,
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, g)
}

func (s *Server) listGroups(c echo.Context) error {
	after, limit, err := page(c)
	if err != nil {
		return err
	}
	gs, err := s.node.Admin.Groups(c.Request().Context(), after, limit)
	if err != nil {
		return err
	}
	var last int64
	if len(gs) > 0 {
		last = gs[len(gs)-1].ID
	}
	return c.JSON(http.StatusOK, leasehold.GroupPage{Groups: gs, Next: nextCursor(len(gs), limit, last)})
}

func (s *Server) getGroup(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	d, err := s.node.Admin.GroupDetail(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (s *Server) planTail(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	var req leasehold.PlanTailCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	if req.High == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "high is required")
	}
	if err := checkBound("high", req.High, maxID); err != nil {
		return err
	}
	n, err := s.node.Admin.PlanTail(c.Request().Context(), name, *req.High)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, leasehold.PlanAnswer{Planned: n})
}

func (s *Server) planHistory(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	var req leasehold.PlanHistoryCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	if req.Low == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "low is required")
	}
	if err := checkBound("low", req.Low, maxID); err != nil {
		return err
	}
	n, err := s.node.Admin.PlanHistory(c.Request().Context(), name, *req.Low)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, leasehold.PlanAnswer{Planned: n})
}

func (s *Server) listRanges(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	after, limit, err := page(c)
	if err != nil {
		return err
	}
	status := leasehold.RangeStatus(c.QueryParam("status"))
	switch status {
	case "", leasehold.StatusPlanned, leasehold.StatusLeased, leasehold.StatusDone, leasehold.StatusFailed:
	default:
		return leasehold.Errorf(leasehold.KindInvalid, "status %q: use planned, leased, done or failed", status)
	}
	rs, err := s.node.Admin.Ranges(c.Request().Context(), name, status, after, limit)
	if err != nil {
		return err
	}
	var last int64
	if len(rs) > 0 {
		last = rs[len(rs)-1].ID
	}
	return c.JSON(http.StatusOK, leasehold.RangePage{Ranges: rs, Next: nextCursor(len(rs), limit, last)})
}

func (s *Server) retryRange(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if err := bind(c, &struct{}{}, true); err != nil {
		return err
	}
	r, err := s.node.Admin.Retry(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

func (s *Server) putRules(c echo.Context) error {
	var body json.RawMessage
	if err := bind(c, &body, false); err != nil {
		return err
	}
	v, err := s.node.Admin.PutRules(c.Request().Context(), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, leasehold.RulesVersion{Version: v})
}

func (s *Server) getRules(c echo.Context) error {
	return c.JSON(http.StatusOK, leasehold.RulesOf(s.node.Admin.Rules()))
}

func (s *Server) findings(c echo.Context) error {
	r, err := s.node.Watchman.Report(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// liftQuarantine lets a quarantined group be leased again with the window
// it has (rule 10).
func (s *Server) liftQuarantine(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	g, err := s.node.Admin.LiftQuarantine(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, g)
}

// deleteGroup deletes a group with its ranges and window; refused while
// the group is held, and on a node of a fleet.
func (s *Server) deleteGroup(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	if err := s.node.Reads.DeleteGroup(c.Request().Context(), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// dropSnapshot drops a group's window and lifts its quarantine (rule 10);
// refused while the group is held.
func (s *Server) dropSnapshot(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	g, err := s.node.Reads.DropSnapshot(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, g)
}
