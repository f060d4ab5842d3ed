package nntp

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParseStatus: any line either parses to a code of 100..999 whose
// three digits start the line, or is an error; never a panic.
func FuzzParseStatus(f *testing.F) {
	for _, s := range []string{"211 3 1 3 alt.test", "200 server ready", "423", "423 ", "42", "abc def", "2x1 x", "099 low", "500\r\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		code, text, err := ParseStatus(line)
		if err != nil {
			if code != 0 || text != "" {
				t.Fatalf("%q: error %v with code %d text %q", line, err, code, text)
			}
			return
		}
		trimmed := strings.TrimRight(line, "\r\n")
		if code < 100 || code > 999 || trimmed[:3] != strings.TrimLeft(trimmed[:3], "+-") || !strings.HasPrefix(trimmed, itoa3(code)) {
			t.Fatalf("%q: code %d", line, code)
		}
		if len(trimmed) > 3 && trimmed[3] != ' ' {
			t.Fatalf("%q: code %d parsed from a line whose code is not followed by a space", line, code)
		}
		for _, c := range trimmed[:3] {
			if c < '0' || c > '9' {
				t.Fatalf("%q: code %d parsed from a non-digit", line, code)
			}
		}
		if len(trimmed) > 4 && text != trimmed[4:] {
			t.Fatalf("%q: text %q", line, text)
		}
	})
}

func itoa3(c int) string {
	return string([]byte{byte('0' + c/100), byte('0' + c/10%10), byte('0' + c%10)})
}

// FuzzParseOverview: any line either parses to a header with a positive
// number, non-negative counts and fields without tabs, or is an error;
// a header written back as an overview line parses to itself.
func FuzzParseOverview(f *testing.F) {
	for _, s := range []string{
		"1\tsubj\tfrom\tdate\t<id@x>\t\t123\t4\tXref: host alt.test:1",
		"2\t\t\t\t\t\t\t",
		"3\ta\tb\tc\td\te\t:bytes\tlines",
		"x\ta\tb\tc\td\te\t1\t2",
		"-1\ta\tb\tc\td\te\t1\t2",
		"1\ta",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		h, err := ParseOverview(line)
		if err != nil {
			return
		}
		if h.Number <= 0 || h.Bytes < 0 || h.Lines < 0 {
			t.Fatalf("%q: %+v", line, h)
		}
		for _, s := range []string{h.Subject, h.From, h.Date, h.MessageID, h.References, h.Xref} {
			if strings.ContainsAny(s, "\t") {
				t.Fatalf("%q: a field with a tab: %+v", line, h)
			}
		}
		var b bytes.Buffer
		b.WriteString(strings.Join([]string{itoa(h.Number), h.Subject, h.From, h.Date, h.MessageID, h.References, itoa(h.Bytes), itoa(h.Lines)}, "\t"))
		if h.Xref != "" {
			b.WriteString("\tXref: " + h.Xref)
		}
		again, err := ParseOverview(b.Bytes())
		if err != nil || again != h {
			t.Fatalf("%q: written back as %q parses to %+v, %v; want %+v", line, b.Bytes(), again, err, h)
		}
	})
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}
