package web

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// Rule 11 over HTTP, for workers (node token): which groups' water marks
// to ask the source about, and what the source said.

// watermarks answers GET /api/v1/watermarks?limit=N (default 10).
func (s *Server) watermarks(c echo.Context) error {
	limit, err := queryInt(c, "limit", 10)
	if err != nil {
		return err
	}
	ws, kinds, err := s.node.Holders.Watermarks(c.Request().Context(), nodeOf(c).ID, int(limit))
	if err != nil {
		return err
	}
	// kinds says which kinds the list is drawn from: the caller's (rule
	// 12), so a worker can tell at start that its node reads its source.
	return c.JSON(http.StatusOK, leasehold.WatermarksAnswer{Groups: ws, Kinds: kinds})
}

// reportWatermarks answers POST /api/v1/groups/{name}/watermark.
func (s *Server) reportWatermarks(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	var req leasehold.WatermarkCall
	if err := bind(c, &req, false); err != nil {
		return err
	}
	if req.Error != nil {
		if req.Low != nil || req.High != nil {
			return leasehold.Errorf(leasehold.KindInvalid, "give either error or low and high, not both")
		}
		if err := s.node.Holders.ReportSourceError(c.Request().Context(), nodeOf(c).ID, name, *req.Error); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, leasehold.WatermarkReport{})
	}
	if req.Low == nil || req.High == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "low and high are required: the water marks as the source reports them")
	}
	if err := errors.Join(checkBound("low", req.Low, maxID), checkBound("high", req.High, maxID)); err != nil {
		return err
	}
	n, err := s.node.Holders.ReportWatermarks(c.Request().Context(), nodeOf(c).ID, name, *req.Low, *req.High)
	if err != nil {
		return err
	}
	// A report plans a bounded number of ranges (the group's planned
	// ranges are topped up to store.ReportBacklogRanges): capped tells the
	// worker the tail is not planned up to high yet, and later reports
	// plan the rest as ranges are leased.
	g, err := s.node.Admin.Group(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, leasehold.WatermarkReport{Planned: n, Capped: g.TailEnd < *req.High})
}
