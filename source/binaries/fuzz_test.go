package binaries

import (
	"strings"
	"testing"
)

// FuzzParseSubject: a subject recognised as a part names a file, counts
// 1..MaxParts parts with the part within them, and every part of the same
// file (the counter changed) has the same normalised subject and name.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{`[1/12] - "file.rar" yEnc (1/3)`, `name (3/50)`, `"a" yEnc`, `plain text`, `x (1/2) (3/4)`, `((1/2)`, `"" yEnc (1/1)`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		p, ok := ParseSubject(subject)
		if !ok {
			return
		}
		if p.Name == "" || p.Total < 1 || p.Total > MaxParts || p.Number < 0 || p.Number > p.Total {
			t.Fatalf("%q: %+v", subject, p)
		}
		open, n, m, found := lastCounter(strings.TrimSpace(subject))
		if !found || n != p.Number || m != p.Total {
			return // a yEnc single part
		}
		s := strings.TrimSpace(subject)
		other := s[:open] + "(" + itoa(p.Total) + "/" + itoa(p.Total) + ")" + s[open+strings.IndexByte(s[open:], ')')+1:]
		q, ok := ParseSubject(other)
		if !ok || q.Normalised != p.Normalised || q.Name != p.Name || q.Total != p.Total || q.Number != p.Total {
			t.Fatalf("%q: part %d gives %+v; its last part %q gives %+v, %v", subject, p.Number, p, other, q, ok)
		}
	})
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}
