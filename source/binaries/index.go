package binaries

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
			var skips []nntp.Skip
			for range skipped {
				skips = append(skips, nntp.Skip{Reason: SkipMalformed})
			}
			if !yield(nntp.Batch{Lo: lo, Hi: hi, Headers: hs, Skipped: skipped, Skips: skips}, err) || err != nil || hi == end {
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
	// (USENET.md "NZB"): handed to it before the sink writes the records
	// naming it, written while the reading goes on, and on disk before
	// Index returns.
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
	// NZBEvery defers the rewrites of NZBs (NZBWriter.Flush) at the end
	// of a range until that long has passed since the group's last; 0
	// flushes at the end of every range. A range that stops early
	// always flushes. A caller that sets it must Flush the group's NZBs
	// before it saves the window (the worker does it in the window's
	// Save), so a saved window never runs ahead of its NZBs.
	NZBEvery time.Duration
	// Skips counts and logs the overview lines that cannot be used; nil
	// counts them nowhere.
	Skips *Skips

	mu      sync.Mutex
	flushed map[string]time.Time // when each group's NZBs were last flushed
}

// Why an overview line is not used, besides nntp's SkipFields and
// SkipNumber (USENET.md "Bad input").
const (
	// SkipNoMessageID is an article without a Message-ID: its part is
	// missing, never a segment without one.
	SkipNoMessageID = "no_message_id"
	// SkipSubjectTooLong is a subject longer than MaxSubject: it is read
	// from its first MaxSubject bytes (the line is used, and counted).
	SkipSubjectTooLong = "subject_too_long"
	// SkipMalformed is a line a source without reasons (an
	// OverviewSource that is not an nntp.Client) could not read.
	SkipMalformed = "malformed"
)

// usable is hs without the headers that cannot be used (counted in
// ix.Skips), subjects longer than MaxSubject cut; hs itself is left as
// it is.
func (ix *Indexer) usable(group string, hs []nntp.Header) []nntp.Header {
	var out []nntp.Header
	for i, h := range hs {
		keep := true
		if id := strings.TrimSpace(h.MessageID); id == "" || id == "<>" {
			ix.Skips.Add(group, SkipNoMessageID, fmt.Sprintf("article %d: %q", h.Number, clip(h.Subject)))
			keep = false
		} else if len(h.Subject) > MaxSubject {
			ix.Skips.Add(group, SkipSubjectTooLong, fmt.Sprintf("article %d: %d bytes: %q", h.Number, len(h.Subject), clip(h.Subject)))
			h.Subject = cutSubject(h.Subject, MaxSubject)
		}
		if out == nil && (!keep || h.Subject != hs[i].Subject) {
			out = append(make([]nntp.Header, 0, len(hs)), hs[:i]...)
		}
		if out != nil && keep {
			out = append(out, h)
		}
	}
	if out == nil {
		return hs
	}
	return out
}

// cutSubject is s's first n bytes, less a UTF-8 sequence the cut left
// short.
func cutSubject(s string, n int) string {
	s = s[:n]
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				return s[:i]
			}
			break
		}
	}
	return s
}

// clip is the start of a long text, for a log.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// Skips counts overview lines that cannot be used, by reason, for the
// worker's summary (leasehold_usenet_skipped_total{reason}), and logs
// them at most once every Every (a minute when 0) with an example.
// Safe for concurrent use; a nil *Skips counts nothing.
type Skips struct {
	Log   *slog.Logger
	Every time.Duration

	mu      sync.Mutex
	total   map[string]int64
	since   map[string]int64 // not yet logged
	example string
	logged  time.Time
}

// Add counts one line of group skipped for reason, example saying which.
func (s *Skips) Add(group, reason, example string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total == nil {
		s.total, s.since = map[string]int64{}, map[string]int64{}
	}
	s.total[reason]++
	s.since[reason]++
	if s.example == "" {
		s.example = group + ": " + reason + ": " + example
	}
	every := s.Every
	if every <= 0 {
		every = time.Minute
	}
	if s.Log == nil || time.Since(s.logged) < every {
		return
	}
	args := []any{"example", s.example}
	for _, r := range slices.Sorted(maps.Keys(s.since)) {
		args = append(args, r, s.since[r])
	}
	s.Log.Warn("overview lines skipped", args...)
	s.logged, s.since, s.example = time.Now(), map[string]int64{}, ""
}

// Counts are the lines skipped so far, by reason.
func (s *Skips) Counts() map[string]int64 {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.total)
}

// retrySpans is the most OVERs a range asks for missing articles.
const retrySpans = 16

