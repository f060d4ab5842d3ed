package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestUsenetSubject: `leasehold usenet subject` prints one reading a line
// of the subjects on its standard input, the table of other projects'
// subjects read as source/binaries reads them, nulls where a counter is
// absent; the parts of one post share their key_subject and release, and
// two posts of one poster in Nyuu's default subject do not (rule 3); a
// subject that is not UTF-8 is read as Windows-1252; an undecodable
// subject is read raw and counted; a line too long is a clear error.
func TestUsenetSubject(t *testing.T) {
	raw, err := os.ReadFile("../../source/binaries/testdata/subjects.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		Subject, Name            string
		Part, Total, File, Files *int
	}
	var cases []want
	var in bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var w want
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, w)
		in.WriteString(w.Subject + "\n")
	}
	extra := []string{
		`[01/15] - "show.part01.rar" yEnc (1/40) 52428800`,
		`[15/15] - "show.vol07+08.par2" yEnc (3/3) 1048576`,
		`[01/15] - "other.part01.rar" yEnc (1/40) 52428800`,
		"[1/2] - \"Caf\xe9.2024.part1.rar\" yEnc (1/10)",
	}
	for _, s := range extra {
		in.WriteString(s + "\n")
	}
	out, errOut := runUsenetSubject(t, &in)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(cases)+len(extra) {
		t.Fatalf("%d lines for %d subjects:\n%s", len(lines), len(cases)+len(extra), out)
	}
	eq := func(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
	for i, c := range cases {
		var g subjectLine
		if err := json.Unmarshal([]byte(lines[i]), &g); err != nil {
			t.Fatal(err)
		}
		if g.Subject != c.Subject || g.Name != c.Name || !eq(g.Part, c.Part) || !eq(g.Total, c.Total) || !eq(g.File, c.File) || !eq(g.Files, c.Files) {
			t.Errorf("%q: printed %s", c.Subject, lines[i])
		}
	}
	var a, b subjectLine
	json.Unmarshal([]byte(lines[len(cases)]), &a)
	json.Unmarshal([]byte(lines[len(cases)+1]), &b)
	if a.KeySubject != b.KeySubject || a.KeySubject != `- "" yEnc` {
		t.Errorf("two files of one post: key_subject %q and %q, want both %q", a.KeySubject, b.KeySubject, `- "" yEnc`)
	}
	var c, d subjectLine
	json.Unmarshal([]byte(lines[len(cases)+2]), &c)
	json.Unmarshal([]byte(lines[len(cases)+3]), &d)
	if a.Release != "show" || b.Release != "show" || c.Release != "other" {
		t.Errorf("releases %q, %q and %q; want show, show and other", a.Release, b.Release, c.Release)
	}
	if d.Subject != `[1/2] - "Café.2024.part1.rar" yEnc (1/10)` || d.Name != "Café.2024.part1.rar" || d.Release != "Café.2024" {
		t.Errorf("a Windows-1252 subject: %s", lines[len(cases)+3])
	}
	if !strings.Contains(errOut, fmt.Sprintf("1 of %d subjects have RFC 2047 words that do not decode", len(cases)+len(extra))) {
		t.Errorf("stderr %q: want the undecodable subject counted", errOut)
	}

	usenetStdin = strings.NewReader(strings.Repeat("x", 70<<10) + "\n")
	err = run(context.Background(), []string{"usenet", "subject"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a 70 KiB line: %v, want an error naming line 1", err)
	}
}

func runUsenetSubject(t *testing.T, in *bytes.Buffer) (string, string) {
	t.Helper()
	usenetStdin = in
	defer func() { usenetStdin = os.Stdin }()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"usenet", "subject"}, &out, &errOut); err != nil {
		t.Fatalf("usenet subject: %v\n%s", err, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestUsenetNZBHelp: `leasehold usenet nzb -h` prints the usage of usenet
// nzb (its --index and -o, what RELEASE is), not that of usenet subject,
// and `usenet -h` still prints the subject usage that points to it.
func TestUsenetNZBHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"usenet", "nzb", h}, &out, &errOut)
		if !errors.Is(err, errHelp) {
			t.Errorf("usenet nzb %s: %v, want the help's", h, err)
		}
		got := errOut.String()
		if !strings.HasPrefix(got, "Usage: leasehold usenet nzb --index") || strings.Contains(got, "usenet subject") ||
			!strings.Contains(got, "-index") || !strings.Contains(got, "-o") || !strings.Contains(got, "RELEASE is a\nrelease's key") {
			t.Errorf("usenet nzb %s printed:\n%s", h, got)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"usenet", "-h"}, &out, &errOut); !errors.Is(err, errHelp) ||
		!strings.HasPrefix(errOut.String(), "Usage: leasehold usenet subject") || !strings.Contains(errOut.String(), "leasehold usenet nzb -h") {
		t.Errorf("usenet -h: %v\n%s", err, errOut.String())
	}
}
