package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"unicode/utf8"

	"github.com/leasehold/leasehold/source/binaries"
)

// usenetStdin is where `leasehold usenet subject` reads; tests set it.
var usenetStdin io.Reader = os.Stdin

const usenetUsage = `Usage: leasehold usenet subject < SUBJECTS
       leasehold usenet nzb --index postgres://… [-o FILE] RELEASE (see leasehold usenet nzb -h)
       leasehold usenet api --index postgres://… [--listen ADDR] (see leasehold usenet api -h)

Reads Usenet subjects, one a line, on standard input and writes how the
Usenet worker reads each (USENET.md rules 1-2), one JSON object a line:
{"subject","name","part","total","file","files","key_subject","release"}.
part is null when the subject is not a part of a binary; total is null
for (k/0); file and files are null without a file counter; key_subject
is the subject with both counters and the name blanked; release is the
release name (rule 3): what key_subject says besides yEnc and sizes, else
the file name's base (without .part01.rar, .r00, .7z.001, .vol03+04.par2,
.par2, .sfv, .nfo, ...); an obfuscating tool's [PRiVATE] tag says
nothing ([PRiVATE]-[WtFnZb]-[Name.mkv]-[1/1] - "" yEnc is Name), nor
does an advertiser's: bracketed text with a web address and, in such
a subject, every lone word standing in brackets (<TOWN><www.town.ag >
[1/9] - "Name.rar" yEnc is Name). A
release is one poster's files of one release name and file count. A
subject is read up to 16 KiB; one that is not UTF-8 is read as
Windows-1252. A line longer than 64 KiB is an error. A subject whose
RFC 2047 words do not decode is read raw, and counted on standard
error.
`

// subjectLine is one line of `leasehold usenet subject`'s output.
type subjectLine struct {
	Subject    string `json:"subject"`
	Name       string `json:"name"`
	Part       *int   `json:"part"`
	Total      *int   `json:"total"`
	File       *int   `json:"file"`
	Files      *int   `json:"files"`
	KeySubject string `json:"key_subject"`
	Release    string `json:"release"`
}

// runUsenet is `leasehold usenet subject` and `leasehold usenet nzb`.
func runUsenet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// nzb has flags and a usage of its own: its -h is its own.
	if len(args) > 0 && args[0] == "nzb" {
		return runUsenetNZB(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "help" }) {
		fmt.Fprint(stderr, usenetUsage)
		if len(args) == 0 {
			return usageError(errors.New("usenet: subject?"))
		}
		return errHelp
	}
	if args[0] != "subject" || len(args) > 1 {
		fmt.Fprint(stderr, usenetUsage)
		return usageError(fmt.Errorf("usenet: unknown arguments %q", args))
	}
	sc := bufio.NewScanner(usenetStdin)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	var lines, raw int
	for sc.Scan() {
		lines++
		r := binaries.ReadSubject(sc.Text())
		if r.Undecodable {
			raw++
		}
		line := sc.Text()
		if !utf8.ValidString(line) {
			line = binaries.Windows1252(line) // as the worker reads it; JSON carries no raw bytes
		}
		l := subjectLine{Subject: line, Name: r.Name, KeySubject: r.KeySubject, Release: r.Release}
		if r.IsPart {
			l.Part = &r.Part
			if r.Total > 0 {
				l.Total = &r.Total
			}
		}
		if r.HasFile {
			l.File, l.Files = &r.File, &r.Files
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("usenet subject: line %d: %w", lines+1, err)
	}
	if raw > 0 {
		fmt.Fprintf(stderr, "usenet subject: %d of %d subjects have RFC 2047 words that do not decode; read raw\n", raw, lines)
	}
	return nil
}