// Index reads articles next..end of the window's group: first the
// missing articles of earlier ranges again, then each batch's overview
// into w, what it changes to the sink, and then progress(batch end+1,
// headers so far) is called. A span with no articles (expired below the
// group's low mark) is read as empty, not an error. Lines that cannot be
// used are counted in Skips and never reach the window. It returns the
// source's or sink's error as it is (a caller tells a permanent one with
// nntp.Permanent), or the context's cause; whatever it returns, the
// records of every batch the window took are written (a stop does not
// cut them off), and the NZBs deferred are written unless NZBEvery lets
// a range that ended well leave them for later.
func (ix *Indexer) Index(ctx context.Context, w *Window, next, end int64, progress func(next, headers int64)) (err error) {
	batch := ix.Batch
	if batch <= 0 {
		batch = 1000
	}
	if ix.NZB != nil {
		defer ix.endNZBs(w.Group, &err)
	}
	// The window takes a batch's headers before its records are written:
	// once it has, they are written whole even when a stop ends ctx, or
	// the window saved at the stop would run ahead of the records.
	wctx := context.WithoutCancel(ctx)
	if err := ix.retryMissing(ctx, wctx, w, batch); err != nil {
		return err
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
		for _, sk := range b.Skips {
			ix.Skips.Add(w.Group, sk.Reason, sk.Line)
		}
		ups := w.Add(b.Lo, b.Hi, ix.usable(w.Group, b.Headers))
		if ix.RetryMissing > 0 {
			// Every line the server gave, usable or not: one without a
			// Message-ID is not missing, and is not asked for again.
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
		if err := ix.write(wctx, w.Group, ups); err != nil {
			return err
		}
		if progress != nil {
			progress(b.Hi+1, headers)
		}
	}
	if !reached {
		return nil
	}
	var tailErr error
	if ix.TailEnd != nil {
		tail, err := ix.TailEnd(ctx, w.Group)
		if err == nil && end >= tail {
			last = append(last, w.Flush()...)
		}
		tailErr = err
	}
	if err := ix.write(wctx, w.Group, last); err != nil {
		return err
	}
	if tailErr != nil {
		return tailErr
	}
	if progress != nil {
		progress(end+1, headers)
	}
	return nil
}

// endNZBs ends a range's NZBs: they are written while the reading goes
// on, and a range ends with every NZB its records name on disk, synced
// when a flush is due (or the range failed), else syncing in the
// background while the next range is read. Its error, if the range had
// none, becomes *err.
func (ix *Indexer) endNZBs(group string, err *error) {
	flush := ix.NZB.Wait
	if *err != nil || ix.flushDue(group) {
		flush = ix.NZB.Flush
	}
	if ferr := flush(group); ferr != nil && *err == nil {
		*err = fmt.Errorf("binaries: writing NZBs: %w", ferr)
	}
}

// retryMissing asks the window's missing articles of earlier ranges
// again, first in a range (USENET.md rule 6), and writes what they
// change under wctx (see Index).
func (ix *Indexer) retryMissing(ctx, wctx context.Context, w *Window, batch int64) error {
	if ix.RetryMissing <= 0 || len(w.Missing) == 0 {
		return nil
	}
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
	usable := ix.usable(w.Group, again)
	if len(usable) < len(again) {
		// A line that came back unusable is counted once, not asked
		// for again.
		for _, h := range again {
			if !slices.ContainsFunc(usable, func(u nntp.Header) bool { return u.Number == h.Number }) {
				delete(w.Missing, h.Number)
			}
		}
	}
	if err := ix.write(wctx, w.Group, w.Retry(spans, usable, ix.RetryMissing)); err != nil {
		return err
	}
	return nil
}

// flushDue reports whether a range of group that ended well writes the
// NZBs deferred (NZBEvery), and if so notes it as done now.
func (ix *Indexer) flushDue(group string) bool {
	if ix.NZBEvery <= 0 {
		return true
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.flushed == nil {
		ix.flushed = map[string]time.Time{}
	}
	last, ok := ix.flushed[group]
	if !ok {
		// The first range of a lease starts the interval.
		ix.flushed[group] = time.Now()
		return false
	}
	if time.Since(last) < ix.NZBEvery {
		return false
	}
	ix.flushed[group] = time.Now()
	return true
}

// write hands updates to the NZB writer, then to the sink.
func (ix *Indexer) write(ctx context.Context, group string, ups []Update) error {
	if len(ups) == 0 {
		return nil
	}
	if ix.NZB != nil {
		if err := ix.NZB.Write(group, ups); err != nil {
			return fmt.Errorf("binaries: writing NZBs: %w", err)
		}
	}
	if err := ix.Sink.Write(ctx, LeaseOf(ctx), ups); err != nil {
		return fmt.Errorf("binaries: writing %d releases' records: %w", len(ups), err)
	}
	return nil
}
