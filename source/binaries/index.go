package binaries

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/source/nntp"
)

// OverviewSource is where headers come from: a news server's OVER.
type OverviewSource interface {
	Overview(ctx context.Context, group string, lo, hi int64) ([]nntp.Header, int, error)
}

// Sink takes the files that completed, before the progress past them is
// reported, so a crash loses none (a takeover may write a file twice).
type Sink interface {
	Write(ctx context.Context, files []File) error
}

// Indexer reads articles of a range from a source, batch by batch, into
// a window and writes the files they complete to a sink.
type Indexer struct {
	Source OverviewSource
	Sink   Sink
	// Batch is how many article numbers one OVER asks for; 0 means 1000.
	Batch int64
}

// Index reads articles next..end of the window's group: each batch's
// overview goes into w, the files it completes to the sink, and then
// progress(batch end+1, headers so far) is called. A span with no
// articles (expired below the group's low mark) is read as empty, not an
// error. It returns the source's or sink's error as it is (a caller tells
// a permanent one with nntp.Permanent), or the context's cause.
func (ix *Indexer) Index(ctx context.Context, w *Window, next, end int64, progress func(next, headers int64)) error {
	batch := ix.Batch
	if batch <= 0 {
		batch = 1000
	}
	var headers int64
	for lo := next; lo <= end; {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		hi := end
		if end-lo >= batch {
			hi = lo + batch - 1
		}
		hs, _, err := ix.Source.Overview(ctx, w.Group, lo, hi)
		if err != nil {
			return err
		}
		done := w.Add(lo, hi, hs)
		if len(done) > 0 {
			if err := ix.Sink.Write(ctx, done); err != nil {
				return fmt.Errorf("binaries: writing %d complete files: %w", len(done), err)
			}
		}
		headers += int64(len(hs))
		if progress != nil {
			progress(hi+1, headers)
		}
		if hi == end {
			break
		}
		lo = hi + 1
	}
	return nil
}
