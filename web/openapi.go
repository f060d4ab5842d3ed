package web

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the OpenAPI 3.1 description of the API (API.md as a machine
// reads it), served at GET /api/v1/openapi.json without auth. The web
// tests check every answer they get against it.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) openAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, "application/json", OpenAPI)
}
