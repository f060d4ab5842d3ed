package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// fastRetry keeps the unit tests' backoff short.
var fastRetry = client.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 4}

func newClient(url string) *client.Client {
	c := client.New(url, "tok")
	c.Retry = fastRetry
	return c
}

// canned answers every request with status and body.
func canned(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   *leasehold.Error
		msg    string
	}{
		{"LeaseLost", 409, `{"error":{"code":"lease_lost","message":"group 7 is held by node 3 at fence 12"}}`, leasehold.ErrLeaseLost, "group 7 is held by node 3 at fence 12"},
		{"Conflict", 409, `{"error":{"code":"conflict","message":"name taken"}}`, leasehold.ErrConflict, "name taken"},
		{"NotFound", 404, `{"error":{"code":"not_found","message":"no group x"}}`, leasehold.ErrNotFound, "no group x"},
		{"Unauthorized", 401, `{"error":{"code":"unauthorized","message":"bad token"}}`, leasehold.ErrUnauthorized, "bad token"},
		{"Forbidden", 403, `{"error":{"code":"forbidden","message":"admin only"}}`, leasehold.ErrForbidden, "admin only"},
		{"Invalid", 400, `{"error":{"code":"bad_request","message":"bad name"}}`, leasehold.ErrInvalid, "bad name"},
		{"TooLarge", 413, `{"error":{"code":"too_large","message":"body over 1 MiB"}}`, leasehold.ErrTooLarge, "body over 1 MiB"},
		{"Unprocessable", 422, `{"error":{"code":"unprocessable","message":"next goes backwards"}}`, leasehold.ErrUnprocessable, "next goes backwards"},
		{"NoSpace", 507, `{"error":{"code":"no_space","message":"disk full"}}`, leasehold.ErrNoSpace, "disk full"},
		{"Unavailable", 503, `{"error":{"code":"unavailable","message":"shutting down"}}`, leasehold.ErrUnavailable, "shutting down"},
		{"NoBodyByStatus", 404, ``, leasehold.ErrNotFound, ""},
		{"HTMLByStatus", 409, `<html>proxy</html>`, leasehold.ErrConflict, ""},
		{"UnknownStatus", 500, `oops`, leasehold.ErrInternal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := canned(t, tt.status, tt.body)
			_, err := newClient(srv.URL).Heartbeat(context.Background(), 7, 12)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v (kind %s), want kind %s", err, leasehold.KindOf(err), tt.want.Kind)
			}
			var herr *client.HTTPError
			if !errors.As(err, &herr) || herr.StatusCode != tt.status || herr.Path != "/api/v1/leases/7/heartbeat" {
				t.Errorf("cause: got %+v, want status %d on the heartbeat path", herr, tt.status)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("message: got %q, want %q", err.Error(), tt.msg)
			}
			// Distinct kinds stay distinct: a conflict is not a lost lease.
			if tt.want != leasehold.ErrLeaseLost && errors.Is(err, leasehold.ErrLeaseLost) {
				t.Errorf("%v matches ErrLeaseLost", err)
			}
		})
	}
}

