package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// fenceOf is the fence every holder call names, required.
func fenceOf(f *int64) (int64, error) {
	if f == nil {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "fence is required: the fence your lease was granted at")
	}
	return *f, nil
}

// groupCall reads the group id from the path and the fence from the body.
func groupCall(c echo.Context) (groupID, fence int64, err error) {
	if groupID, err = pathID(c, "group"); err != nil {
		return 0, 0, err
	}
	var req leasehold.HolderCall
	if err := bind(c, &req, false); err != nil {
		return 0, 0, err
	}
	fence, err = fenceOf(req.Fence)
	return groupID, fence, err
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
	return c.JSON(http.StatusOK, leasehold.AnswerOf(g))
}

func (s *Server) next(c echo.Context) error {
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	var req leasehold.NextCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := fenceOf(req.Fence)
	if err != nil {
		return err
	}
	var done *leasehold.FinishedRange
	if f := req.Finished; f != nil {
		if f.Range == nil {
			return leasehold.Errorf(leasehold.KindInvalid, "finished.range is required")
		}
		done = &leasehold.FinishedRange{Range: *f.Range}
		if f.Headers != nil {
			done.Headers = *f.Headers
		}
	}
	r, err := s.node.Holders.NextAfter(c.Request().Context(), holderOf(c, gid, fence), done)
	if err != nil {
		return err
	}
	if r == nil {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, leasehold.NextAnswer{Range: r})
}

func (s *Server) heartbeat(c echo.Context) error {
	gid, fence, err := groupCall(c)
	if err != nil {
		return err
	}
	if err := s.node.Holders.Heartbeat(c.Request().Context(), holderOf(c, gid, fence)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, leasehold.HeartbeatAnswer{TTLS: s.node.Holders.TTL().Seconds()})
}

func (s *Server) release(c echo.Context) error {
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	var req leasehold.ReleaseCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := fenceOf(req.Fence)
	if err != nil {
		return err
	}
	if req.WindowError != nil {
		err = s.node.Holders.ReleaseUnreadable(c.Request().Context(), holderOf(c, gid, fence), *req.WindowError)
		if err == nil {
			s.logQuarantine(c, gid, fence, *req.WindowError)
		}
	} else if req.Stopped != nil && *req.Stopped {
		err = s.node.Holders.ReleaseStopped(c.Request().Context(), holderOf(c, gid, fence))
	} else {
		err = s.node.Holders.Release(c.Request().Context(), holderOf(c, gid, fence))
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, leasehold.ReleaseAnswer{GroupID: gid, Released: true, Quarantined: req.WindowError != nil})
}

// fail is rule 10 for a range: the holder says why it cannot index it.
func (s *Server) fail(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req leasehold.FailCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := fenceOf(req.Fence)
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
	r, err := s.node.Holders.Fail(c.Request().Context(), rangeHolderOf(c, id, fence), *req.Error, retry)
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
	var req leasehold.ProgressCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := fenceOf(req.Fence)
	if err != nil {
		return err
	}
	if req.Next == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "next is required")
	}
	r, err := s.node.Holders.Progress(c.Request().Context(), rangeHolderOf(c, id, fence), *req.Next)
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
	var req leasehold.FinishCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	fence, err := fenceOf(req.Fence)
	if err != nil {
		return err
	}
	var headers int64
	if req.Headers != nil {
		headers = *req.Headers
	}
	r, err := s.node.Holders.Finish(c.Request().Context(), rangeHolderOf(c, id, fence), headers)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// holderOf is the caller of a holder call on group gid at fence.
func holderOf(c echo.Context, gid, fence int64) leasehold.GroupHolder {
	return leasehold.GroupHolder{NodeID: nodeOf(c).ID, GroupID: gid, Fence: fence}
}

// rangeHolderOf is the caller of a holder call on range id at fence.
func rangeHolderOf(c echo.Context, id, fence int64) leasehold.RangeHolder {
	return leasehold.RangeHolder{NodeID: nodeOf(c).ID, RangeID: id, Fence: fence}
}
