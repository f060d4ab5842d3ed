package web

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// backup streams a consistent backup of the node (GET /api/v1/backup,
// admin): a tar of the catalog as of one commit, the window snapshot files
// it records and, last, manifest.json with every file's sha-256. The node
// keeps serving meanwhile. A stream that fails after its first byte is cut
// off (no manifest, a broken connection), never ended as if whole.
func (s *Server) backup(c echo.Context) error {
	b, err := s.node.Reads.Backup(c.Request().Context())
	if err != nil {
		return err
	}
	defer b.Close()
	h := c.Response().Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Backup-Bytes", strconv.FormatInt(b.Bytes(), 10))
	h.Set("X-Backup-Files", strconv.Itoa(len(b.Manifest.Files)))
	h.Set("Content-Disposition", `attachment; filename="leasehold-`+b.Manifest.CatalogID+`-`+strconv.FormatInt(b.Manifest.TakenAt.Unix(), 10)+`.tar"`)
	rc := http.NewResponseController(c.Response().Writer)
	w := &idleWriter{Response: c.Response(), raw: c.Response().Writer, rc: rc, idle: s.streamIdle}
	w.extend()
	c.Response().WriteHeader(http.StatusOK)
	if err := b.WriteTar(w); err != nil {
		s.log.Error("backup stopped", "err", err, "sent", c.Response().Size)
		panic(http.ErrAbortHandler)
	}
	s.log.Info("backup sent", "files", len(b.Manifest.Files), "bytes", b.Bytes(), "catalog_id", b.Manifest.CatalogID)
	return nil
}
