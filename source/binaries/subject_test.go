package binaries

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
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
		if r.Name != c.Name || part != intOr(c.Part) || total != intOr(c.Total) || file != intOr(c.File) || files != intOr(c.Files) {
			t.Errorf("%s: %q\n read name %q part %d/%d file %d/%d\n want name %q part %d/%d file %d/%d",
				c.Source, c.Subject, r.Name, part, total, file, files, c.Name, intOr(c.Part), intOr(c.Total), intOr(c.File), intOr(c.Files))
			continue
		}
		right[src]++
	}
	t.Logf("read right by source: %v of %v", right, all)
}
