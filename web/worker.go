package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// fenced is the body of every holder call.
type fenced struct {
	Fence *int64 `json:"fence"`
}

func (f fenced) fence() (int64, error) {
	if f.Fence == nil {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "fence is required: the fence your lease was granted at")
	}
	return *f.Fence, nil
}

// groupCall reads the group id from the path and the fence from the body.
func groupCall(c echo.Context) (groupID, fence int64, err error) {
	if groupID, err = pathID(c, "group"); err != nil {
		return 0, 0, err
	}
	var req fenced
	if err := bind(c, &req, false); err != nil {
		return 0, 0, err
	}
	fence, err = req.fence()
	return groupID, fence, err
}

type snapshotJSON struct {
	Next   int64  `json:"next"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (s *Server) lease(c echo.Context) error {
	if err := bind(c, &struct{}{}, true); err != nil {
		return err
	}
	g, err := s.node.Holders.Lease(c.Request().Context(), nodeOf(c).ID)
	if err != nil {
		return err
	}
	if g == nil {
		return c.NoContent(http.StatusNoContent)
	}
	if g.Takeover {
		s.logTakeover(c, g)
	}
	var snap *snapshotJSON
	if g.Snapshot != nil {
		snap = &snapshotJSON{Next: g.Snapshot.Next, Size: g.Snapshot.Size, SHA256: g.Snapshot.SHA256}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"group": map[string]any{
			"id": g.Group.ID, "name": g.Group.Name, "priority": g.Group.Priority,
			"range_size": g.Group.RangeSize, "start": g.Group.Start,
		},
		"fence":    g.Fence,
		"rules":    rulesOf(g.Rules),
		"snapshot": snap,
		"takeover": g.Takeover,
		"ttl_s":    s.node.Holders.TTL().Seconds(),
	})
}

func (s *Server) next(c echo.Context) error {
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	var req struct {
		fenced
		Finished *struct {
			Range   *int64 `json:"range"`
			Headers *int64 `json:"headers"`
		} `json:"finished"`
	}
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := req.fence()
	if err != nil {
		return err
	}
	var done *appliance.Finished
	if f := req.Finished; f != nil {
		if f.Range == nil {
			return leasehold.Errorf(leasehold.KindInvalid, "finished.range is required")
		}
		done = &appliance.Finished{Range: *f.Range}
		if f.Headers != nil {
			done.Headers = *f.Headers
		}
	}
	r, err := s.node.Holders.NextAfter(c.Request().Context(), nodeOf(c).ID, gid, fence, done)
	if err != nil {
		return err
	}
	if r == nil {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, map[string]any{"range": r})
}

func (s *Server) heartbeat(c echo.Context) error {
	gid, fence, err := groupCall(c)
	if err != nil {
		return err
	}
	if err := s.node.Holders.Heartbeat(c.Request().Context(), nodeOf(c).ID, gid, fence); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]float64{"ttl_s": s.node.Holders.TTL().Seconds()})
}

func (s *Server) release(c echo.Context) error {
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	var req struct {
		fenced
		// WindowError, when given, says the holder's window would not
		// load: the group is quarantined (rule 10).
		WindowError *string `json:"window_error"`
	}
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := req.fence()
	if err != nil {
		return err
	}
	if req.WindowError != nil {
		err = s.node.Holders.ReleaseUnreadable(c.Request().Context(), nodeOf(c).ID, gid, fence, *req.WindowError)
		if err == nil {
			s.logQuarantine(c, gid, fence, *req.WindowError)
		}
	} else {
		err = s.node.Holders.Release(c.Request().Context(), nodeOf(c).ID, gid, fence)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"group_id": gid, "released": true, "quarantined": req.WindowError != nil})
}

// fail is rule 10 for a range: the holder says why it cannot index it.
func (s *Server) fail(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req struct {
		fenced
		Error *string `json:"error"`
		Retry *bool   `json:"retry"`
	}
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := req.fence()
	if err != nil {
		return err
	}
	if req.Error == nil {
		return leasehold.Errorf(leasehold.KindUnprocessable, "error is required: 1 to %d bytes saying why the range cannot be indexed", leasehold.MaxErrorBytes)
	}
	retry := true
	if req.Retry != nil {
		retry = *req.Retry
	}
	r, err := s.node.Holders.Fail(c.Request().Context(), nodeOf(c).ID, id, fence, *req.Error, retry)
	if err != nil {
		return err
	}
	s.logRangeFailed(c, r, *req.Error, retry)
	return c.JSON(http.StatusOK, r)
}

func (s *Server) progress(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req struct {
		fenced
		Next *int64 `json:"next"`
	}
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := req.fence()
	if err != nil {
		return err
	}
	if req.Next == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "next is required")
	}
	r, err := s.node.Holders.Progress(c.Request().Context(), nodeOf(c).ID, id, fence, *req.Next)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

func (s *Server) finish(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req struct {
		fenced
		Headers *int64 `json:"headers"`
	}
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := req.fence()
	if err != nil {
		return err
	}
	var headers int64
	if req.Headers != nil {
		headers = *req.Headers
	}
	r, err := s.node.Holders.Finish(c.Request().Context(), nodeOf(c).ID, id, fence, headers)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}
