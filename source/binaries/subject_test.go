package binaries

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// subjectCase is one line of testdata/subjects.jsonl: a subject from
// another project's tests (source names the project and the file) and
// its reading by USENET.md's rules. their_name is the name the other
// project expects, when its rules differ from ours.
type subjectCase struct {
	Source, Subject, Name string
	Part, Total           *int
	File, Files           *int
	TheirName             *string `json:"their_name"`
	// Release is the release name (rule 3), checked when given.
	Release *string
}

func loadSubjects(t *testing.T) []subjectCase {
	t.Helper()
	f, err := os.Open("testdata/subjects.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []subjectCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c subjectCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("testdata/subjects.jsonl line %d: %v", len(out)+1, err)
		}
		out = append(out, c)
	}
	return out
}

func intOr(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// TestReadSubjectTable reads the subjects of SABnzbd's, NZBGet's and
// NewsFlash's own tests and NNTmux's regex examples (its stored subjects
// have the part counter after yEnc taken off) and checks each reading;
// it logs how many read right by source.
func TestReadSubjectTable(t *testing.T) {
	t.Parallel()
	right, all := map[string]int{}, map[string]int{}
	for _, c := range loadSubjects(t) {
		src := strings.Fields(c.Source)[0]
		all[src]++
		r := ReadSubject(c.Subject)
		part, total, file, files := -1, -1, -1, -1
		if r.IsPart {
			part, total = r.Part, r.Total
			if r.Total == 0 {
				total = -1
			}
		}
		if r.HasFile {
			file, files = r.File, r.Files
		}
		if c.Release != nil && r.Release != *c.Release {
			t.Errorf("%s: %q\n release %q, want %q", c.Source, c.Subject, r.Release, *c.Release)
			continue
		}
		if r.Name != c.Name || part != intOr(c.Part) || total != intOr(c.Total) || file != intOr(c.File) || files != intOr(c.Files) {
			t.Errorf("%s: %q\n read name %q part %d/%d file %d/%d\n want name %q part %d/%d file %d/%d",
				c.Source, c.Subject, r.Name, part, total, file, files, c.Name, intOr(c.Part), intOr(c.Total), intOr(c.File), intOr(c.Files))
			continue
		}
		right[src]++
	}
	t.Logf("read right by source: %v of %v", right, all)
}

// TestReadSubjectLongAndNotUTF8: a subject is read whole up to 16 KiB,
// its counters at the end of 3,000 bytes included, and from its first
// 16 KiB past that; one that is not UTF-8 is read as Windows-1252, never
// U+FFFD.
func TestReadSubjectLongAndNotUTF8(t *testing.T) {
	t.Parallel()
	long := "Omega " + strings.Repeat("word ", 600) + `[2/5] - "Omega.part2.rar" yEnc (3/7)`
	if len(long) < 3000 {
		t.Fatalf("the subject is %d bytes", len(long))
	}
	r := ReadSubject(long)
	if !r.IsPart || r.Part != 3 || r.Total != 7 || r.File != 2 || r.Files != 5 || r.Name != "Omega.part2.rar" ||
		!strings.HasPrefix(r.Release, "Omega word word") {
		t.Errorf("a %d-byte subject: %+v", len(long), r)
	}
	huge := `"Big.bin" yEnc ` + strings.Repeat("x", MaxSubject) + " (1/2)"
	if r := ReadSubject(huge); r.IsPart && r.Total == 2 || len(r.Subject) > MaxSubject {
		t.Errorf("a %d-byte subject read past its first 16 KiB: part %d/%d, %d bytes", len(huge), r.Part, r.Total, len(r.Subject))
	}
	latin := "[1/2] - \"Caf\xe9.Cr\xe8me.part1.rar\" \x96 \x81 yEnc (1/10)"
	r = ReadSubject(latin)
	if r.Name != "Café.Crème.part1.rar" || r.Release != "Café.Crème" || !strings.Contains(r.Subject, "\u2013 \u0081") ||
		strings.ContainsRune(r.Subject, utf8.RuneError) {
		t.Errorf("a Windows-1252 subject: %+v", r)
	}
}

// TestHoldsAddress: what marks an advertiser's tag (rule 3) and the
// release words with dots that do not, in a tag's brackets or not; a
// bare host in any top-level domain marks one only in a tag's brackets,
// and file names and scene names never do.
func TestHoldsAddress(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"www.town.ag":                   true,
		" WWW.Example.org ":             true,
		"http://nzb.example/x":          true,
		"https://a":                     true,
		"partner of www.ssl-news.info":  true,
		"sponsored by ssl-news.info<<<": true,
		"SSL - News.Info":               true,
		"x-ssl-news.info":               true,
		"a.town.ag":                     true,
		"#scnzb@efnet":                  true,
		"Dragons.Den.S01E01":            false,
		"Dragons.Den.UK.S11E02.HDTV":    false,
		"Alpha.2024":                    false,
		"IP Scanner Pro 3.21-Sebaro":    false,
		"Site.Name.XXX":                 false,
		"Rho.XXX":                       false,
		"Die.Doku.2024.Info":            false,
		"a.b.c-d.e.info":                false,
		"Information.2024":              false,
		"Show.Agents.S01":               false,
		"www":                           false,
		"www.":                          false,
		"http":                          false,
		"mail@example":                  false,
		"# @x":                          false,
		".info":                         false,
		"a..info":                       false,
	} {
		for _, inTag := range []bool{false, true} {
			if got := holdsAddress(s, inTag); got != want {
				t.Errorf("holdsAddress(%q, %v) = %v, want %v", s, inTag, got, want)
			}
		}
	}
	for s, want := range map[string]bool{
		"example.com":                   true,
		" usenet-site.net ":             true,
		"posted via newsgroup-host.org": true,
		"Usenet-Site.net":               true,
		"a.example.de":                  true,
		"mirror.example.to":             true,
		"Some.Film.2019.1080p":          false,
		"Show.S01E02.720p.WEB":          false,
		"file.part01.rar":               false,
		"Name.mkv":                      false,
		"name.mkv":                      false,
		"clip.mov":                      false,
		"Film.zip":                      false,
		"movie.nfo":                     false,
		"sample.mkv":                    false,
		"subs.srt":                      false,
		"show.web":                      false,
		"site.name.xxx":                 false,
		"Rho.xxx":                       false,
		"Die.Hard":                      false,
		"Film.GERMAN":                   false,
		"Example.COM":                   false,
		"show.s01e02.web":               false,
		"a.b.example.com":               false,
		"example.c":                     false,
		"example.network":               false,
		"example.c0m":                   false,
		".com":                          false,
		"a..com":                        false,
		"-a.com":                        false,
	} {
		if got := holdsAddress(s, true); got != want {
			t.Errorf("holdsAddress(%q) in a tag = %v, want %v", s, got, want)
		}
		if holdsAddress(s, false) {
			t.Errorf("holdsAddress(%q) outside a tag = true, want false", s)
		}
	}
}
