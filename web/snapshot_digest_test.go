package web_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestGzipUploadDigest: a gzip upload's digest covers every byte sent,
// wherever the gzip stream breaks off or ends (the decompressor hashes what
// it takes and the upload the rest). With the body's true sha-256 a broken
// stream is refused as not whole gzip (400), never as a digest mismatch;
// with another sha-256 it is unprocessable (422); only the whole stream is
// stored.
func TestGzipUploadDigest(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{SnapshotMaxBytes: 64 << 20})
	put := fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=", w.gid, w.fence)
	// Random bytes: stored blocks, several MiB, so the body crosses the
	// pipe to the decompressor in many pieces.
	raw := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{1}).Read(raw)
	window := gz(t, raw)
	cases := []struct {
		name string
		body []byte
		want int
	}{
		{"Whole", window, 201},
		{"TrailingBytes", append(bytes.Clone(window), bytes.Repeat([]byte("x"), 5<<20)...), 400},
		{"TrailingGzip", append(bytes.Clone(window), 0x1f, 0x8b), 400},
		{"CutInHeader", window[:5], 400},
		{"CutEarly", window[:len(window)/7], 400},
		{"CutInTrailer", window[:len(window)-3], 400},
		{"BrokenHeader", append([]byte{0x1f, 0x8c}, window[2:]...), 400},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sum := sha256.Sum256(c.body)
			other := sha256.Sum256(append(bytes.Clone(c.body), 0))
			for _, d := range []struct {
				name string
				sum  []byte
				want int
			}{{"OtherDigest", other[:], 422}, {"TrueDigest", sum[:], c.want}} {
				digest := "sha-256=:" + base64.StdEncoding.EncodeToString(d.sum) + ":"
				a := w.do("PUT", put+fmt.Sprint(101+i), w.w1, bytes.NewReader(c.body), "Content-Type", "application/gzip", "Repr-Digest", digest)
				if a.status != d.want {
					t.Fatalf("%s: got %d %.300s, want %d", d.name, a.status, a.body, d.want)
				}
			}
		})
	}
}
