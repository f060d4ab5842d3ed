package web_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/web"
)

// TestPprof: a CPU profile of a second and a heap profile come back to the
// admin token as gzipped pprof protobufs, the CPU profile whole although it
// lasts longer than a JSON request may take to arrive; without a token the
// answer is 401 and with a node's token 403, and no profile is taken.
func TestPprof(t *testing.T) {
	t.Parallel()
	n := slowNode(t, web.Options{JSONReadTimeout: 200 * time.Millisecond})
	a := api{t, n.URL + "/api/v1"}
	node := a.j("POST", "/nodes", n.AdminToken, `{"name":"w1"}`).json(t)["token"].(string)
	get := func(path, token string) (int, []byte, time.Duration) {
		t.Helper()
		req, err := http.NewRequest("GET", n.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		start := time.Now()
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b, time.Since(start)
	}
	for _, c := range []struct {
		name, path string
		// strings of the profile's string table that say which it is
		want []string
		took time.Duration // at least
	}{
		{"CPU", "/debug/pprof/profile?seconds=1", []string{"samples", "cpu", "nanoseconds"}, time.Second},
		{"Heap", "/debug/pprof/heap", []string{"alloc_objects", "inuse_space", "bytes"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cr := range []struct {
				name, token string
				want        int
			}{{"NoToken", "", 401}, {"NodeToken", node, 403}} {
				if status, b, took := get(c.path, cr.token); status != cr.want || took >= time.Second {
					t.Fatalf("%s: got %d in %s (%.100q), want %d at once", cr.name, status, took, b, cr.want)
				}
			}
			status, b, took := get(c.path, n.AdminToken)
			if status != 200 {
				t.Fatalf("admin token: got %d %.200q", status, b)
			}
			if took < c.took {
				t.Fatalf("the profile took %s, want at least %s", took, c.took)
			}
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("the profile is not gzip: %v (%.40q)", err, b)
			}
			raw, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("the profile is not whole gzip: %v", err)
			}
			if err := pprofFields(raw); err != nil {
				t.Fatalf("not a pprof protobuf: %v", err)
			}
			for _, s := range c.want {
				if !bytes.Contains(raw, []byte(s)) {
					t.Errorf("the profile's strings lack %q", s)
				}
			}
		})
	}
}

// pprofFields checks that b is a protobuf message whose every top-level
// field is one of profile.proto's Profile (fields 1 to 14, each of the wire
// type it is declared with) and that it has samples' types (field 1) and a
// string table (field 6).
func pprofFields(b []byte) error {
	seen := map[uint64]bool{}
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("a bad tag")
		}
		b = b[n:]
		field, wire := tag>>3, tag&7
		if field < 1 || field > 14 {
			return fmt.Errorf("field %d is not a Profile's", field)
		}
		seen[field] = true
		switch wire {
		case 0: // varint
			if _, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("field %d: a bad varint", field)
			}
			b = b[n:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("field %d: a bad length", field)
			}
			b = b[n+int(l):]
		default:
			return fmt.Errorf("field %d has wire type %d", field, wire)
		}
	}
	if !seen[1] || !seen[6] {
		return fmt.Errorf("no sample types or no string table (fields %v)", seen)
	}
	return nil
}
