package fleetfault

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Window is a recording worker's window snapshot: which ids of its group
// it has indexed, as intervals. Each upload carries its own name, so a
// download says exactly which upload it brought back.
type Window struct {
	Group string `json:"group"`
	// Upload names this upload: "L<lease>.<n>", the n-th upload of that
	// lease.
	Upload string `json:"upload"`
	Next   int64  `json:"next"`
	// Covered are the ids indexed, sorted, merged, not adjacent.
	Covered []Span `json:"covered"`
}

// Add marks the ids of s indexed.
func (w *Window) Add(s Span) {
	if s.End < s.Start {
		return
	}
	w.Covered = mergeSpans(append(w.Covered, s))
}

// Missing returns the ids of s the window does not cover.
func (w *Window) Missing(s Span) []Span {
	var out []Span
	at := s.Start
	for _, c := range w.Covered {
		if c.End < at {
			continue
		}
		if c.Start > s.End {
			break
		}
		if c.Start > at {
			out = append(out, Span{at, c.Start - 1})
		}
		at = max(at, c.End+1)
		if at > s.End {
			return out
		}
	}
	if at <= s.End {
		out = append(out, Span{at, s.End})
	}
	return out
}

// Encode is the snapshot body of the window.
func (w *Window) Encode() []byte {
	b, _ := json.Marshal(w)
	return b
}

// DecodeWindow reads a snapshot body written by Encode, as sent or as the
// node stores it (gzip).
func DecodeWindow(b []byte) (*Window, error) {
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("a window's gzip: %w", err)
		}
		if b, err = io.ReadAll(io.LimitReader(zr, 64<<20)); err != nil {
			return nil, fmt.Errorf("a window's gzip: %w", err)
		}
	}
	var w Window
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("not a window the harness wrote: %w", err)
	}
	w.Covered = mergeSpans(w.Covered)
	return &w, nil
}

// mergeSpans sorts spans and merges overlapping or adjacent ones.
func mergeSpans(ss []Span) []Span {
	slices.SortFunc(ss, func(a, b Span) int {
		if a.Start != b.Start {
			return int(min(max(a.Start-b.Start, -1), 1))
		}
		return int(min(max(a.End-b.End, -1), 1))
	})
	out := ss[:0]
	for _, s := range ss {
		if n := len(out); n > 0 && s.Start <= out[n-1].End+1 {
			out[n-1].End = max(out[n-1].End, s.End)
			continue
		}
		out = append(out, s)
	}
	return out
}
