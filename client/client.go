// Package client is the Go client of the leasehold node's HTTP API (admin
// and worker endpoints) and the Worker pull loop that programs working for a
// node run: it leases groups, feeds their ranges to an index function in id
// order, keeps the leases alive and moves window snapshots to and from the
// node.
//
// Every call takes a context. The API's error body comes back as a
// *leasehold.Error of the matching Kind, so errors.Is(err,
// leasehold.ErrLeaseLost) and friends work. Connection errors and 503 are
// retried with backoff; nothing else is. "Nothing to do" (204) is never an
// error: the calls that can get it return a nil result.
//
// The package imports only the root package and the standard library, so a
// worker binary does not pull in the node's store or web server.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// DefaultURL is the node's address when none is given.
const DefaultURL = "http://127.0.0.1:8080"

// maxErrorBody bounds how much of an error answer is read: the API's error
// bodies are small, and a proxy's HTML page must not be buffered whole.
const maxErrorBody = 64 << 10

// Client calls one node's API with one token: the admin token for the admin
// calls, a node token for the worker calls. A Client is safe for concurrent
// use; change its fields only before the first call.
type Client struct {
	// URL is the node's base address, e.g. http://127.0.0.1:8080.
	URL string
	// Token is sent as "Authorization: Bearer <Token>".
	Token string
	// HTTPClient does the requests; http.DefaultClient when nil. Its
	// Timeout, if any, bounds whole snapshot transfers too, so leave it 0
	// and use contexts instead.
	HTTPClient *http.Client
	// TLSConfig, when HTTPClient is nil, is what the client speaks https
	// with: the CA of a node's own certificate, a client certificate
	// (LoadTLS makes one from files). Nil trusts the system's CAs.
	TLSConfig *tls.Config
	// Retry is the backoff for connection errors and 503 answers.
	// Attempts counts the first try; 1 turns retries off.
	Retry Backoff
	// UserAgent names the program and its version to the node, which
	// shows a worker's last one on its nodes page. New sets this
	// client's; a worker program puts its own first.
	UserAgent string
}

// New returns a client of the node at baseURL (DefaultURL when empty) that
// authenticates with token, retrying with DefaultRetry.
func New(baseURL, token string) *Client {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	return &Client{URL: strings.TrimRight(baseURL, "/"), Token: token, Retry: DefaultRetry,
		UserAgent: leasehold.Build().UserAgent("leasehold-go-client")}
}

// HTTPError is the cause kept in a *leasehold.Error made from an answer: which
// call got which status. It is for logs; the Kind says what happened.
type HTTPError struct {
	Method     string
	Path       string
	StatusCode int
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
}

// kindByStatus is the kind of an error answer whose body names no code.
var kindByStatus = map[int]leasehold.ErrorKind{
	http.StatusBadRequest:                   leasehold.KindInvalid,
	http.StatusUnauthorized:                 leasehold.KindUnauthorized,
	http.StatusForbidden:                    leasehold.KindForbidden,
	http.StatusNotFound:                     leasehold.KindNotFound,
	http.StatusConflict:                     leasehold.KindConflict,
	http.StatusRequestEntityTooLarge:        leasehold.KindTooLarge,
	http.StatusUnprocessableEntity:          leasehold.KindUnprocessable,
	http.StatusInsufficientStorage:          leasehold.KindNoSpace,
	http.StatusServiceUnavailable:           leasehold.KindUnavailable,
	http.StatusRequestedRangeNotSatisfiable: leasehold.KindInvalid,
}

// decodeError turns an error answer into a *leasehold.Error. The body's code
// wins over the status, so a 409 is lease_lost or conflict as the node said.
func decodeError(req *http.Request, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var wire leasehold.ErrorBody
	_ = json.Unmarshal(body, &wire)
	kind := leasehold.ErrorKind(wire.Error.Code)
	if kind == "" {
		var ok bool
		if kind, ok = kindByStatus[resp.StatusCode]; !ok {
			kind = leasehold.KindInternal
		}
	}
	msg := wire.Error.Message
	if msg == "" {
		msg = fmt.Sprintf("%s %s: %s", req.Method, req.URL.Path, resp.Status)
	}
	return &leasehold.Error{
		Kind:    kind,
		Message: msg,
		Err:     &HTTPError{Method: req.Method, Path: req.URL.Path, StatusCode: resp.StatusCode},
	}
}

// request is one API call: what to send and what to expect back.
type request struct {
	method string
	path   string // below the base URL, with the query
	header http.Header
	// in is marshalled as the JSON body when not nil.
	in any
	// body is the raw body (snapshots); an io.Seeker is rewound on retry,
	// anything else is sent once.
	body   io.Reader
	length int64 // body length, -1 when unknown
}

// send does req with retries on connection errors and 503, and returns the
// first answer that is neither. Error answers (4xx, 5xx) come back as a
// *leasehold.Error with the body closed; other answers are returned open
// for the caller to read and close.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var payload []byte
	if r.in != nil {
		var err error
		if payload, err = json.Marshal(r.in); err != nil {
			return nil, leasehold.Wrap(leasehold.KindInvalid, err, "encode %s %s: %v", r.method, r.path, err)
		}
	}
	var rewind func() error
	start := int64(0)
	if s, ok := r.body.(io.Seeker); ok {
		if pos, err := s.Seek(0, io.SeekCurrent); err == nil {
			start = pos
			rewind = func() error { _, err := s.Seek(start, io.SeekStart); return err }
		}
	}
	attempts := max(c.Retry.Attempts, 1)
	for attempt := 0; ; attempt++ {
		req, err := c.newRequest(ctx, r, payload)
		if err != nil {
			return nil, err
		}
		resp, err := c.httpClient().Do(req)
		retryAfter := time.Duration(0)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			err = leasehold.Wrap(leasehold.KindUnavailable, err, "node unreachable: %v", err)
		case resp.StatusCode >= 400:
			if resp.StatusCode == http.StatusServiceUnavailable {
				retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
			}
			err = decodeError(req, resp)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return nil, err
			}
		default:
			return resp, nil
		}
		// A streamed body that cannot be rewound was spent by this try.
		canRetry := r.body == nil || rewind != nil
		if attempt+1 >= attempts || !canRetry {
			return nil, err
		}
		if err := c.Retry.Sleep(ctx, attempt, retryAfter); err != nil {
			return nil, err
		}
		if rewind != nil {
			if err := rewind(); err != nil {
				return nil, leasehold.Wrap(leasehold.KindInternal, err, "rewind body of %s %s: %v", r.method, r.path, err)
			}
		}
	}
}

func (c *Client) newRequest(ctx context.Context, r request, payload []byte) (*http.Request, error) {
	var body io.Reader
	length := int64(0)
	switch {
	case payload != nil:
		body, length = bytes.NewReader(payload), int64(len(payload))
	case r.body != nil:
		// Hide Close: the transport closes a request's body, and the
		// caller's file must stay open to be rewound for a retry.
		body, length = io.NopCloser(r.body), r.length
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.URL+r.path, body)
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInvalid, err, "%s %s: %v", r.method, r.path, err)
	}
	if r.body != nil && payload == nil {
		// An unknown length (-1) goes chunked.
		req.ContentLength = length
		if length == 0 {
			req.Body = http.NoBody
		}
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	return req, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	if c.TLSConfig != nil {
		return HTTPClientFor(c.TLSConfig)
	}
	return http.DefaultClient
}

// do sends a JSON call and decodes a JSON answer into out (when not nil).
// It reports whether the answer had content: false for 204. A connection
// broken while the answer is read is retried like one broken before it.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (bool, error) {
	attempts := max(c.Retry.Attempts, 1)
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, request{method: method, path: path, in: in})
		if err != nil {
			return false, err
		}
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			return false, nil
		}
		if out == nil {
			_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		} else {
			err = json.NewDecoder(resp.Body).Decode(out)
		}
		resp.Body.Close()
		if err == nil || errors.Is(err, io.EOF) && out == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, context.Cause(ctx)
		}
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		if errors.As(err, &syntax) || errors.As(err, &typ) || attempt+1 >= attempts {
			return false, leasehold.Wrap(leasehold.KindInternal, err, "%s %s: bad answer: %v", method, path, err)
		}
		if err := c.Retry.Sleep(ctx, attempt, 0); err != nil {
			return false, err
		}
	}
}

// parseRetryAfter reads a Retry-After of delay seconds; dates are ignored.
func parseRetryAfter(v string) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// pathf builds a path with its variable parts escaped.
func pathf(format string, args ...any) string {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = url.PathEscape(s)
		}
	}
	return fmt.Sprintf(format, args...)
}

// Healthy reports whether the node's process serves (GET /healthz); an
// error of kind unavailable when it does not answer.
func (c *Client) Healthy(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil)
	return err
}

// Ready reports whether the node's store is open and writable (GET
// /readyz): nil when ready, leasehold.ErrUnavailable when not. It asks
// once, without retries, since the answer is the point.
func (c *Client) Ready(ctx context.Context) error {
	once := *c
	once.Retry.Attempts = 1
	_, err := once.do(ctx, http.MethodGet, "/readyz", nil, nil)
	return err
}
