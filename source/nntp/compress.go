package nntp

import (
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"slices"

	"github.com/leasehold/leasehold/source/nntp/internal/inflate"
)

// StatusCompressionActive is RFC 8054's answer to COMPRESS DEFLATE: from
// the byte after its line on, both directions are a raw DEFLATE stream.
const StatusCompressionActive = 206

// compress asks the server for COMPRESS DEFLATE when its CAPABILITIES
// list it, after the login so the password never enters the compressed
// stream (RFC 8054 §2.2.2), and turns it on when the server answers 206.
// A server that does not list it, or answers anything else (403: it
// could not, 502: compression already active, e.g. TLS compression),
// is read uncompressed: a refusal is no error. A connection that fails
// on the way is an error like any other, and dialling tries again.
func (c *Client) compress(cn *conn) error {
	caps, err := cn.capabilities()
	if err != nil {
		return err
	}
	if !slices.Contains(caps["COMPRESS"], "DEFLATE") {
		c.noteCompress("not offered")
		return nil
	}
	code, text, err := cn.cmd("COMPRESS DEFLATE")
	if err != nil {
		return err
	}
	answer := fmt.Sprintf("%d %s", code, clip(text))
	if code != StatusCompressionActive {
		c.noteCompress(answer)
		return nil
	}
	if cn.tp.R.Buffered() > 0 {
		// Whatever follows 206 is compressed; bytes already read as
		// text would be lost to the decompressor.
		return &protocolError{errors.New("nntp: COMPRESS DEFLATE: the server sent data after 206 before the compressed stream")}
	}
	w, err := flate.NewWriter(cn.nc, flate.BestSpeed)
	if err != nil {
		return err
	}
	// Servers end each answer with a partial flush (INN: an empty
	// fixed-code block, not byte-aligned), so the reader gives out what
	// every block decoded at its end (package inflate).
	r := inflate.NewReader(cn.nc)
	cn.tp = textproto.NewConn(textReads{&deflateStream{r: r, w: w, c: cn.nc}, cn.text})
	cn.compressed = true
	c.noteCompress(answer)
	return nil
}

// noteCompress keeps what the server said to the last COMPRESS, or why
// it was not asked, and logs it the first time it changes.
func (c *Client) noteCompress(answer string) {
	c.mu.Lock()
	changed := c.compressAnswer != answer
	c.compressAnswer = answer
	c.mu.Unlock()
	if changed {
		c.cfg.Logger.Info("nntp compression", "server", c.cfg.Addr, "compress_deflate", answer)
	}
}

// deflateStream is a connection's two DEFLATE streams: every write is
// flushed (a sync flush) at once, since each is a whole command the
// server waits for.
type deflateStream struct {
	r io.ReadCloser
	w *flate.Writer
	c io.Closer
}

func (d *deflateStream) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *deflateStream) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	if err == nil {
		err = d.w.Flush()
	}
	return n, err
}

func (d *deflateStream) Close() error { return d.c.Close() }
