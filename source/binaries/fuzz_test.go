package binaries

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadSubject: any subject reads without a crash; a part counts
// 0..MaxParts parts with the part within them; and every part of the same
// file (the last counter changed to the last part) has the same file key
// subject, release key subject and name.
func FuzzReadSubject(f *testing.F) {
	for _, s := range []string{`[1/12] - "file.rar" yEnc (1/3)`, `name (3/50)`, `"a" yEnc`, `plain text`, `x (1/2) (3/4)`, `((1/2)`, `"" yEnc (1/1)`,
		`[PRiVATE]-[WtFnZb]-[a.mkv]-[1/3] - "" yEnc 9786 (1/3)`, `=?UTF-8?B?w6k=?= (1/2)`, `#34;a.rar#34; (1/2)`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		r := ReadSubject(subject)
		if !utf8.ValidString(r.Name) || !utf8.ValidString(r.Release) {
			t.Fatalf("%q: name %q or release %q is not UTF-8", subject, r.Name, r.Release)
		}
		if !strings.Contains(subject, "\uFFFD") && !strings.Contains(subject, "=?") && strings.Contains(r.Subject, "\uFFFD") {
			t.Fatalf("%q: read as %q, with U+FFFD", subject, r.Subject)
		}
		if !r.IsPart {
			return
		}
		if r.Total < 0 || r.Total > MaxParts || r.Part < 0 || r.Total > 0 && r.Part > r.Total {
			t.Fatalf("%q: %+v", subject, r)
		}
		if r.Total == 0 || r.Undecodable || strings.Contains(subject, "=?") || strings.Contains(subject, ";") {
			return
		}
		if len(subject) > MaxSubject {
			return // read cut at MaxSubject: a counter past the cut is not read
		}
		old := "(" + strconv.Itoa(r.Part) + "/" + strconv.Itoa(r.Total) + ")"
		ms := parenCounter.FindAllStringIndex(subject, -1)
		if len(ms) == 0 || subject[ms[len(ms)-1][0]:ms[len(ms)-1][1]] != old {
			return // a yEnc single part, a [k/n] one, or a counter with spaces in it
		}
		i := ms[len(ms)-1][0]
		last := "(" + strconv.Itoa(r.Total) + "/" + strconv.Itoa(r.Total) + ")"
		other := subject[:i] + last + subject[i+len(old):]
		if len(ms) > 1 && strings.TrimSpace(subject[ms[len(ms)-2][1]:i]) == "" {
			// A counter just before the last, compared as numbers as the
			// reader does: the same counter doubled changes as one; one
			// the last part's counter would double ("(1/01)(0/1)") makes
			// a subject that is no part of the file its last part names,
			// for the doubled counter then counts once (rule 2).
			j := ms[len(ms)-2]
			m := parenCounter.FindStringSubmatch(subject[j[0]:j[1]])
			k, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			switch {
			case k == r.Part && n == r.Total:
				other = subject[:j[0]] + last + subject[j[1]:i] + last + subject[i+len(old):]
			case k == r.Total && n == r.Total:
				return
			}
		}
		q := ReadSubject(other)
		if !q.IsPart || q.Part != r.Total || q.FileSubject != r.FileSubject || q.Name != r.Name || q.KeySubject != r.KeySubject || q.Release != r.Release {
			t.Fatalf("%q: part %d reads %+v; its last part %q reads %+v", subject, r.Part, r, other, q)
		}
	})
}
