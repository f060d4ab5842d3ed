package web_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestSnapshotUploadLosesLease: a holder's snapshot upload is streamed, so
// its lease can be lost after the upload's early holder check passed and
// while the body is still arriving. The lease is lost mid-body (taken over
// by another node after the TTL, or released by the uploader itself); the
// upload must then be refused with 409 lease_lost when its body ends, and
// leave no record, no stored file and no .part file behind: the catalog is
// as the loss left it and the group's window is still the one stored
// before, byte for byte, for whoever reads it next.
func TestSnapshotUploadLosesLease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// lose makes the uploader's lease lost; it returns who reads the
		// window after (a token and the GET path).
		lose func(w *fenceWorld) (tok, path string)
	}{
		{"TakenOver", func(w *fenceWorld) (string, string) {
			w.clock.Advance(fenceTTL + time.Second)
			l := w.j("POST", "/leases", w.w2, "")
			if l.status != 200 || l.json(w.t)["takeover"] != true {
				w.t.Fatalf("takeover: %d %s", l.status, l.body)
			}
			return w.w2, fmt.Sprintf("/leases/%d/snapshot?fence=%d", w.gid, num(l.json(w.t), "fence"))
		}},
		{"Released", func(w *fenceWorld) (string, string) {
			w.release(w.w1, w.first)
			return w.admin, "/groups/g/snapshot"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newFenceWorld(t)
			before := w.view.files(t)

			w.storing.Drain() // newFenceWorld's own upload
			body, send := io.Pipe()
			type result struct {
				status int
				code   string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				req, err := http.NewRequest("PUT", fmt.Sprintf("%s/leases/%d/snapshot?fence=%d&next=501", w.url, w.gid, w.first), body)
				if err != nil {
					done <- result{err: err}
					return
				}
				req.Header.Set("Authorization", "Bearer "+w.w1)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					done <- result{err: err}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				done <- result{status: resp.StatusCode, code: answer{body: b}.code()}
			}()
			chunk := bytes.Repeat([]byte("window state "), 1<<14)
			if _, err := send.Write(chunk); err != nil {
				t.Fatalf("sending the first part: %v", err)
			}
			// The upload has passed its early check once its body is stored.
			if g := w.storing.Wait(t, "the upload's body stored"); g != w.gid {
				t.Fatalf("the body stored is group %d's, want %d's", g, w.gid)
			}

			reader, path := tc.lose(w)
			lost := w.rows()
			if _, err := send.Write(chunk); err != nil {
				t.Fatalf("sending the rest: %v", err)
			}
			send.Close()
			var got result
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the upload was not answered")
			}
			if got.err != nil {
				t.Fatalf("upload: %v", got.err)
			}
			if got.status != 409 || got.code != "lease_lost" {
				t.Errorf("upload after its lease was lost: got %d %q, want 409 \"lease_lost\"", got.status, got.code)
			}
			sameCatalog(t, lost, w.rows())
			if after := w.view.files(t); after != before {
				t.Errorf("snapshot files: got %s, want %s as before the upload (no new file, no .part)", after, before)
			}
			a := w.do("GET", path, reader, nil)
			if a.status != 200 || !bytes.Equal(a.body, w.window) || a.header.Get("X-Snapshot-Next") != "1" {
				t.Errorf("the window read after: %d, next %q, %d bytes; want 200, next 1 and the %d bytes stored before",
					a.status, a.header.Get("X-Snapshot-Next"), len(a.body), len(w.window))
			}
		})
	}
}
