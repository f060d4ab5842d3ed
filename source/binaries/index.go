package binaries

import (
	"context"
	"fmt"
	"iter"

	"github.com/leasehold/leasehold/source/nntp"
)

// OverviewSource is where headers come from: a news server's OVER.
type OverviewSource interface {
	Overview(ctx context.Context, group string, lo, hi int64) ([]nntp.Header, int, error)
}

// PipelinedSource is an OverviewSource that reads a whole span in
// batches, asking for the next while one is handled (nntp.Client
// pipelines OVER); the Indexer uses it when its source has it.
type PipelinedSource interface {
	Overviews(ctx context.Context, group string, lo, end, batch int64) iter.Seq2[nntp.Batch, error]
}

// batches reads lo..end of group in batches: pipelined when the source
// can, else one Overview a batch.
func (ix *Indexer) batches(ctx context.Context, group string, lo, end, batch int64) iter.Seq2[nntp.Batch, error] {
	if p, ok := ix.Source.(PipelinedSource); ok {
		return p.Overviews(ctx, group, lo, end, batch)
	}
	return func(yield func(nntp.Batch, error) bool) {
		for lo <= end {
			if err := ctx.Err(); err != nil {
				yield(nntp.Batch{}, context.Cause(ctx))
				return
			}
			hi := end
			if end-lo >= batch {
				hi = lo + batch - 1
			}
			hs, skipped, err := ix.Source.Overview(ctx, group, lo, hi)
			if !yield(nntp.Batch{Lo: lo, Hi: hi, Headers: hs, Skipped: skipped}, err) || err != nil || hi == end {
				return
			}
			lo = hi + 1
		}
	}
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
	for b, err := range ix.batches(ctx, w.Group, next, end, batch) {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		done := w.Add(b.Lo, b.Hi, b.Headers)
		if len(done) > 0 {
			if err := ix.Sink.Write(ctx, done); err != nil {
				return fmt.Errorf("binaries: writing %d complete files: %w", len(done), err)
			}
		}
		headers += int64(len(b.Headers))
		if progress != nil {
			progress(b.Hi+1, headers)
		}
	}
	return nil
}
