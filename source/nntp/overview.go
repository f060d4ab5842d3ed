package nntp

import (
	"bytes"
	"strconv"
	"strings"
)

// Header is one article's overview line (RFC 3977 §8.3): its number in
// the group, Subject, From, Date, Message-ID, References, its size in
// bytes and lines, and its Xref when the server adds it (INN does).
type Header struct {
	Number     int64
	Subject    string
	From       string
	Date       string
	MessageID  string
	References string
	Bytes      int64
	Lines      int64
	Xref       string
}

// Why an overview line cannot be read (OverviewError's Reason), as the
// worker counts them (leasehold_usenet_skipped_total{reason}).
const (
	// SkipFields is a line with fewer than the number and the six
	// fields up to :bytes.
	SkipFields = "too_few_fields"
	// SkipNumber is a line whose first field is not a positive article
	// number.
	SkipNumber = "bad_number"
)

// OverviewError is a line that is not an overview line, and why.
type OverviewError struct{ Reason string }

func (e *OverviewError) Error() string { return "nntp: malformed overview line: " + e.Reason }

// Skip is an overview line a read could not use: why (a Skip… reason)
// and the line, clipped, for a log.
type Skip struct{ Reason, Line string }

// skipOf is the Skip of a line ParseOverview refused.
func skipOf(line []byte, err error) Skip {
	reason := SkipFields
	if oe, ok := err.(*OverviewError); ok {
		reason = oe.Reason
	}
	return Skip{Reason: reason, Line: clip(string(line))}
}

// ParseOverview parses one overview line: tab-separated, the number,
// Subject, From, Date, Message-ID, References, :bytes and :lines, then
// optional fields in "Name: value" form of which Xref is kept. Bytes and
// lines that are empty or not numbers read as 0 (servers leave them out,
// and some leave :lines out altogether: a line that ends after :bytes is
// read with lines 0). A line without a positive number or without the
// fields up to :bytes is an *OverviewError saying which.
func ParseOverview(line []byte) (Header, error) {
	var h Header
	line = bytes.TrimRight(line, "\r\n")
	fields := bytes.Split(line, []byte{'\t'})
	if len(fields) < 7 {
		return h, &OverviewError{SkipFields}
	}
	n, err := strconv.ParseInt(string(fields[0]), 10, 64)
	if err != nil || n <= 0 {
		return h, &OverviewError{SkipNumber}
	}
	h.Number = n
	h.Subject = string(fields[1])
	h.From = string(fields[2])
	h.Date = string(fields[3])
	h.MessageID = string(fields[4])
	h.References = string(fields[5])
	h.Bytes = count(fields[6])
	if len(fields) == 7 {
		return h, nil
	}
	h.Lines = count(fields[7])
	for _, f := range fields[8:] {
		name, value, ok := bytes.Cut(f, []byte{':'})
		if ok && strings.EqualFold(string(name), "Xref") {
			h.Xref = string(bytes.TrimSpace(value))
		}
	}
	return h, nil
}

// count reads a non-negative count; anything else is 0.
func count(b []byte) int64 {
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}
