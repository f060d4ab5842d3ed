package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// statusOf is the one table from error kinds to HTTP statuses.
var statusOf = map[leasehold.ErrorKind]int{
	leasehold.KindInvalid:       http.StatusBadRequest,
	leasehold.KindUnauthorized:  http.StatusUnauthorized,
	leasehold.KindForbidden:     http.StatusForbidden,
	leasehold.KindNotFound:      http.StatusNotFound,
	leasehold.KindLeaseLost:     http.StatusConflict,
	leasehold.KindConflict:      http.StatusConflict,
	leasehold.KindTooLarge:      http.StatusRequestEntityTooLarge,
	leasehold.KindUnprocessable: http.StatusUnprocessableEntity,
	leasehold.KindNoSpace:       http.StatusInsufficientStorage,
	leasehold.KindUnavailable:   http.StatusServiceUnavailable,
	leasehold.KindInternal:      http.StatusInternalServerError,
}

// timedOut classes a context's end in err: the request's own (the client
// went away or gave up, requestEnded) is the client's doing, not logged
// as internal; a step inside the node that timed out with no kind of its
// own (NATS electing a leader, say) is unavailable for now: try again.
func timedOut(err error, requestEnded bool) error {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if requestEnded {
		return leasehold.Wrap(leasehold.KindInvalid, err, "the request ended before it was answered")
	}
	if leasehold.KindOf(err) == leasehold.KindInternal {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "a step of the answer timed out inside the node; try again")
	}
	return err
}

// handleError answers every error a handler returns: the kind's status and
// the error body. Only internal errors are logged with their cause.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	err = timedOut(err, c.Request().Context().Err() != nil)
	var he *echo.HTTPError
	if errors.As(err, &he) && leasehold.KindOf(err) == leasehold.KindInternal {
		err = fromEchoError(he)
	}
	kind := leasehold.KindOf(err)
	if kind == leasehold.KindUnavailable {
		err = s.node.Reads.WithDiskCause(err)
	}
	status := statusOf[kind]
	if kind == leasehold.KindInternal {
		s.log.Error("internal error", "method", c.Request().Method, "path", c.Path(), "err", err)
	}
	if kind == leasehold.KindNoSpace {
		// A full disk refuses every write: said loudly, with where and how
		// much room is left, not only as the write's own status.
		s.log.Warn("the data disk is full: writes are refused (507) until room is made", "path", s.node.Config.DataDir,
			"free_bytes", s.node.Reads.DataFreeBytes(), "method", c.Request().Method, "route", c.Path(), "err", leasehold.ErrorMessage(err))
	}
	if kind == leasehold.KindUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
	}
	var body leasehold.ErrorBody
	body.Error.Code = string(kind)
	body.Error.Message = leasehold.ErrorMessage(err)
	if c.Request().Method == http.MethodHead {
		c.NoContent(status)
		return
	}
	c.JSON(status, body)
}

// fromEchoError maps echo's own errors (no route, wrong method) to kinds.
func fromEchoError(he *echo.HTTPError) error {
	msg := http.StatusText(he.Code)
	if m, ok := he.Message.(string); ok {
		msg = m
	}
	switch he.Code {
	case http.StatusNotFound:
		return leasehold.Errorf(leasehold.KindNotFound, "no such endpoint")
	case http.StatusMethodNotAllowed:
		return leasehold.Errorf(leasehold.KindNotFound, "method not allowed on this endpoint")
	case http.StatusRequestEntityTooLarge:
		return leasehold.Errorf(leasehold.KindTooLarge, "%s", msg)
	case http.StatusUnauthorized:
		return leasehold.Errorf(leasehold.KindUnauthorized, "%s", msg)
	case http.StatusForbidden:
		return leasehold.Errorf(leasehold.KindForbidden, "%s", msg)
	case http.StatusServiceUnavailable:
		return leasehold.Errorf(leasehold.KindUnavailable, "%s", msg)
	}
	if he.Code >= 400 && he.Code < 500 {
		return leasehold.Errorf(leasehold.KindInvalid, "%s", msg)
	}
	return he
}

// maxJSONBody is the limit on every JSON request body.
const maxJSONBody = 1 << 20

// bind decodes the request's JSON body into v, strictly: unknown fields,
// wrong types, trailing data and bodies over 1 MiB are refused and nothing
// is changed. An empty body leaves v as it is when optional.
func bind(c echo.Context, v any, optional bool) error {
	r := c.Request()
	body := http.MaxBytesReader(c.Response().Writer, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return leasehold.Errorf(leasehold.KindTooLarge, "the body is over the limit of %d bytes", maxJSONBody)
		case errors.Is(err, io.EOF):
			if optional {
				return nil
			}
			return leasehold.Errorf(leasehold.KindInvalid, "a JSON body is required")
		case errors.Is(err, os.ErrDeadlineExceeded):
			return leasehold.Wrap(leasehold.KindInvalid, err, "the body did not arrive in the time allowed")
		}
		return leasehold.Errorf(leasehold.KindInvalid, "the body is not valid JSON for this endpoint: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return leasehold.Errorf(leasehold.KindTooLarge, "the body is over the limit of %d bytes", maxJSONBody)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return leasehold.Wrap(leasehold.KindInvalid, err, "the body did not arrive in the time allowed")
		}
		return leasehold.Errorf(leasehold.KindInvalid, "the body has data after its JSON value")
	}
	return nil
}
