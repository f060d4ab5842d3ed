// Package binaries assembles binaries from Usenet article overviews: it
// recognises a part of a multi-part post from its subject
// (`name (3/50)`, `[1/12] - "file.rar" yEnc (1/3)`), keys a file by its
// normalised subject and poster, and keeps in a Window, the state
// leasehold carries from range to range, every open file with its parts
// and the spans of article numbers already read. A file with all its
// parts is complete: it leaves the window and goes to a Sink (JSON lines
// or SQLite). Open files are aged out by article distance, not wall time,
// and bounded by a cap, so a replay after a takeover ends in the same
// window and emits the same files.
package binaries

import (
	"strconv"
	"strings"
)

// Part is what a subject says of a multi-part post: the file's name, the
// subject with its part counter taken out (the same for every part of a
// file), the part's number and the file's part count.
type Part struct {
	Name       string
	Normalised string
	Number     int
	Total      int
}

// MaxParts is the most parts a file may claim; a larger count is not a
// part counter.
const MaxParts = 1 << 16

// ParseSubject recognises a part of a multi-part post. The part counter
// is the last "(n/m)" of the subject (a leading "[i/j]" numbers the file
// in its set, not the part); a yEnc subject without one is a single-part
// file. The name is the first quoted string (the counter taken out, if it
// stands inside the quotes), else the subject before the counter. A subject with neither is not a part (ok false).
func ParseSubject(subject string) (p Part, ok bool) {
	s := strings.TrimSpace(subject)
	open, n, m, found := lastCounter(s)
	var norm string
	switch {
	case found:
		norm = s[:open] + "(/" + strconv.Itoa(m) + ")" + s[strings.IndexByte(s[open:], ')')+open+1:]
	case containsFold(s, "yenc"):
		n, m, norm = 1, 1, s
	default:
		return p, false
	}
	if m < 1 || m > MaxParts || n < 0 || n > m {
		return p, false
	}
	// The name is read with the counter taken out: a counter inside the
	// quotes would otherwise name each part differently.
	name := quoted(norm)
	if name == "" {
		end := len(s)
		if found {
			end = open
		}
		name = strings.TrimSpace(s[:end])
		name = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(name, "yEnc"), "-"))
		if i := strings.Index(name, "] - "); strings.HasPrefix(name, "[") && i >= 0 {
			name = strings.TrimSpace(name[i+4:])
		}
	}
	if name == "" {
		return p, false
	}
	return Part{Name: name, Normalised: strings.Join(strings.Fields(norm), " "), Number: n, Total: m}, true
}

// lastCounter finds the last "(n/m)" in s: where its "(" is and n, m.
func lastCounter(s string) (open, n, m int, ok bool) {
	for end := strings.LastIndexByte(s, ')'); end > 0; end = strings.LastIndexByte(s[:end], ')') {
		start := strings.LastIndexByte(s[:end], '(')
		if start < 0 {
			return 0, 0, 0, false
		}
		a, b, cut := strings.Cut(s[start+1:end], "/")
		if cut {
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(b)
			if err1 == nil && err2 == nil && len(a) <= 6 && len(b) <= 6 && a[0] != '+' && a[0] != '-' && b[0] != '+' && b[0] != '-' {
				return start, x, y, true
			}
		}
	}
	return 0, 0, 0, false
}

// quoted is the first "…" of s, or "".
func quoted(s string) string {
	i := strings.IndexByte(s, '"')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(s[i+1:], '"')
	if j < 0 {
		return ""
	}
	return strings.TrimSpace(s[i+1 : i+1+j])
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}