// counting answers with fail for the first n requests, then with ok.
func counting(t *testing.T, n int64, fail, ok http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			fail(w, r)
			return
		}
		ok(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// hangUp breaks the connection without an answer.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestRetry(t *testing.T) {
	ttl := status(200, `{"ttl_s":30}`)
	t.Run("Unavailable", func(t *testing.T) {
		srv, calls := counting(t, 2, status(503, `{"error":{"code":"unavailable","message":"busy"}}`), ttl)
		got, err := newClient(srv.URL).Heartbeat(context.Background(), 1, 1)
		if err != nil || got != 30*time.Second {
			t.Fatalf("got %v, %v; want 30s after retries", got, err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("calls: got %d, want 3", n)
		}
	})
	t.Run("ConnectionBroken", func(t *testing.T) {
		srv, calls := counting(t, 2, hangUp, ttl)
		if _, err := newClient(srv.URL).Heartbeat(context.Background(), 1, 1); err != nil {
			t.Fatal(err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("calls: got %d, want 3", n)
		}
	})
	t.Run("GivesUp", func(t *testing.T) {
		srv, calls := counting(t, 100, status(503, `{"error":{"code":"unavailable","message":"busy"}}`), ttl)
		_, err := newClient(srv.URL).Heartbeat(context.Background(), 1, 1)
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("got %v, want unavailable", err)
		}
		if n := calls.Load(); n != int64(fastRetry.Attempts) {
			t.Errorf("calls: got %d, want %d", n, fastRetry.Attempts)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		// A port nobody listens on: the dial fails every time.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = newClient("http://"+addr).Heartbeat(context.Background(), 1, 1)
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("got %v, want unavailable", err)
		}
	})
	for _, code := range []int{400, 409, 422, 500} {
		t.Run(fmt.Sprintf("NotOn%d", code), func(t *testing.T) {
			srv, calls := counting(t, 100, status(code, `{"error":{"code":"x","message":"no"}}`), ttl)
			if _, err := newClient(srv.URL).Heartbeat(context.Background(), 1, 1); err == nil {
				t.Fatal("got nil error")
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("calls: got %d, want 1 (no retry)", n)
			}
		})
	}
	t.Run("ContextEnds", func(t *testing.T) {
		srv, _ := counting(t, 1000, status(503, ``), ttl)
		c := newClient(srv.URL)
		c.Retry = client.Backoff{Min: time.Hour, Max: time.Hour, Attempts: 10}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := c.Heartbeat(ctx, 1, 1)
			done <- err
		}()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("StreamedBodyOnce", func(t *testing.T) {
		// A body that cannot seek is spent by the first try.
		srv, calls := counting(t, 100, status(503, ``), status(201, `{}`))
		body := io.MultiReader(strings.NewReader("window"))
		_, err := newClient(srv.URL).PutSnapshot(context.Background(), 1, 1, 5, body, client.SnapshotUpload{})
		if !errors.Is(err, leasehold.ErrUnavailable) {
			t.Fatalf("got %v, want unavailable", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("calls: got %d, want 1", n)
		}
	})
	t.Run("SeekableBodyAgain", func(t *testing.T) {
		var bodies []string
		srv, _ := counting(t, 2, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, string(b))
			w.WriteHeader(503)
		}, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, string(b))
			w.WriteHeader(201)
			io.WriteString(w, `{"next":5,"size":6,"sha256":"ab"}`)
		})
		s, err := newClient(srv.URL).PutSnapshot(context.Background(), 1, 1, 5, strings.NewReader("window"), client.SnapshotUpload{})
		if err != nil || s.Next != 5 {
			t.Fatalf("got %+v, %v", s, err)
		}
		if want := []string{"window", "window", "window"}; fmt.Sprint(bodies) != fmt.Sprint(want) {
			t.Errorf("bodies: got %q, want %q", bodies, want)
		}
	})
}

func TestNothingToDo(t *testing.T) {
	srv := canned(t, http.StatusNoContent, "")
	c := newClient(srv.URL)
	ctx := context.Background()
	if g, err := c.Lease(ctx); g != nil || err != nil {
		t.Errorf("Lease: got %v, %v; want nil, nil", g, err)
	}
	if r, err := c.Next(ctx, 1, 1); r != nil || err != nil {
		t.Errorf("Next: got %v, %v; want nil, nil", r, err)
	}
	if s, err := c.GetSnapshot(ctx, 1, 1, 0); s != nil || err != nil {
		t.Errorf("GetSnapshot: got %v, %v; want nil, nil", s, err)
	}
}

func TestGrantDecoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/api/v1/leases" || r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("got %s %s auth %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		}
		io.WriteString(w, `{"group":{"id":3,"name":"alt.test","priority":2},"fence":12,
			"rules":{"version":4,"body":{"spam":["x"]}},"snapshot":{"next":1001,"size":77,"sha256":"ab"},"ttl_s":1.5}`)
	}))
	defer srv.Close()
	g, err := newClient(srv.URL).Lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g.Group.ID != 3 || g.Group.Name != "alt.test" || g.Fence != 12 || g.TTL != 1500*time.Millisecond ||
		g.Rules.Version != 4 || string(g.Rules.Body) != `{"spam":["x"]}` || g.Snapshot == nil || g.Snapshot.Next != 1001 {
		t.Errorf("got %+v", g)
	}
}

// snapshotServer serves blob as a snapshot with the headers the API names,
// breaking the connection after cut bytes of every answer that starts
// below cutBelow.
func snapshotServer(t *testing.T, blob []byte, cut int, cutBelow int64) (*httptest.Server, *[]string) {
	t.Helper()
	sum := sha256.Sum256(blob)
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ranges = append(ranges, r.Header.Get("Range"))
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:8])+`"`)
		w.Header().Set("Repr-Digest", client.FormatReprDigest(sum[:]))
		w.Header().Set("X-Snapshot-Next", "1001")
		w.Header().Set("Content-Type", "application/gzip")
		var start int64
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &start)
		if start >= cutBelow {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(blob))
			return
		}
		// Promise the whole rest, send cut bytes of it, hang up.
		if start > 0 {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(blob)-1, len(blob)))
			w.Header().Set("Content-Length", fmt.Sprint(int64(len(blob))-start))
			w.WriteHeader(http.StatusPartialContent)
		} else {
			w.Header().Set("Content-Length", fmt.Sprint(len(blob)))
		}
		w.Write(blob[start : start+int64(cut)])
		w.(http.Flusher).Flush()
		hangUp(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &ranges
}

func TestSnapshotDownload(t *testing.T) {
	blob := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	t.Run("ResumesByRange", func(t *testing.T) {
		srv, ranges := snapshotServer(t, blob, 10000, 30000)
		sr, err := newClient(srv.URL).GetSnapshot(context.Background(), 1, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(sr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, blob) {
			t.Fatalf("got %d bytes, want the %d of the snapshot", len(got), len(blob))
		}
		if sr.Next != 1001 || sr.Size != int64(len(blob)) {
			t.Errorf("got next %d size %d", sr.Next, sr.Size)
		}
		want := []string{"", "bytes=10000-", "bytes=20000-", "bytes=30000-"}
		if fmt.Sprint(*ranges) != fmt.Sprint(want) {
			t.Errorf("ranges asked: got %q, want %q", *ranges, want)
		}
	})
	t.Run("DigestMismatch", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sum := sha256.Sum256([]byte("something else"))
			w.Header().Set("Repr-Digest", client.FormatReprDigest(sum[:]))
			w.Write(blob)
		}))
		defer srv.Close()
		sr, err := newClient(srv.URL).GetGroupSnapshot(context.Background(), "alt.test", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(sr); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
			t.Fatalf("got %v, want a digest mismatch", err)
		}
	})
	t.Run("FromOffset", func(t *testing.T) {
		srv, ranges := snapshotServer(t, blob, 0, 0)
		sr, err := newClient(srv.URL).GetGroupSnapshot(context.Background(), "alt.test", 60000)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(sr)
		if err != nil || !bytes.Equal(got, blob[60000:]) {
			t.Fatalf("got %d bytes, %v; want the last %d", len(got), err, len(blob)-60000)
		}
		if sr.Size != int64(len(blob)) || (*ranges)[0] != "bytes=60000-" {
			t.Errorf("got size %d, ranges %q", sr.Size, *ranges)
		}
	})
	t.Run("ChangedWhileBroken", func(t *testing.T) {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("Content-Length", fmt.Sprint(len(blob)))
				w.Write(blob[:1000])
				w.(http.Flusher).Flush()
				hangUp(w, r)
				return
			}
			// A new version: If-Range does not match, the whole body comes.
			w.Header().Set("ETag", `"v2"`)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(blob))
		}))
		defer srv.Close()
		sr, err := newClient(srv.URL).GetGroupSnapshot(context.Background(), "g", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(sr); !errors.Is(err, leasehold.ErrConflict) {
			t.Fatalf("got %v, want conflict", err)
		}
	})
}

func TestSnapshotUpload(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		if r.URL.Path != "/api/v1/leases/3/snapshot" || r.URL.Query().Get("fence") != "9" || r.URL.Query().Get("next") != "501" {
			t.Errorf("got %s", r.URL)
		}
		if got, want := r.Header.Get("Repr-Digest"), client.FormatReprDigest(sum[:]); got != want {
			t.Errorf("Repr-Digest: got %q, want %q", got, want)
		}
		if r.Header.Get("Content-Type") != "application/gzip" || r.ContentLength != int64(len(b)) {
			t.Errorf("got type %q length %d", r.Header.Get("Content-Type"), r.ContentLength)
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"next":501,"size":%d,"sha256":"%x"}`, len(b), sum)
	}))
	defer srv.Close()
	body := []byte("\x1f\x8bnot really gzip")
	sum := sha256.Sum256(body)
	s, err := newClient(srv.URL).PutSnapshot(context.Background(), 3, 9, 501, bytes.NewReader(body),
		client.SnapshotUpload{Gzip: true, Digest: sum[:]})
	if err != nil {
		t.Fatal(err)
	}
	if s.Next != 501 || s.Size != int64(len(body)) || s.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("got %+v", s)
	}
}

func TestBackoff(t *testing.T) {
	b := client.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for n := range 10 {
		d := b.Delay(n)
		top := min(100*time.Millisecond<<n, time.Second)
		if d < b.Min || d > top || d < top/2 {
			t.Errorf("Delay(%d) = %v, want in [%v, %v] and at least Min", n, d, max(top/2, b.Min), top)
		}
	}
}

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }

func TestSnapshotUploadFileRetried(t *testing.T) {
	// A file body survives a retry: the client neither closes it nor
	// sends it short the second time.
	var bodies []string
	srv, _ := counting(t, 1, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		w.WriteHeader(503)
	}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		w.WriteHeader(201)
		io.WriteString(w, `{"next":1,"size":6}`)
	})
	path := t.TempDir() + "/w"
	if err := os.WriteFile(path, []byte("window"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := newClient(srv.URL).PutSnapshot(context.Background(), 1, 1, 1, f, client.SnapshotUpload{}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(bodies) != "[window window]" {
		t.Errorf("bodies: got %q", bodies)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Errorf("the file was closed: %v", err)
	}
}
