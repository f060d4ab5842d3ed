package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
)

// Snapshots are streamed: an upload reads its body as it sends it and a
// download hands out the answer's body, so memory stays flat for windows of
// any size.

// SnapshotUpload describes a snapshot body.
type SnapshotUpload struct {
	// Gzip says the body is gzip, stored by the node as is; anything else
	// the node compresses itself.
	Gzip bool
	// Length is the body's length in bytes; 0 means unknown, in which case
	// it is taken from a *os.File or a reader with a Len method, or the body
	// is sent chunked.
	Length int64
	// Digest, when set, is the sha-256 of the body as sent; the node refuses
	// a body that does not match it and keeps the old snapshot.
	Digest []byte
	// Force, for an operator's upload (PutGroupSnapshot), lets a window
	// stand that makes the node index done ranges again; without it such
	// an upload is leasehold.ErrConflict naming how many.
	Force bool
}

// PutSnapshot streams the window snapshot of group as its holder, covering
// every id below next, and returns what the node stored. A body that can
// seek is rewound and sent again on a connection error or 503; any other
// is sent once. The body is not closed. The node keeps the old snapshot whole on any failure; a
// body over its limit is leasehold.ErrTooLarge, a full disk
// leasehold.ErrNoSpace.
func (c *Client) PutSnapshot(ctx context.Context, group, fence, next int64, body io.Reader, o SnapshotUpload) (*leasehold.Snapshot, error) {
	path := pathf("/api/v1/leases/%d/snapshot?fence=%d&next=%d", group, fence, next)
	return c.putSnapshot(ctx, path, body, o, false)
}

// PutGroupSnapshot seeds or restores the window snapshot of group name as
// an operator (admin token). The node refuses it with leasehold.ErrConflict
// while the group is held. The body is sent only once the node has
// looked at the call (Expect: 100-continue), so a refusal comes before
// a byte of it is read.
func (c *Client) PutGroupSnapshot(ctx context.Context, name string, next int64, body io.Reader, o SnapshotUpload) (*leasehold.Snapshot, error) {
	path := pathf("/api/v1/groups/%s/snapshot", name) + "?next=" + strconv.FormatInt(next, 10)
	if o.Force {
		path += "&force=true"
	}
	return c.putSnapshot(ctx, path, body, o, true)
}

// putSnapshot sends a snapshot body to path; with expect, only after the
// node answered 100 Continue (it refuses a held group, or one whose done
// ranges the window would undo, before reading the body).
func (c *Client) putSnapshot(ctx context.Context, path string, body io.Reader, o SnapshotUpload, expect bool) (*leasehold.Snapshot, error) {
	h := http.Header{}
	if expect {
		h.Set("Expect", "100-continue")
	}
	if o.Gzip {
		h.Set("Content-Type", "application/gzip")
	} else {
		h.Set("Content-Type", "application/octet-stream")
	}
	if len(o.Digest) > 0 {
		h.Set("Repr-Digest", FormatReprDigest(o.Digest))
	}
	length := o.Length
	if length <= 0 {
		length = bodyLength(body)
	}
	resp, err := c.send(ctx, request{method: http.MethodPut, path: path, header: h, body: body, length: length})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var s leasehold.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, leasehold.Wrap(leasehold.KindInternal, err, "PUT snapshot: bad answer: %v", err)
	}
	return &s, nil
}

// bodyLength is the length of what is left of body, or -1 (chunked).
func bodyLength(body io.Reader) int64 {
	switch b := body.(type) {
	case interface{ Len() int }:
		return int64(b.Len())
	case *os.File:
		fi, err := b.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		pos, err := b.Seek(0, io.SeekCurrent)
		if err != nil {
			return -1
		}
		return fi.Size() - pos
	}
	return -1
}

// SnapshotReader is a snapshot download: the stored gzip bytes from Offset
// on. A connection broken in the middle is resumed with a Range request for
// the rest of the same snapshot (checked by its ETag). When the download
// starts at 0 and the node sent the digest, reading to the end checks the
// sha-256 and fails the last Read on a mismatch.
type SnapshotReader struct {
	// Next is the id the window covers up to (exclusive).
	Next int64
	// Size is the whole stored snapshot's length in bytes, -1 if unknown.
	Size int64
	// SHA256 is the hex sha-256 of the stored bytes, empty if not sent.
	SHA256 string
	// ETag identifies this version of the snapshot.
	ETag string
	// Offset is where this download started.
	Offset int64

	c    *Client
	ctx  context.Context
	path string
	body io.ReadCloser
	pos  int64 // bytes of the snapshot read so far, Offset included
	hash hash.Hash
	// broken counts resumes in a row that brought no byte.
	broken int
	done   bool
}

// GetSnapshot downloads the window snapshot of group as its holder, from
// byte offset on. It returns nil, nil when the group has no snapshot.
func (c *Client) GetSnapshot(ctx context.Context, group, fence, offset int64) (*SnapshotReader, error) {
	return c.getSnapshot(ctx, pathf("/api/v1/leases/%d/snapshot?fence=%d", group, fence), offset)
}

// GetGroupSnapshot downloads the stored snapshot of group name as an
// operator (admin token), from byte offset on. It returns nil, nil when the
// group has no snapshot.
func (c *Client) GetGroupSnapshot(ctx context.Context, name string, offset int64) (*SnapshotReader, error) {
	return c.getSnapshot(ctx, pathf("/api/v1/groups/%s/snapshot", name), offset)
}

