package nodetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// RecordEnv names a directory. When it is set, every node Start makes
// writes each request it answers and the answer to a file of its own
// there, one Exchange a line, for the check of the answers against the
// OpenAPI description (web's TestMain sets it for the web tests).
const RecordEnv = "LEASEHOLD_API_RECORD"

// Exchange is one request a node answered, and its answer. Bodies are
// kept up to maxRecordedBody; snapshot bytes (gzip) are not kept.
type Exchange struct {
	Method        string      `json:"method"`
	URL           string      `json:"url"` // path and query
	RequestHeader http.Header `json:"request_header"`
	RequestBody   []byte      `json:"request_body"`
	// RequestCut: the request body was longer than what was kept, or was
	// not kept (a snapshot), or was not read whole by the handler.
	RequestCut     bool        `json:"request_cut"`
	Status         int         `json:"status"`
	ResponseHeader http.Header `json:"response_header"`
	ResponseBody   []byte      `json:"response_body"`
	ResponseCut    bool        `json:"response_cut"`
}

const maxRecordedBody = 1 << 20

var recordSeq atomic.Int64

// recorder appends a node's exchanges to its file.
type recorder struct {
	mu  sync.Mutex
	f   *os.File
	enc *json.Encoder
}

func newRecorder(dir string) (*recorder, error) {
	name := filepath.Join(dir, fmt.Sprintf("node-%d-%d.jsonl", os.Getpid(), recordSeq.Add(1)))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &recorder{f: f, enc: json.NewEncoder(f)}, nil
}

// Recording returns a wrapper for web.Options.WrapFunc that records what
// a server answers, as Start's nodes are recorded, for a node a test runs
// by other means (the command's own serve); nil when RecordEnv is not
// set. The record is closed when t ends.
func Recording(t testing.TB) func(http.Handler) http.Handler {
	t.Helper()
	d := os.Getenv(RecordEnv)
	if d == "" {
		return nil
	}
	rec, err := newRecorder(d)
	if err != nil {
		t.Fatalf("nodetest: recording the API: %v", err)
	}
	t.Cleanup(rec.close)
	return rec.wrap
}

func (rec *recorder) close() {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.f.Close()
}

// wrap is the server's WrapFunc: it passes every request through and
// writes down what was asked and answered.
func (rec *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := &capture{limit: maxRecordedBody}
		if body := r.Body; body != nil && body != http.NoBody {
			r.Body = &teeBody{ReadCloser: body, c: in}
			// The server looks at the request's own body once the
			// handler is done: given back, a body the handler refused
			// unread under Expect: 100-continue is left unsent, as
			// without the recorder, instead of being drained.
			defer func() { r.Body = body }()
		}
		out := &recordingWriter{ResponseWriter: w, body: capture{limit: maxRecordedBody}}
		next.ServeHTTP(out, r)
		x := Exchange{
			Method: r.Method, URL: r.URL.RequestURI(), RequestHeader: r.Header.Clone(),
			RequestBody: in.buf.Bytes(), RequestCut: in.cut,
			Status: out.status, ResponseHeader: w.Header().Clone(),
			ResponseBody: out.body.buf.Bytes(), ResponseCut: out.body.cut,
		}
		if x.Status == 0 {
			x.Status = http.StatusOK
		}
		if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
			x.RequestBody, x.RequestCut = nil, true
		}
		if w.Header().Get("Content-Type") == "application/gzip" {
			x.ResponseBody, x.ResponseCut = nil, true
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		_ = rec.enc.Encode(x)
	})
}

// capture keeps the first limit bytes written to it.
type capture struct {
	buf   bytes.Buffer
	limit int
	cut   bool
}

func (c *capture) keep(p []byte) {
	room := c.limit - c.buf.Len()
	if len(p) > room {
		p, c.cut = p[:max(room, 0)], true
	}
	c.buf.Write(p)
}

type teeBody struct {
	io.ReadCloser
	c *capture
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.c.keep(p[:n])
	return n, err
}

// recordingWriter keeps the status and the body of an answer. Unwrap lets
// http.ResponseController reach the connection (deadlines, flushes).
type recordingWriter struct {
	http.ResponseWriter
	status int
	body   capture
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.keep(p)
	return w.ResponseWriter.Write(p)
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *recordingWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }
