package nntp

import (
	"bytes"
	"errors"
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

// errOverview is a line that is not an overview line.
var errOverview = errors.New("nntp: malformed overview line")

// ParseOverview parses one overview line: tab-separated, the number,
// Subject, From, Date, Message-ID, References, :bytes and :lines, then
// optional fields in "Name: value" form of which Xref is kept. Bytes and
// lines that are empty or not numbers read as 0 (servers leave them out);
// a line without a positive number or without the seven fields is an
// error.
func ParseOverview(line []byte) (Header, error) {
	var h Header
	line = bytes.TrimRight(line, "\r\n")
	fields := bytes.Split(line, []byte{'\t'})
	if len(fields) < 8 {
		return h, errOverview
	}
	n, err := strconv.ParseInt(string(fields[0]), 10, 64)
	if err != nil || n <= 0 {
		return h, errOverview
	}
	h.Number = n
	h.Subject = string(fields[1])
	h.From = string(fields[2])
	h.Date = string(fields[3])
	h.MessageID = string(fields[4])
	h.References = string(fields[5])
	h.Bytes = count(fields[6])
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