func (c *Client) getSnapshot(ctx context.Context, path string, offset int64) (*SnapshotReader, error) {
	r := &SnapshotReader{c: c, ctx: ctx, path: path, Offset: offset, pos: offset, Size: -1}
	resp, err := r.open("")
	if err != nil || resp == nil {
		return nil, err
	}
	r.body = resp.Body
	r.Next, _ = strconv.ParseInt(resp.Header.Get("X-Snapshot-Next"), 10, 64)
	r.ETag = resp.Header.Get("ETag")
	r.SHA256 = parseReprDigest(resp.Header.Get("Repr-Digest"))
	r.Size = totalSize(resp, offset)
	if offset == 0 && r.SHA256 != "" {
		r.hash = sha256.New()
	}
	return r, nil
}

// open asks for the snapshot from r.pos on. It returns nil, nil on 204.
// etag, when set, makes the node send the rest only of that version.
func (r *SnapshotReader) open(etag string) (*http.Response, error) {
	h := http.Header{}
	h.Set("Accept", "application/gzip")
	if r.pos > 0 {
		h.Set("Range", fmt.Sprintf("bytes=%d-", r.pos))
		if etag != "" {
			h.Set("If-Range", etag)
		}
	}
	resp, err := r.c.send(r.ctx, request{method: http.MethodGet, path: r.path, header: h})
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNoContent:
		resp.Body.Close()
		if r.pos > 0 && etag != "" {
			return nil, leasehold.Errorf(leasehold.KindConflict, "snapshot was removed during the download")
		}
		return nil, nil
	case r.pos > 0 && resp.StatusCode != http.StatusPartialContent:
		resp.Body.Close()
		if etag != "" {
			return nil, leasehold.Errorf(leasehold.KindConflict, "snapshot changed during the download; start again")
		}
		return nil, leasehold.Errorf(leasehold.KindInternal, "node ignored the Range of a resumed download (%s)", resp.Status)
	}
	return resp, nil
}

// Read reads the snapshot, resuming a broken connection where it broke.
func (r *SnapshotReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	for {
		if r.body == nil {
			if err := r.resume(); err != nil {
				return 0, err
			}
		}
		n, err := r.body.Read(p)
		if n > 0 {
			r.pos += int64(n)
			r.broken = 0
			if r.hash != nil {
				r.hash.Write(p[:n])
			}
		}
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, io.EOF) && (r.Size < 0 || r.pos >= r.Size):
			r.done = true
			if err := r.check(); err != nil {
				return n, err
			}
			return n, io.EOF
		case r.ctx.Err() != nil:
			return n, context.Cause(r.ctx)
		}
		// Broken (or ended short): drop this body and resume on the next
		// loop, or return what was read and resume on the next Read.
		r.body.Close()
		r.body = nil
		if n > 0 {
			return n, nil
		}
	}
}

// resume opens the rest of the same snapshot after a break.
func (r *SnapshotReader) resume() error {
	if r.broken >= max(r.c.Retry.Attempts, 1) {
		return leasehold.Errorf(leasehold.KindUnavailable, "snapshot download broke at byte %d and did not resume", r.pos)
	}
	if err := r.c.Retry.Sleep(r.ctx, r.broken, 0); err != nil {
		return err
	}
	r.broken++
	resp, err := r.open(r.ETag)
	if err != nil {
		return err
	}
	if resp == nil {
		return leasehold.Errorf(leasehold.KindConflict, "snapshot was removed during the download")
	}
	if e := resp.Header.Get("ETag"); r.ETag != "" && e != "" && e != r.ETag {
		resp.Body.Close()
		return leasehold.Errorf(leasehold.KindConflict, "snapshot changed during the download; start again")
	}
	r.body = resp.Body
	return nil
}

// check compares the digest of a whole download with the node's.
func (r *SnapshotReader) check() error {
	if r.Size >= 0 && r.pos != r.Size {
		return leasehold.Errorf(leasehold.KindInternal, "snapshot download got %d bytes of %d", r.pos, r.Size)
	}
	if r.hash == nil {
		return nil
	}
	if got := hex.EncodeToString(r.hash.Sum(nil)); got != r.SHA256 {
		return leasehold.Errorf(leasehold.KindInternal, "snapshot digest mismatch: got sha-256 %s, node has %s", got, r.SHA256)
	}
	return nil
}

// Close ends the download.
func (r *SnapshotReader) Close() error {
	r.done = true
	if r.body == nil {
		return nil
	}
	err := r.body.Close()
	r.body = nil
	return err
}

// totalSize is the whole snapshot's length from a 200's Content-Length or a
// 206's Content-Range, -1 if the answer does not say.
func totalSize(resp *http.Response, offset int64) int64 {
	if resp.StatusCode == http.StatusPartialContent {
		cr := resp.Header.Get("Content-Range") // bytes a-b/total
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if n, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				return n
			}
		}
		if resp.ContentLength >= 0 {
			return offset + resp.ContentLength
		}
		return -1
	}
	return resp.ContentLength
}

// parseReprDigest returns the hex sha-256 of a Repr-Digest header
// ("sha-256=:<base64>:", maybe among other algorithms), or "".
func parseReprDigest(v string) string {
	for part := range strings.SplitSeq(v, ",") {
		alg, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !strings.EqualFold(alg, "sha-256") {
			continue
		}
		val = strings.Trim(val, ":")
		b, err := base64.StdEncoding.DecodeString(val)
		if err != nil || len(b) != sha256.Size {
			return ""
		}
		return hex.EncodeToString(b)
	}
	return ""
}

// FormatReprDigest is the Repr-Digest value of a sha-256 sum.
func FormatReprDigest(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}
