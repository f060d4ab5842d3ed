package web

import (
	"encoding/base64"
	"encoding/hex"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"leasehold"
	"leasehold/appliance"
)

// Snapshot bodies stream straight between the connection and the file:
// never buffered whole, so memory stays flat for any size.

func (s *Server) putSnapshot(c echo.Context) error {
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	fence, err := requiredQuery(c, "fence")
	if err != nil {
		return err
	}
	return s.storeSnapshot(c, gid, nodeOf(c).ID, fence)
}

func (s *Server) adminPutSnapshot(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	g, err := s.app.DB.GroupByName(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return s.storeSnapshot(c, g.ID, 0, 0)
}

func requiredQuery(c echo.Context, name string) (int64, error) {
	if c.QueryParam(name) == "" {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "query parameter %s is required", name)
	}
	return queryInt(c, name, 0)
}

func (s *Server) storeSnapshot(c echo.Context, groupID, nodeID, fence int64) error {
	next, err := requiredQuery(c, "next")
	if err != nil {
		return err
	}
	r := c.Request()
	digest, err := reprDigest(r.Header.Get("Repr-Digest"))
	if err != nil {
		return err
	}
	limit := s.app.Snapshots.MaxBytes()
	if r.ContentLength > limit {
		return appliance.ErrSnapshotTooLarge(r.ContentLength, limit)
	}
	isGzip := strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip")
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && (ct == "application/gzip" || ct == "application/x-gzip") {
		isGzip = true
	}
	rc := http.NewResponseController(c.Response().Writer)
	body := &idleReader{r: http.MaxBytesReader(c.Response().Writer, r.Body, limit), rc: rc}
	body.extend()
	snap, err := s.app.Snapshots.Put(r.Context(), appliance.Upload{
		GroupID: groupID, NodeID: nodeID, Fence: fence, Next: next, Body: body, Gzip: isGzip, Digest: digest,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, snapshotJSON{Next: snap.Next, Size: snap.Size, SHA256: snap.SHA256})
}

// reprDigest parses an RFC 9530 Repr-Digest header and returns its sha-256,
// or nil when the header is absent or names no sha-256.
func reprDigest(h string) ([]byte, error) {
	if strings.TrimSpace(h) == "" {
		return nil, nil
	}
	for _, item := range strings.Split(h, ",") {
		alg, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, leasehold.Errorf(leasehold.KindInvalid, "Repr-Digest %q: want sha-256=:<base64>:", h)
		}
		if !strings.EqualFold(strings.TrimSpace(alg), "sha-256") {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			return nil, leasehold.Errorf(leasehold.KindInvalid, "Repr-Digest sha-256 must be a byte sequence :<base64>:")
		}
		b, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		if err != nil || len(b) != 32 {
			return nil, leasehold.Errorf(leasehold.KindInvalid, "Repr-Digest sha-256 is not 32 bytes of base64")
		}
		return b, nil
	}
	return nil, nil
}

func (s *Server) getSnapshot(c echo.Context) error {
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	fence, err := requiredQuery(c, "fence")
	if err != nil {
		return err
	}
	// Reading the window is a holder call: it checks the fence and counts
	// as a heartbeat.
	if err := s.app.Coordinator.Heartbeat(c.Request().Context(), nodeOf(c).ID, gid, fence); err != nil {
		return err
	}
	return s.serveSnapshot(c, gid)
}

func (s *Server) adminGetSnapshot(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	g, err := s.app.DB.GroupByName(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return s.serveSnapshot(c, g.ID)
}

func (s *Server) serveSnapshot(c echo.Context, groupID int64) error {
	f, snap, err := s.app.Snapshots.Open(c.Request().Context(), groupID)
	if err != nil {
		return err
	}
	if f == nil {
		return c.NoContent(http.StatusNoContent)
	}
	defer f.Close()
	sum, _ := hex.DecodeString(snap.SHA256)
	h := c.Response().Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("ETag", `"`+snap.SHA256+`"`)
	h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":")
	h.Set("X-Snapshot-Next", strconv.FormatInt(snap.Next, 10))
	h.Set("X-Snapshot-Sha256", snap.SHA256)
	rc := http.NewResponseController(c.Response().Writer)
	w := &idleWriter{Response: c.Response(), raw: c.Response().Writer, rc: rc}
	w.extend()
	// ServeContent answers Range (206), If-Range and If-None-Match against
	// the ETag, and sets Content-Length.
	http.ServeContent(w, c.Request(), "", snap.At, f)
	return nil
}

// idleReader lifts the request's read deadline and keeps pushing it out
// while bytes arrive, so a big upload may take its time but a stalled one
// is cut off.
type idleReader struct {
	r    io.Reader
	rc   *http.ResponseController
	last time.Time
}

func (i *idleReader) extend() {
	i.last = time.Now()
	_ = i.rc.SetReadDeadline(i.last.Add(streamIdleTimeout))
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if time.Since(i.last) > time.Second {
		i.extend()
	}
	return n, err
}

// idleWriter does the same for a download's writes. It keeps echo's
// response (so the status and size are the ones sent) and hands whole
// files to the connection's ReadFrom, which the kernel sends (sendfile).
type idleWriter struct {
	*echo.Response
	raw  http.ResponseWriter
	rc   *http.ResponseController
	last time.Time
}

// sendChunk is how much may be sent per idle deadline: a client slower
// than sendChunk per streamIdleTimeout is cut off.
const sendChunk = 8 << 20

func (i *idleWriter) extend() {
	i.last = time.Now()
	_ = i.rc.SetWriteDeadline(i.last.Add(streamIdleTimeout))
}

func (i *idleWriter) Write(p []byte) (int, error) {
	if time.Since(i.last) > time.Second {
		i.extend()
	}
	return i.Response.Write(p)
}

func (i *idleWriter) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := i.raw.(io.ReaderFrom)
	lr, isLimited := r.(*io.LimitedReader)
	if !ok || !isLimited {
		return io.CopyBuffer(onlyWriter{i}, r, make([]byte, 256<<10))
	}
	if !i.Committed {
		i.WriteHeader(http.StatusOK)
	}
	var total int64
	for lr.N > 0 {
		i.extend()
		chunk := &io.LimitedReader{R: lr.R, N: min(lr.N, sendChunk)}
		n, err := rf.ReadFrom(chunk)
		lr.N -= n
		total += n
		i.Size += n
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
	}
	return total, nil
}

type onlyWriter struct{ io.Writer }
