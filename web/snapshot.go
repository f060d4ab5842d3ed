package web

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// Snapshot bodies stream straight between the connection and the file:
// never buffered whole, so memory stays flat for any size.

func (s *Server) putSnapshot(c echo.Context) (err error) {
	defer closeOnRefusal(c, &err)
	gid, err := pathID(c, "group")
	if err != nil {
		return err
	}
	fence, err := requiredQuery(c, "fence")
	if err != nil {
		return err
	}
	return s.storeSnapshot(c, gid, nodeOf(c).ID, fence, false)
}

func (s *Server) adminPutSnapshot(c echo.Context) (err error) {
	defer closeOnRefusal(c, &err)
	name, err := groupName(c)
	if err != nil {
		return err
	}
	force, err := queryForce(c)
	if err != nil {
		return err
	}
	g, err := s.node.Snapshots.UploadGroup(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return s.storeSnapshot(c, g.ID, 0, 0, force)
}

// closeOnRefusal answers a refused upload on a connection that then
// closes. Kept open, Go's server would first read up to 256 KiB of the
// body the refusal left unread, so a slow sender (a former holder
// trickling bytes) would not hear its refusal for as long as that takes.
func closeOnRefusal(c echo.Context, err *error) {
	if *err != nil && !c.Response().Committed {
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
}

func requiredQuery(c echo.Context, name string) (int64, error) {
	if c.QueryParam(name) == "" {
		return 0, leasehold.Errorf(leasehold.KindInvalid, "query parameter %s is required", name)
	}
	return queryInt(c, name, 0)
}

func (s *Server) storeSnapshot(c echo.Context, groupID, nodeID, fence int64, force bool) error {
	next, err := requiredQuery(c, "next")
	if err != nil {
		return err
	}
	r := c.Request()
	digest, err := reprDigest(r.Header.Get("Repr-Digest"))
	if err != nil {
		return err
	}
	limit := s.node.Snapshots.MaxBytes()
	if r.ContentLength > limit {
		return appliance.ErrSnapshotTooLarge(r.ContentLength, limit)
	}
	isGzip := strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip")
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && (ct == "application/gzip" || ct == "application/x-gzip") {
		isGzip = true
	}
	rc := http.NewResponseController(c.Response().Writer)
	idle := &idleReader{r: http.MaxBytesReader(c.Response().Writer, r.Body, limit), rc: rc, idle: s.streamIdle,
		until: time.Now().Add(s.uploadTotal), total: s.uploadTotal}
	idle.extend()
	// Every byte received counts, stored or not: the metric is what the
	// network carried.
	received := &countingReader{r: idle}
	defer func() { s.metrics.snapshotBytes("in", received.n) }()
	var body io.Reader = received
	var verify func() error
	if isGzip {
		// Stored as sent, so it must be whole: a truncated or corrupt
		// stream is refused and the old window kept.
		check := newGzipCheck(received, s.node.Snapshots.MaxExpandedBytes())
		defer check.Close()
		body = check
		verify = check.verify
	}
	snap, err := s.node.Snapshots.Put(r.Context(), appliance.Upload{
		GroupID: groupID, NodeID: nodeID, Fence: fence, Next: next, Body: body, Gzip: isGzip, Digest: digest,
		VerifyFunc: verify, Force: force, StopFunc: idle.stop,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, s.keptAnswer(r.Context(), groupID, snap))
}

// reprDigest parses an RFC 9530 Repr-Digest header and returns its sha-256,
// or nil when the header is absent or names no sha-256. A header naming
// two different sha-256 values is refused: neither can be trusted.
func reprDigest(h string) ([]byte, error) {
	if strings.TrimSpace(h) == "" {
		return nil, nil
	}
	var found []byte
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
		if found != nil && !bytes.Equal(found, b) {
			return nil, leasehold.Errorf(leasehold.KindInvalid, "Repr-Digest names two different sha-256 values")
		}
		found = b
	}
	return found, nil
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
	if err := s.node.Holders.Heartbeat(c.Request().Context(), holderOf(c, gid, fence)); err != nil {
		return err
	}
	return s.serveSnapshot(c, gid)
}

func (s *Server) adminGetSnapshot(c echo.Context) error {
	name, err := groupName(c)
	if err != nil {
		return err
	}
	g, err := s.node.Admin.Group(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return s.serveSnapshot(c, g.ID)
}

func (s *Server) serveSnapshot(c echo.Context, groupID int64) error {
	f, snap, err := s.node.Snapshots.Open(c.Request().Context(), groupID)
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
	if !fixRange(c.Request().Header) {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(snap.Size, 10))
		h.Set("Content-Type", "text/plain; charset=utf-8") // not the snapshot's gzip
		return c.String(http.StatusRequestedRangeNotSatisfiable, "the Range names no bytes of the snapshot\n")
	}
	rc := http.NewResponseController(c.Response().Writer)
	w := &idleWriter{Response: c.Response(), raw: c.Response().Writer, rc: rc, idle: s.streamIdle, size: snap.Size}
	w.extend()
	// ServeContent answers Range (206), If-Range and If-None-Match against
	// the ETag, and sets Content-Length.
	http.ServeContent(w, c.Request(), "", snap.At, f)
	s.metrics.snapshotBytes("out", c.Response().Size)
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// fixRange prepares a download's Range header for http.ServeContent: a
// range unit other than bytes is ignored (RFC 9110 section 14.2), and
// zero-length suffix ranges ("-0"), which name no bytes but which
// ServeContent answers with an empty 206 and a Content-Range of end before
// start, are dropped. It reports false when no range is left: a 416.
func fixRange(h http.Header) bool {
	v := h.Get("Range")
	if v == "" {
		return true
	}
	unit, set, ok := strings.Cut(v, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		h.Del("Range")
		return true
	}
	var keep []string
	for _, spec := range strings.Split(set, ",") {
		if n, suffix := strings.CutPrefix(strings.TrimSpace(spec), "-"); suffix {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil && v == 0 {
				continue
			}
		}
		keep = append(keep, spec)
	}
	if len(keep) == 0 {
		return false
	}
	h.Set("Range", "bytes="+strings.Join(keep, ","))
	return true
}

// gzipCheck passes an upload through unchanged and decompresses a copy of
// it on the way; verify, once the body has ended, fails unless the bytes
// were whole gzip (every member complete, its CRC and length right, no
// trailing bytes). The verdict waits for the end of the body, so a body
// over the limit is too large and a body that does not match its digest
// is unprocessable (the snapshot store checks the digest first, then
// calls verify), as they would be without the check. Close ends the
// decompressor when an upload stops early.
type gzipCheck struct {
	r      io.Reader
	pw     *io.PipeWriter
	done   chan error
	result error
	ended  bool
	// maxExpanded is the most the stream may expand to.
	maxExpanded int64
}

var errUploadEnded = errors.New("the upload ended")

// errExpandsTooFar stops the decompressor of an upload that expands past
// the limit: a gzip bomb costs the node no more than the limit's worth.
var errExpandsTooFar = errors.New("expands past the limit")

func newGzipCheck(r io.Reader, maxExpanded int64) *gzipCheck {
	pr, pw := io.Pipe()
	g := &gzipCheck{r: r, pw: pw, done: make(chan error, 1), maxExpanded: maxExpanded}
	go func() {
		zr, err := gzip.NewReader(pr)
		if err == nil {
			var n int64
			n, err = io.Copy(io.Discard, io.LimitReader(zr, maxExpanded+1))
			if err == nil && n > maxExpanded {
				err = errExpandsTooFar
			}
		}
		// A stream that fails early fails the writes still to come.
		pr.CloseWithError(cmp.Or(err, io.ErrClosedPipe))
		g.done <- err
	}()
	return g
}

func (g *gzipCheck) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if n > 0 && !g.ended {
		if _, werr := g.pw.Write(p[:n]); werr != nil {
			g.finish()
			if g.result == nil {
				g.result = errors.New("gzip: data after the end of the stream")
			}
		}
	}
	if err == io.EOF {
		g.finish()
	}
	return n, err
}

// verify is the verdict on the whole body, for appliance.Upload.VerifyFunc.
func (g *gzipCheck) verify() error {
	g.finish()
	if errors.Is(g.result, errExpandsTooFar) {
		return leasehold.Errorf(leasehold.KindTooLarge, "the snapshot expands past the limit of %d bytes", g.maxExpanded)
	}
	if g.result != nil {
		return notWholeGzip(g.result)
	}
	return nil
}

// finish ends the decompressor's input and waits for its verdict.
func (g *gzipCheck) finish() {
	if !g.ended {
		g.ended = true
		g.pw.Close()
		g.result = <-g.done
	}
}

// Close stops the decompressor and waits for it.
func (g *gzipCheck) Close() {
	if !g.ended {
		g.pw.CloseWithError(errUploadEnded)
		g.finish()
	}
}

func notWholeGzip(err error) error {
	return leasehold.Wrap(leasehold.KindInvalid, err, "the snapshot is sent as gzip but is not a whole gzip stream: %v", err)
}

// idleReader lifts the request's read deadline and keeps pushing it out
// while bytes arrive, so a big upload may take its time but a stalled one
// is cut off; no further than until, so an upload trickled a byte at a
// time ends too. stop cuts it off at once, from another goroutine.
type idleReader struct {
	r       io.Reader
	rc      *http.ResponseController
	idle    time.Duration
	until   time.Time
	total   time.Duration // until, as the operator set it, for the error
	last    time.Time
	stopped atomic.Bool
}

func (i *idleReader) extend() {
	i.last = time.Now()
	if i.stopped.Load() {
		return
	}
	d := i.last.Add(i.idle)
	if i.until.Before(d) {
		d = i.until
	}
	_ = i.rc.SetReadDeadline(d)
}

// stop cuts the upload off: the read under way fails now, and every one
// after it (Upload.StopFunc).
func (i *idleReader) stop() {
	i.stopped.Store(true)
	_ = i.rc.SetReadDeadline(time.Now())
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	switch {
	case i.stopped.Load():
		return n, leasehold.Errorf(leasehold.KindLeaseLost, "the upload was cut off: the group changed hands while it was sent")
	case err != nil && !time.Now().Before(i.until):
		return n, leasehold.Errorf(leasehold.KindInvalid, "the upload took longer than the %v a snapshot upload may take", i.total)
	}
	if time.Since(i.last) > extendEvery(i.idle) {
		i.extend()
	}
	return n, err
}

// extendEvery is how often a stream pushes its deadline out: at most once
// a second, so the deadline costs nothing per read, and often enough for a
// short idle timeout.
func extendEvery(idle time.Duration) time.Duration { return min(time.Second, idle/4) }

// idleWriter does the same for a download's writes. It keeps echo's
// response (so the status and size are the ones sent) and hands whole
// files to the connection's ReadFrom, which the kernel sends (sendfile).
type idleWriter struct {
	*echo.Response
	raw  http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
	last time.Time
	size int64 // of the whole file, for a 416's Content-Range
}

// WriteHeader gives every 416 the Content-Range RFC 9110 asks for
// (ServeContent sets it only for ranges past the end).
func (i *idleWriter) WriteHeader(code int) {
	if code == http.StatusRequestedRangeNotSatisfiable && i.Header().Get("Content-Range") == "" {
		i.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(i.size, 10))
	}
	i.Response.WriteHeader(code)
}

// sendChunk is how much may be sent per idle deadline: a client slower
// than sendChunk per streamIdleTimeout is cut off.
const sendChunk = 8 << 20

func (i *idleWriter) extend() {
	i.last = time.Now()
	_ = i.rc.SetWriteDeadline(i.last.Add(i.idle))
}

func (i *idleWriter) Write(p []byte) (int, error) {
	if time.Since(i.last) > extendEvery(i.idle) {
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
