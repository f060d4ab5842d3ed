package web

import (
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/labstack/echo/v4"
)

// mountPprof serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, to the admin token only: a profile names the node's code
// paths and its command line, and a CPU profile or trace costs the node
// while it runs. A profile or trace may last longer than a JSON request is
// given to arrive (?seconds=60): its handler lifts the read deadline, whose
// expiry would end the request's context and with it the profile.
//
//	curl -H "Authorization: Bearer $(cat DATA/admin.token)" -o cpu.pprof 'http://NODE/debug/pprof/profile?seconds=10'
//	go tool pprof -top cpu.pprof
func (s *Server) mountPprof(e *echo.Echo) {
	wrap := func(h http.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			_ = http.NewResponseController(c.Response().Writer).SetReadDeadline(time.Time{})
			h(c.Response(), c.Request())
			return nil
		}
	}
	get := func(path string, h http.HandlerFunc) { e.GET("/debug/pprof"+path, wrap(h), s.requireAdmin) }
	get("/", pprof.Index)
	get("/cmdline", pprof.Cmdline)
	get("/profile", pprof.Profile)
	get("/symbol", pprof.Symbol)
	get("/trace", pprof.Trace)
	// The named profiles (heap, allocs, goroutine, block, mutex,
	// threadcreate): Index serves each by the last part of its path, and
	// answers 404 for a name the runtime does not know.
	get("/:profile", pprof.Index)
	// go tool pprof looks up symbols with a POST.
	e.POST("/debug/pprof/symbol", wrap(pprof.Symbol), s.requireAdmin)
}
