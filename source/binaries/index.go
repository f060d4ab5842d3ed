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

// Sink takes the records a batch changed, before the progress past them
// is reported, so a crash loses none (a takeover may write one twice).
// lease is the group and fence they are written under (LeaseOf the
// Index context): a shared store checks it (Postgres) and refuses a
// holder whose group was taken over with a lost lease error.
type Sink interface {
	Write(ctx context.Context, lease Lease, updates []Update) error
}

// Indexer reads articles of a range from a source, batch by batch, into
// a window and writes what they change to a sink (and NZBs).
type Indexer struct {
	Source OverviewSource
	Sink   Sink
	// NZB, when set, writes the NZB of each release that has one
	// (USENET.md "NZB") before the sink writes the records naming it.
	NZB *NZBWriter
	// Batch is how many article numbers one OVER asks for; 0 means 1000.
	Batch int64
	// RetryMissing is how many times an article an OVER answer skipped
	// is asked again, once a range, before its part counts as lost; 0
	// asks nothing again.
	RetryMissing int
	// TailEnd, when set, gives the group's planned end (the news
	// server's high mark): a range that reaches it writes the files
	// still open as incomplete.
	TailEnd func(ctx context.Context, group string) (int64, error)
}

// retrySpans is the most OVERs a range asks for missing articles.
const retrySpans = 16

// Index reads articles next..end of the window's group: first the
// missing articles of earlier ranges again, then each batch's overview
// into w, what it changes to the sink, and then progress(batch end+1,
// headers so far) is called. A span with no articles (expired below the
// group's low mark) is read as empty, not an error. It returns the
// source's or sink's error as it is (a caller tells a permanent one with
// nntp.Permanent), or the context's cause.
func (ix *Indexer) Index(ctx context.Context, w *Window, next, end int64, progress func(next, headers int64)) error {
	batch := ix.Batch
	if batch <= 0 {
		batch = 1000
	}
	if ix.RetryMissing > 0 && len(w.Missing) > 0 {
		// A bounded number of OVERs a range, each over missing numbers
		// near each other: a server with many cancelled articles costs a
		// few requests, not one a gap.
		spans := w.MissingSpans(batch, retrySpans)
		var again []nntp.Header
		for _, s := range spans {
			hs, _, err := ix.Source.Overview(ctx, w.Group, s.Lo, s.Hi)
			if err != nil {
				return err
			}
			again = append(again, hs...)
		}
		if err := ix.write(ctx, w.Retry(spans, again, ix.RetryMissing)); err != nil {
			return err
		}
	}
	var headers int64
	var last []Update // the last batch's records, written once the source is let go
	reached := false
	for b, err := range ix.batches(ctx, w.Group, next, end, batch) {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		ups := w.Add(b.Lo, b.Hi, b.Headers)
		if ix.RetryMissing > 0 {
			w.Skipped(b.Lo, b.Hi, b.Headers)
		}
		headers += int64(len(b.Headers))
		if b.Hi == end {
			// The pipelined read holds its connection until the loop
			// ends: the tail's end is asked after it, so a source of
			// one connection never waits on itself.
			last = append(ups, w.Due()...)
			reached = true
			break
		}
		if err := ix.write(ctx, ups); err != nil {
			return err
		}
		if progress != nil {
			progress(b.Hi+1, headers)
		}
	}
	if !reached {
		return nil
	}
	if ix.TailEnd != nil {
		tail, err := ix.TailEnd(ctx, w.Group)
		if err != nil {
			return err
		}
		if end >= tail {
			last = append(last, w.Flush()...)
		}
	}
	if err := ix.write(ctx, last); err != nil {
		return err
	}
	if progress != nil {
		progress(end+1, headers)
	}
	return nil
}

// write hands updates to the NZB writer, then to the sink.
func (ix *Indexer) write(ctx context.Context, ups []Update) error {
	if len(ups) == 0 {
		return nil
	}
	if ix.NZB != nil {
		if err := ix.NZB.Write(ups); err != nil {
			return fmt.Errorf("binaries: writing NZBs: %w", err)
		}
	}
	if err := ix.Sink.Write(ctx, LeaseOf(ctx), ups); err != nil {
		return fmt.Errorf("binaries: writing %d releases' records: %w", len(ups), err)
	}
	return nil
}
