package main

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/leasehold/leasehold/client"
)

// The snapshot side of the suite (scripts/bench-snapshot.sh):
//
//	benchload snapfile -out FILE -mib N
//	benchload snapshot -url URL -token T -group G -fence F -file FILE -op put|get
//	benchload fileserve -file FILE -listen 127.0.0.1:0
//
// snapfile writes the window to move, snapshot moves it through
// client as a worker does, and fileserve serves the same file with
// net/http alone, the most a download over this host's loopback gets.

// transfer is one snapshot transfer's figures; JSON for the script.
type transfer struct {
	Op       string  `json:"op"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MiBPerS  float64 `json:"mib_per_s"`
	SHA256   string  `json:"sha256"`
	Verified bool    `json:"verified"`
}

// snapFile writes mib MiB of pseudo-random bytes as gzip with stored
// (uncompressed) blocks: whole gzip, as the node requires of an upload sent
// as gzip, and bytes nothing on the way can make smaller. It is as fast as
// the disk takes it, where gzip -1 of /dev/urandom takes a minute a GiB.
func snapFile(out string, mib int64) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.NoCompression)
	if err != nil {
		return err
	}
	src := rand.NewChaCha8([32]byte{'l', 'e', 'a', 's', 'e', 'h', 'o', 'l', 'd'})
	buf := make([]byte, 1<<20)
	for range mib {
		src.Read(buf)
		if _, err := zw.Write(buf); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// snapshotTransfer uploads file as group's window snapshot (op put) or
// downloads the stored one (op get) through client, timed. The upload
// names the file's sha-256 (computed before the clock starts; -digest=false
// leaves it out, to show what the node's check costs), so the node refuses
// it unless every byte arrived, and the recorded sha-256 is compared with
// the file's in any case; the download checks the node's
// digest as it reaches the end.
func snapshotTransfer(url, token string, group, fence, next int64, file, op string, digest bool) error {
	ctx := context.Background()
	c := client.New(url, token)
	var t transfer
	t.Op = op
	switch op {
	case "put":
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		sum := h.Sum(nil)
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		start := time.Now()
		o := client.SnapshotUpload{Gzip: true}
		if digest {
			o.Digest = sum
		}
		snap, err := c.PutSnapshot(ctx, group, fence, next, f, o)
		if err != nil {
			return err
		}
		t.Seconds = time.Since(start).Seconds()
		t.Bytes, t.SHA256 = snap.Size, snap.SHA256
		if t.SHA256 != hex.EncodeToString(sum) {
			return fmt.Errorf("the node recorded sha-256 %s for a file of %x", t.SHA256, sum)
		}
		t.Verified = digest
	case "get":
		start := time.Now()
		r, err := c.GetSnapshot(ctx, group, fence, 0)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("group %d has no snapshot", group)
		}
		defer r.Close()
		// Through a 1 MiB buffer: io.Discard's own ReadFrom reads 8 KiB at
		// a time, which would be the limit measured.
		n, err := io.CopyBuffer(onlyWriter{io.Discard}, r, make([]byte, 1<<20))
		if err != nil {
			return err // a digest mismatch fails the last read
		}
		t.Seconds = time.Since(start).Seconds()
		t.Bytes, t.SHA256 = n, r.SHA256
		if n != r.Size || r.SHA256 == "" {
			return fmt.Errorf("downloaded %d bytes of %d (digest %q)", n, r.Size, r.SHA256)
		}
		t.Verified = true
	default:
		return fmt.Errorf("snapshot -op %q: want put or get", op)
	}
	t.MiBPerS = float64(t.Bytes) / t.Seconds / (1 << 20)
	return json.NewEncoder(os.Stdout).Encode(t)
}

// onlyWriter hides ReadFrom, so that a copy goes through the 1 MiB buffer
// it is given.
type onlyWriter struct{ io.Writer }

// fileServe serves file to every GET on addr with http.ServeContent and
// nothing else, until killed: the same download as the node's (sendfile
// from the page cache) without the node, so a client timed against both
// shows what the node costs over the most this host's loopback carries.
func fileServe(file, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An *os.File of its own per request: ServeContent seeks it, and
		// only an *os.File goes out by sendfile.
		f, err := os.Open(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		http.ServeContent(w, r, "", fi.ModTime(), f)
	}))
}
