package binaries

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/source/nntp"
)

// records keeps the last record of each key, as a reader of the output
// does.
type records struct {
	Files    map[string]File
	Releases map[string]Release
	lines    int
}

func newRecords() *records {
	return &records{Files: map[string]File{}, Releases: map[string]Release{}}
}

func (r *records) take(ups []Update) {
	for _, u := range ups {
		for _, f := range u.ChangedFiles() {
			r.Files[f.Key] = f
			r.lines++
		}
		if !u.FilesOnly {
			r.Releases[u.Release.Key] = u.Release
			r.lines++
		}
	}
}

// same reports the first difference between two outputs' last records.
func (r *records) same(o *records) string {
	if len(r.Files) != len(o.Files) || len(r.Releases) != len(o.Releases) {
		return fmt.Sprintf("%d files and %d releases, against %d and %d", len(r.Files), len(r.Releases), len(o.Files), len(o.Releases))
	}
	for k, f := range r.Files {
		if !reflect.DeepEqual(f, o.Files[k]) {
			return fmt.Sprintf("file %s:\n %+v\n %+v", k, f, o.Files[k])
		}
	}
	for k, rel := range r.Releases {
		if !reflect.DeepEqual(rel, o.Releases[k]) {
			return fmt.Sprintf("release %s:\n %+v\n %+v", k, rel, o.Releases[k])
		}
	}
	return ""
}

// readRange reads articles lo..hi of hs into w as the Indexer does: in
// batches, Due at the range's end, Flush when it ends the tail; reload
// saves and loads the window between batches.
func readRange(t *testing.T, w *Window, hs []nntp.Header, lo, hi, batch, tail int64, reload bool, out *records) {
	t.Helper()
	for b := lo; b <= hi; b += batch {
		e := min(b+batch-1, hi)
		// hs is in article order: the batch is one run of it.
		i := sort.Search(len(hs), func(i int) bool { return hs[i].Number >= b })
		j := sort.Search(len(hs), func(i int) bool { return hs[i].Number > e })
		in := hs[i:max(i, j)]
		out.take(w.Add(b, e, in))
		if e == hi {
			out.take(w.Due())
			if hi >= tail {
				out.take(w.Flush())
			}
		}
		if reload {
			var buf bytes.Buffer
			if err := w.Save(&buf); err != nil {
				t.Fatal(err)
			}
			nw := NewWindow(w.Group)
			if err := nw.Load(&buf); err != nil {
				t.Fatal(err)
			}
			*w = *nw
		}
	}
}

func saved(t *testing.T, w *Window) []byte {
	var b bytes.Buffer
	if err := w.Save(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// post makes the headers of a post: files of a release, each of parts
// parts, posted from article number first on, in groups (Xref).
type post struct {
	subject string // with %d for the file counter and %s for the name, %%d/%%d for the part counter
	names   []string
	parts   int
}

// mixed is a realistic group: a 15-file release (13 rars, 2 par2)
// cross-posted to two groups, an obfuscated [PRiVATE] post, an RFC 2047
// subject, a doubled counter, a 10-part file missing part 7, a repost of
// one file's part (a second copy), chat, with dates out of order.
func mixed(group, other string) []nntp.Header {
	var hs []nntp.Header
	n := int64(0)
	add := func(subject, from string, xref bool, day, hour int) {
		n++
		h := nntp.Header{Number: n, Subject: subject, From: from, MessageID: fmt.Sprintf("<%d.%s@lh>", n, group), Bytes: 1000 + n,
			Date: fmt.Sprintf("Thu, %02d Dec 2026 %02d:00:00 +0000", day, hour)}
		if xref {
			h.Xref = fmt.Sprintf("news.example %s:%d %s:%d", group, n, other, n+1000)
		}
		hs = append(hs, h)
	}
	for f := 1; f <= 15; f++ {
		name := fmt.Sprintf("show.s01e01.part%02d.rar", f)
		if f > 13 {
			name = fmt.Sprintf("show.s01e01.vol%02d+02.par2", f-14)
		}
		for p := 1; p <= 3; p++ {
			add(fmt.Sprintf(`show s01e01 [%02d/15] - "%s" yEnc (%d/3) 3000`, f, name, p), "poster <p@lh>", true, 3, 10+p%2)
		}
		add("Re: chat", "talker <t@lh>", false, 3, 10)
	}
	for p := 1; p <= 4; p++ {
		add(fmt.Sprintf(`[PRiVATE]-[WtFnZb]-[real.name.mkv]-[1/1] - "" yEnc 9786 (%d/4)`, p), "anon <a@lh>", false, 5, 10)
	}
	add("=?UTF-8?B?U3DDpHRlci5ta3Y=?= yEnc (1/1)", "utf <u@lh>", false, 5, 10)
	for p := 1; p <= 2; p++ {
		add(fmt.Sprintf(`"doubled.bin" yEnc (%d/2) (%d/2)`, p, p), "dbl <d@lh>", false, 5, 10)
	}
	for p := 1; p <= 10; p++ {
		if p != 7 {
			add(fmt.Sprintf(`"ten.bin" yEnc (%d/10)`, p), "ten <ten@lh>", false, 6, 10)
		}
	}
	add(`"doubled.bin" yEnc (1/2) (1/2)`, "dbl <d@lh>", false, 5, 9) // a repost of part 1: the lower copy (and its date) wins
	for i := 0; i < 30; i++ {
		add("chat", "talker <t@lh>", false, 7, 10)
	}
	return hs
}

// TestWindowRecords: the records a mixed group gives (USENET.md's
// records and rules 1-5 and 7).
func TestWindowRecords(t *testing.T) {
	t.Parallel()
	hs := mixed("alt.binaries.lh.rec.a", "alt.binaries.lh.rec.b")
	w := NewWindow("alt.binaries.lh.rec.a")
	out := newRecords()
	readRange(t, w, hs, 1, int64(len(hs)), 1000, int64(len(hs)), false, out)
	byName := map[string]File{}
	for _, f := range out.Files {
		byName[f.Name] = f
	}
	var show Release
	for _, r := range out.Releases {
		if r.Name == "show s01e01" {
			show = r
		}
	}
	if show.Files != 15 || show.TotalFiles == nil || *show.TotalFiles != 15 || show.CompleteFiles != 15 || !show.Complete ||
		!reflect.DeepEqual(show.Groups, []string{"alt.binaries.lh.rec.a", "alt.binaries.lh.rec.b"}) || show.Posted != "2026-12-03T10:00:00Z" {
		t.Errorf("the 15-file release: %+v", show)
	}
	par := byName["show.s01e01.vol01+02.par2"]
	if par.File == nil || *par.File != 15 || par.Release != show.Key || !par.Complete || par.Subject != `show s01e01 [15/15] - "show.s01e01.vol01+02.par2" yEnc (1/3) 3000` {
		t.Errorf("a par2 volume: %+v", par)
	}
	if f := byName["real.name.mkv"]; !f.Complete || f.Parts != 4 || f.File == nil || *f.File != 1 {
		t.Errorf("the [PRiVATE] post: %+v", f)
	}
	if f := byName["Später.mkv"]; !f.Complete || f.Subject != "Später.mkv yEnc (1/1)" {
		t.Errorf("the RFC 2047 subject: %+v", f)
	}
	d := byName["doubled.bin"]
	if !d.Complete || d.Parts != 2 || d.Posted != "2026-12-05T10:00:00Z" || d.Segments[0].Article != 66 {
		t.Errorf("the doubled counter and its repost: %+v", d)
	}
	ten := byName["ten.bin"]
	if ten.Complete || ten.Parts != 9 || ten.Total == nil || *ten.Total != 10 {
		t.Errorf("the file missing a part: %+v", ten)
	}
	if w.Copies != 1 || w.Incomplete != 1 {
		t.Errorf("copies %d, incomplete %d; want 1 and 1", w.Copies, w.Incomplete)
	}
	// The same articles read in the other group of the cross-post give
	// the same records of the cross-posted files, and no release record:
	// the release's home group is the first group, whose window writes it.
	other := make([]nntp.Header, 0, len(hs))
	for _, h := range hs {
		if h.Xref != "" {
			h.Number += 1000
			other = append(other, h)
		}
	}
	wb := NewWindow("alt.binaries.lh.rec.b")
	ob := newRecords()
	readRange(t, wb, other, 1001, 2000, 1000, 2000, false, ob)
	if diff := ob.same(&records{Files: only(out.Files, show.Key), Releases: map[string]Release{}}); diff != "" {
		t.Errorf("the cross-post read in its other group: %s", diff)
	}
	// The file missing a part is completed by a part that comes later.
	late := nntp.Header{Number: int64(len(hs)) + 1, Subject: `"ten.bin" yEnc (7/10)`, From: "ten <ten@lh>", MessageID: "<late@lh>", Bytes: 5, Date: "Sun, 06 Dec 2026 09:00:00 +0000"}
	more := newRecords()
	more.take(w.Add(late.Number, late.Number, []nntp.Header{late}))
	if f := more.Files[ten.Key]; !f.Complete || f.Parts != 10 || f.Posted != "2026-12-06T09:00:00Z" {
		t.Errorf("the late part: %+v", f)
	}
}

func only(files map[string]File, release string) map[string]File {
	out := map[string]File{}
	for k, f := range files {
		if f.Release == release {
			out[k] = f
		}
	}
	return out
}

// TestWindowReplay: the last records and the window are the same
// whatever the batches, with the window saved and loaded between them or
// not; articles read again change nothing; a backfill after a forward
// pass ends with the same last records as one uninterrupted pass.
func TestWindowReplay(t *testing.T) {
	t.Parallel()
	hs := append(mixed("alt.binaries.lh.rec.a", "alt.binaries.lh.rec.b"), headers(3000, 7)...)
	for i := range hs {
		hs[i].Number = int64(i + 1)
	}
	n := int64(len(hs))
	fresh := func() *Window {
		w := NewWindow("alt.binaries.lh.rec.a")
		w.MaxDistance, w.IncompleteAfter = 100000, 400
		return w
	}
	base, want := fresh(), newRecords()
	readRange(t, base, hs, 1, n, n, n, false, want)
	if len(want.Files) < 50 || base.Incomplete == 0 {
		t.Fatalf("the case is too easy: %d files, %d incomplete", len(want.Files), base.Incomplete)
	}
	for _, c := range []struct {
		batch  int64
		reload bool
	}{{1, false}, {7, true}, {100, false}, {999, true}} {
		t.Run(fmt.Sprintf("Batch%dReload%v", c.batch, c.reload), func(t *testing.T) {
			w, got := fresh(), newRecords()
			for lo := int64(1); lo <= n; lo += 500 {
				readRange(t, w, hs, lo, min(lo+499, n), c.batch, n, c.reload, got)
			}
			if diff := got.same(want); diff != "" {
				t.Error(diff)
			}
		})
	}
	t.Run("ReadAgain", func(t *testing.T) {
		w, got := fresh(), newRecords()
		readRange(t, w, hs, 1, n, 50, n, false, got)
		before := saved(t, w)
		again := newRecords()
		readRange(t, w, hs, 1000, 2000, 10, n+1, false, again)
		if again.lines != 0 || !bytes.Equal(saved(t, w), before) {
			t.Errorf("articles read again wrote %d lines or changed the window", again.lines)
		}
	})
	t.Run("Backfill", func(t *testing.T) {
		w, got := fresh(), newRecords()
		mid := n / 2
		readRange(t, w, hs, mid, n, 100, n, false, got)
		for hi := mid - 1; hi >= 1; hi -= 300 {
			readRange(t, w, hs, max(hi-299, 1), hi, 100, n, true, got)
		}
		if diff := got.same(want); diff != "" {
			t.Error(diff)
		}
	})
}

// TestRetryMissing: an article an OVER answer skipped is asked again;
// one that comes on the retry completes its file, one that never comes
// is given up after the limit.
func TestRetryMissing(t *testing.T) {
	t.Parallel()
	var hs []nntp.Header
	for p := 1; p <= 5; p++ {
		hs = append(hs, nntp.Header{Number: int64(p), Subject: fmt.Sprintf(`"r.bin" yEnc (%d/5)`, p), From: "r", MessageID: fmt.Sprintf("<%d@r>", p), Bytes: 10})
	}
	w := NewWindow("alt.binaries.lh.rec.r")
	skipped := append(append([]nntp.Header{}, hs[:2]...), hs[3:]...) // 3 skipped
	if ups := w.Add(1, 5, skipped); len(ups) != 0 {
		t.Fatalf("wrote %+v", ups)
	}
	w.Skipped(1, 5, skipped)
	if runs := w.MissingSpans(10, 16); !reflect.DeepEqual(runs, []Span{{3, 3}}) {
		t.Fatalf("missing %v, want 3", runs)
	}
	ups := w.Retry([]Span{{3, 3}}, []nntp.Header{hs[2]}, 3)
	if len(ups) != 1 || !ups[0].Files[0].Complete || len(w.Missing) != 0 || w.Retried != 1 {
		t.Errorf("the retried article: %+v, missing %v", ups, w.Missing)
	}
	w.Add(6, 100, []nntp.Header{{Number: 6, Subject: "a"}, {Number: 9, Subject: "b"}, {Number: 99, Subject: "c"}, {Number: 100, Subject: "d"}})
	w.Skipped(6, 100, []nntp.Header{{Number: 6}, {Number: 9}, {Number: 99}, {Number: 100}})
	if spans := w.MissingSpans(10, 1); !reflect.DeepEqual(spans, []Span{{7, 98}}) {
		t.Fatalf("spans %v, want 7..98 (gaps under 10 joined, one span asked)", spans)
	}
	for i := 0; i < 3; i++ {
		w.Retry([]Span{{7, 8}}, nil, 3) // only 7 and 8 asked
	}
	if len(w.Missing) != 89 || w.Lost != 2 || w.Missing[10] != 0 {
		t.Errorf("after three tries of 7..8: %d missing, lost %d; want 89 (10..98) untouched, 2 lost", len(w.Missing), w.Lost)
	}
}

func TestLoadRefuses(t *testing.T) {
	t.Parallel()
	w := NewWindow("alt.a")
	w.Add(1, 3, headers(3, 7))
	snap := saved(t, w)
	for name, c := range map[string]struct {
		group string
		body  []byte
	}{
		"OtherGroup": {"alt.b", snap},
		"NotJSON":    {"alt.a", []byte("{")},
		"Version4":   {"alt.a", []byte(`{"version":4,"group":"alt.a"}`)},
		"Version1Of": {"alt.a", []byte(`{"version":1,"group":"alt.b"}`)},
		"Spans":      {"alt.a", []byte(`{"version":2,"group":"alt.a","read":[[5,9],[1,2]]}`)},
		"NoRelease":  {"alt.a", bytes.Replace(snap, []byte(`"releases":[{`), []byte(`"releases":[],"x":[{`), 1)},
	} {
		into := NewWindow(c.group)
		into.Add(1, 1, headers(1, 7))
		before := saved(t, into)
		if err := into.Load(bytes.NewReader(c.body)); err == nil || !bytes.Equal(saved(t, into), before) {
			t.Errorf("%s: %v, want refused and the window kept", name, err)
		}
	}
}

// TestLoadVersion1: a window saved before files and releases (by the
// worker of the release before) loads: its spans read and counts go on,
// its open file is counted expired, and a later part of that file
// starts a file of its own, written incomplete at the tail's end.
func TestLoadVersion1(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/window-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	w := NewWindow("alt.binaries.lh.rec.v1")
	if err := w.Load(bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if !w.Covered(1) || !w.Covered(5) || w.Covered(6) || w.Top != 5 || w.Headers != 4 || w.Completed != 1 || w.Expired != 1 {
		t.Fatalf("the version 1 window: read %v, top %d, headers %d, completed %d, expired %d", w.Read, w.Top, w.Headers, w.Completed, w.Expired)
	}
	out := newRecords()
	out.take(w.Add(6, 6, []nntp.Header{{Number: 6, Subject: `"b.bin" yEnc (2/3)`, From: "p", MessageID: "<6@p>", Bytes: 10}}))
	out.take(w.Flush())
	if len(out.Files) != 1 {
		t.Fatalf("%d files, want b.bin's later part written incomplete", len(out.Files))
	}
	for _, f := range out.Files {
		if f.Name != "b.bin" || f.Complete || f.Parts != 1 {
			t.Errorf("%+v", f)
		}
	}
}

// TestSinks: JSON lines and SQLite hold the same last records; SQLite
// keeps one row a key, its segments one row a message id (a lower copy
// replaces the other), with indexes on group, poster and posted.
func TestSinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	hs := mixed("alt.binaries.lh.rec.a", "alt.binaries.lh.rec.b")
	w := NewWindow("alt.binaries.lh.rec.a")
	var all []Update
	for lo := int64(1); lo <= int64(len(hs)); lo += 10 {
		hi := min(lo+9, int64(len(hs)))
		var in []nntp.Header
		for _, h := range hs {
			if h.Number >= lo && h.Number <= hi {
				in = append(in, h)
			}
		}
		all = append(all, w.Add(lo, hi, in)...)
	}
	all = append(all, w.Flush()...)
	want := newRecords()
	want.take(all)

	j, err := OpenJSONL(filepath.Join(dir, "out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQLite(filepath.Join(dir, "out.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, u := range all {
		if err := j.Write(ctx, Lease{}, []Update{u}); err != nil {
			t.Fatal(err)
		}
		if err := s.Write(ctx, Lease{}, []Update{u}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	raw, _ := os.ReadFile(filepath.Join(dir, "out.jsonl"))
	got, err := ReadJSONL(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if diff := (&records{Files: got.Files, Releases: got.Releases}).same(want); diff != "" {
		t.Errorf("JSON lines: %s", diff)
	}
	rows, err := s.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := (&records{Files: rows.Files, Releases: rows.Releases}).same(want); diff != "" {
		t.Errorf("SQLite: %s", diff)
	}
	var segs, copies int
	s.db.QueryRow(`SELECT count(*) FROM segments`).Scan(&segs)
	s.db.QueryRow(`SELECT count(*) FROM segments WHERE message_id = '<66.alt.binaries.lh.rec.a@lh>'`).Scan(&copies)
	parts := 0
	for _, f := range want.Files {
		parts += len(f.Segments)
	}
	if segs != parts || copies != 1 {
		t.Errorf("%d segment rows for %d parts, the winning copy's %d; want equal, 1", segs, parts, copies)
	}
	for _, idx := range []string{"files_grp", "files_poster", "files_posted", "releases_grp", "releases_poster", "releases_posted"} {
		var n int
		s.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, idx).Scan(&n)
		if n != 1 {
			t.Errorf("no index %s", idx)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, "out.jsonl")); st.Mode().Perm() != 0o600 {
		t.Errorf("the JSON lines file is %v, want 0600", st.Mode().Perm())
	}
}

// TestNZB: the NZBs of a mixed group are valid NZB 1.1 (xmllint against
// the DTD), list every written file of their release, are rewritten when
// a late part completes a file, and leave no temporary file; a directory
// that cannot be written is refused at once.
func TestNZB(t *testing.T) {
	t.Parallel()
	xmllint, err := exec.LookPath("xmllint")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no xmllint")
		}
		t.Skip("no xmllint (apt-get install libxml2-utils)")
	}
	dir := t.TempDir()
	n, err := NewNZBWriter(filepath.Join(dir, "nzb"))
	if err != nil {
		t.Fatal(err)
	}
	hs := mixed("alt.binaries.lh.rec.a", "alt.binaries.lh.rec.b")
	w := NewWindow("alt.binaries.lh.rec.a")
	ups := append(w.Add(1, int64(len(hs)), hs), w.Flush()...)
	if err := n.Write(w.Group, ups); err != nil {
		t.Fatal(err)
	}
	if err := n.Flush(w.Group); err != nil {
		t.Fatal(err)
	}
	var tenKey, tenNZB string
	written := 0
	for _, u := range ups {
		if u.Release.NZB == nil {
			continue
		}
		written++
		path := filepath.Join(n.Dir, *u.Release.NZB)
		if out, err := exec.Command(xmllint, "--noout", "--nonet", "--dtdvalid", "testdata/nzb-1.1.dtd", path).CombinedOutput(); err != nil {
			t.Errorf("%s is not valid NZB 1.1: %v\n%s", path, err, out)
		}
		body, _ := os.ReadFile(path)
		for _, f := range u.Files {
			if !bytes.Contains(body, []byte(fmt.Sprintf(`<segment bytes="%d" number="1">%s</segment>`, f.Segments[0].Bytes, strings.Trim(f.Segments[0].MessageID, "<>")))) {
				t.Errorf("%s lacks %s's first segment", path, f.Name)
			}
			if f.Name == "ten.bin" {
				tenKey, tenNZB = u.Release.Key, *u.Release.NZB
			}
		}
	}
	if written < 5 || tenKey == "" {
		t.Fatalf("%d NZBs written (the incomplete file's release %q); want one a release", written, tenKey)
	}
	late := nntp.Header{Number: int64(len(hs)) + 1, Subject: `"ten.bin" yEnc (7/10)`, From: "ten <ten@lh>", MessageID: "<late@lh>", Bytes: 5}
	more := w.Add(late.Number, late.Number, []nntp.Header{late})
	if err := n.Write(w.Group, more); err != nil {
		t.Fatal(err)
	}
	if err := n.Flush(w.Group); err != nil {
		t.Fatal(err)
	}
	body, _ := os.ReadFile(filepath.Join(n.Dir, tenNZB))
	if !bytes.Contains(body, []byte(`number="7">late@lh</segment>`)) {
		t.Errorf("the NZB was not rewritten with the late part:\n%s", body)
	}
	left, _ := filepath.Glob(filepath.Join(n.Dir, "*", ".nzb-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o500)
	if os.Geteuid() != 0 {
		if _, err := NewNZBWriter(ro); err == nil {
			t.Error("a directory that cannot be written was taken")
		}
	}
	if _, err := NewNZBWriter(filepath.Join(dir, "nzb", tenNZB)); err == nil {
		t.Error("a file taken for the NZB directory")
	}
}

// TestNZBRemovedWhenNotDue: an NZB written for a release while one of its
// files was incomplete (a takeover's tail end came early) is removed when
// a later record of the release has neither a complete release nor an
// incomplete file, as one uninterrupted pass would never have written it.
func TestNZBRemovedWhenNotDue(t *testing.T) {
	t.Parallel()
	n, err := NewNZBWriter(filepath.Join(t.TempDir(), "nzb"))
	if err != nil {
		t.Fatal(err)
	}
	part := func(num int64, file, p int) nntp.Header {
		return nntp.Header{Number: num, Subject: fmt.Sprintf(`post [%d/2] - "f%d.bin" yEnc (%d/2)`, file, file, p), From: "p", MessageID: fmt.Sprintf("<%d@p>", num), Bytes: 10}
	}
	w := NewWindow("alt.binaries.lh.rec.n")
	ups := append(w.Add(1, 1, []nntp.Header{part(1, 1, 1)}), w.Flush()...) // f1 written incomplete
	if err := n.Write(w.Group, ups); err != nil || ups[0].Release.NZB == nil {
		t.Fatalf("%v, %+v: want an NZB for the release with an incomplete file", err, ups)
	}
	path := filepath.Join(n.Dir, *ups[0].Release.NZB)
	ups = w.Add(2, 2, []nntp.Header{part(2, 1, 2)}) // f1 complete, f2 not yet seen
	if err := n.Write(w.Group, ups); err != nil || ups[0].Release.NZB != nil || ups[0].Release.Complete {
		t.Fatalf("%v, %+v", err, ups)
	}
	if err := n.Flush(w.Group); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the NZB of a release neither complete nor with an incomplete file is still there: %v", err)
	}
}

// TestNZBSweepsDeadWritersTemp: a worker killed between writing an NZB's
// temporary file and renaming it leaves the file; the next writer into
// that group's directory removes it, and leaves alone the temporary file
// of a writer still running and any file not of that shape.
func TestNZBSweepsDeadWritersTemp(t *testing.T) {
	t.Parallel()
	n, err := NewNZBWriter(filepath.Join(t.TempDir(), "nzb"))
	if err != nil {
		t.Fatal(err)
	}
	const group = "alt.binaries.lh.rec.s"
	dir := filepath.Join(n.Dir, group)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf(".nzb-%d-111", gone.Process.Pid)
	live := fmt.Sprintf(".nzb-%d-222", os.Getppid())
	other := ".nzb-notapid"
	for _, name := range []string{dead, live, other} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half an nzb"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w := NewWindow(group)
	h := nntp.Header{Number: 1, Subject: `post [1/1] - "f1.bin" yEnc (1/1)`, From: "p", MessageID: "<1@p>", Bytes: 10}
	ups := w.Add(1, 1, []nntp.Header{h})
	if err := n.Write(w.Group, ups); err != nil || len(ups) == 0 || ups[0].Release.NZB == nil {
		t.Fatalf("%v, %+v: want the complete release's NZB", err, ups)
	}
	if err := n.Flush(w.Group); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, dead)); !os.IsNotExist(err) {
		t.Errorf("the temporary NZB of a writer that is gone is still there: %v", err)
	}
	for _, name := range []string{live, other} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}

// poster posts files as today's posting tools do, in article order.
type poster struct {
	group string
	xref  []string // other groups the files go to, each at n+1000
	n     int64
	hs    []nntp.Header
}

// file posts one file of parts parts at t under subject (with %d for
// the part), to the poster's group and, cross-posted, to also.
func (p *poster) file(from, subject string, parts int, t time.Time, also ...string) {
	for k := 1; k <= parts; k++ {
		p.n++
		h := nntp.Header{Number: p.n, Subject: fmt.Sprintf(subject, k), From: from, MessageID: fmt.Sprintf("<%d.%s@lh>", p.n, p.group),
			Bytes: 700 + p.n%100, Date: t.Format(time.RFC1123Z)}
		if len(also) > 0 {
			h.Xref = "news.example " + p.group + ":" + strconv.FormatInt(p.n, 10)
			for _, g := range also {
				h.Xref += fmt.Sprintf(" %s:%d", g, p.n+1000)
			}
		}
		p.hs = append(p.hs, h)
	}
}

// chat posts n articles that are no binaries.
func (p *poster) chat(n int, t time.Time) {
	for range n {
		p.n++
		p.hs = append(p.hs, nntp.Header{Number: p.n, Subject: "chat", From: "talker", MessageID: fmt.Sprintf("<%d.c@lh>", p.n), Date: t.Format(time.RFC1123Z)})
	}
}

var day = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// releasesOf are the release records of poster from, by name.
func (r *records) releasesOf(from string) map[string][]Release {
	out := map[string][]Release{}
	for _, rel := range r.Releases {
		if rel.Poster == from {
			out[rel.Name] = append(out[rel.Name], rel)
		}
	}
	return out
}

// TestReleaseIdentity (rule 3): releases in Nyuu's and ngPost's default
// subject by one poster with the same file count stay apart; a post
// without file counters is one release by its files' base name; a release
// posted in two halves hours and 250,000 articles apart is one release,
// complete, with one key; the same identity posted after the release
// window is a new release with keys of its own; obfuscated one-file posts
// are a release each.
func TestReleaseIdentity(t *testing.T) {
	t.Parallel()
	p := &poster{group: "alt.binaries.lh.rel"}
	for i, name := range []string{"Alpha.2024", "Beta.2024"} {
		for f := 1; f <= 4; f++ {
			p.file("nyuu <n@lh>", fmt.Sprintf(`[%d/4] - "%s.part%d.rar" yEnc (%%d/3)`, f, name, f), 3, day.Add(time.Duration(i)*time.Minute))
		}
	}
	for f := 1; f <= 3; f++ {
		p.file("bare <b@lh>", fmt.Sprintf(`"Delta.2024.part%d.rar" yEnc (%%d/2)`, f), 2, day)
	}
	p.file("bare <b@lh>", `"Delta.2024.vol00+01.par2" yEnc (%d/1)`, 1, day)
	for f := 1; f <= 5; f++ {
		p.file("halves <h@lh>", fmt.Sprintf(`Gamma [%02d/10] - "Gamma.part%02d.rar" yEnc (%%d/2)`, f, f), 2, day)
	}
	p.chat(250000, day.Add(3*time.Hour))
	for f := 6; f <= 10; f++ {
		p.file("halves <h@lh>", fmt.Sprintf(`Gamma [%02d/10] - "Gamma.part%02d.rar" yEnc (%%d/2)`, f, f), 2, day.Add(6*time.Hour))
	}
	for i := range 50 {
		p.file("obf <o@lh>", fmt.Sprintf(`[1/1] - "%032x.rar" yEnc (%%d/1)`, i*7919), 1, day.Add(time.Duration(i)*time.Minute))
	}
	// The same two files again two days later: a new release.
	for _, d := range []time.Duration{0, 48 * time.Hour} {
		for f := 1; f <= 2; f++ {
			p.file("again <a@lh>", fmt.Sprintf(`[%d/2] - "Again.part%d.rar" yEnc (%%d/1)`, f, f), 1, day.Add(d))
		}
	}
	w := NewWindow(p.group)
	out := newRecords()
	readRange(t, w, p.hs, 1, p.n, 1000, p.n, false, out)

	nyuu := out.releasesOf("nyuu <n@lh>")
	for _, name := range []string{"Alpha.2024", "Beta.2024"} {
		if rs := nyuu[name]; len(rs) != 1 || rs[0].Files != 4 || !rs[0].Complete {
			t.Errorf("release %s of Nyuu's default subject: %+v", name, rs)
		}
	}
	if rs := out.releasesOf("bare <b@lh>")["Delta.2024"]; len(rs) != 1 || rs[0].Files != 4 || !rs[0].Complete || rs[0].TotalFiles != nil {
		t.Errorf("the post without file counters: %+v (all: %v)", rs, out.releasesOf("bare <b@lh>"))
	}
	if rs := out.releasesOf("halves <h@lh>")["Gamma"]; len(rs) != 1 || rs[0].Files != 10 || rs[0].CompleteFiles != 10 || !rs[0].Complete {
		t.Errorf("the release posted in two halves: %+v", rs)
	}
	if obf := out.releasesOf("obf <o@lh>"); len(obf) != 50 {
		t.Errorf("50 obfuscated posts: %d releases", len(obf))
	}
	again := out.releasesOf("again <a@lh>")["Again"]
	if len(again) != 2 || again[0].Key == again[1].Key || !again[0].Complete || !again[1].Complete || again[0].Files != 2 || again[1].Files != 2 {
		t.Errorf("one identity posted two days apart: %+v", again)
	}
	files := 0
	for _, f := range out.Files {
		if f.Poster == "again <a@lh>" {
			files++
		}
	}
	if files != 4 {
		t.Errorf("one identity posted two days apart: %d file records, want 4", files)
	}

	// Kill -9 and resume: the window saved and loaded between ranges of
	// 20,000 articles gives the same records.
	rw, resumed := NewWindow(p.group), newRecords()
	for lo := int64(1); lo <= p.n; lo += 20000 {
		readRange(t, rw, p.hs, lo, min(lo+19999, p.n), 5000, p.n, true, resumed)
	}
	if diff := resumed.same(out); diff != "" {
		t.Errorf("resumed from saved windows: %s", diff)
	}
}

// TestReleaseIdentityWtFnZb (rule 3): in the [PRiVATE]-[WtFnZb] shape
// the name stands in the third bracket and the quoted name is empty, so
// nothing outside the counters is the release's own: two one-file posts
// of different files by one poster an hour apart are two releases, each
// of its file's base and complete with 1 of 1 files, not one release of
// 2 files of 1; a four-file post of .partNN.rar, .par2 and .vol par2 of
// one base is one release, apart from another such post of the poster.
func TestReleaseIdentityWtFnZb(t *testing.T) {
	t.Parallel()
	const from = "wtf <w@lh>"
	p := &poster{group: "alt.binaries.lh.wtfnzb"}
	p.file(from, `[PRiVATE]-[WtFnZb]-[Name.mkv]-[1/1] - "" yEnc 9786 (%d/2)`, 2, day)
	p.file(from, `[PRiVATE]-[WtFnZb]-[Other.Name.mkv]-[1/1] - "" yEnc 9786 (%d/2)`, 2, day.Add(time.Hour))
	for i, base := range []string{"Kappa.2024", "Lambda.2024"} {
		for f, name := range []string{base + ".part01.rar", base + ".part02.rar", base + ".par2", base + ".vol00+01.par2"} {
			p.file(from, fmt.Sprintf(`[PRiVATE]-[WtFnZb]-[%s]-[%d/4] - "" yEnc (%%d/2)`, name, f+1), 2, day.Add(time.Duration(2+i)*time.Hour))
		}
	}
	w := NewWindow(p.group)
	out := newRecords()
	readRange(t, w, p.hs, 1, p.n, 100, p.n, false, out)

	rels := out.releasesOf(from)
	for name, files := range map[string]int{"Name": 1, "Other.Name": 1, "Kappa.2024": 4, "Lambda.2024": 4} {
		rs := rels[name]
		if len(rs) != 1 || rs[0].Files != files || rs[0].TotalFiles == nil || *rs[0].TotalFiles != files || !rs[0].Complete {
			t.Errorf("release %s: %+v", name, rs)
		}
	}
	if len(rels) != 4 {
		t.Errorf("%d release names, want Name, Other.Name, Kappa.2024 and Lambda.2024: %v", len(rels), rels)
	}
}

// TestReleaseIdentityTags (rule 3): an advertiser's tag is not the
// release's words, so two town.ag posts of different files by one poster
// with the same file count an hour apart are two releases, each of its
// files' base and complete, not one release of 4 files of 2 named
// "<TOWN><www.town.ag > <partner of www.ssl-news.info >"; so too with a
// bare host's tag (<example.com>, [ usenet-site.net ], (posted via
// newsgroup-host.org)) and with a lone category and no address
// ([MOVIE], [TV] [1080p]), with file counters or without, which named
// every film of a poster "MOVIE" and merged them.
func TestReleaseIdentityTags(t *testing.T) {
	t.Parallel()
	p := &poster{group: "alt.binaries.lh.tags"}
	bases := []string{"Dragons.Den.S11E02", "D.Olivier.Wer.Boeses"}
	shapes := map[string]string{
		"town <t@lh>":     `<TOWN><www.town.ag > <partner of www.ssl-news.info > [%d/2] - "%s" - 288,96 MB yEnc (%%d/2)`,
		"host <h@lh>":     `<example.com> [%d/2] - "%s" yEnc (%%d/2)`,
		"site <s@lh>":     `[ usenet-site.net ]-[ MOVIE ] [%d/2] - "%s" yEnc (%%d/2)`,
		"via <v@lh>":      `(posted via newsgroup-host.org) [%d/2] - "%s" yEnc (%%d/2)`,
		"movie <m@lh>":    `[MOVIE] [%02d/02] - "%s" yEnc (%%d/2)`,
		"tv <tv@lh>":      `[TV] [1080p] [%d/2] - "%s" yEnc (%%d/2)`,
		"bare-tag <b@lh>": `[MOVIE] "%[2]s" yEnc (%%d/2)`, // one file a film, no file counter
	}
	for from, subject := range shapes {
		for i, base := range bases {
			names := []string{base + ".part1.rar", base + ".par2"}
			if from == "bare-tag <b@lh>" {
				names = []string{base + ".mkv"}
			}
			for f, name := range names {
				p.file(from, fmt.Sprintf(subject, f+1, name), 2, day.Add(time.Duration(i)*time.Hour))
			}
		}
	}
	w := NewWindow(p.group)
	out := newRecords()
	readRange(t, w, p.hs, 1, p.n, 100, p.n, false, out)

	for from := range shapes {
		rels, files := out.releasesOf(from), 2
		if from == "bare-tag <b@lh>" {
			files = 1
		}
		for _, name := range bases {
			rs := rels[name]
			if len(rs) != 1 || rs[0].Files != files || !rs[0].Complete {
				t.Errorf("%s: release %s: %+v", from, name, rs)
				continue
			}
			if tf := rs[0].TotalFiles; files == 2 && (tf == nil || *tf != 2) || files == 1 && tf != nil {
				t.Errorf("%s: release %s announces %v files", from, name, tf)
			}
		}
		if len(rels) != 2 {
			t.Errorf("%s: %d release names, want %v: %v", from, len(rels), bases, rels)
		}
	}
}

// TestCrossPostOrder (rule 7): a 5-file release, its 3 rar files posted
// to group a and its 2 par2 files cross-posted to a and b, read by two
// windows writing one output, in either order or interleaved, ends with
// the same records: one release, complete, with 5 files.
func TestCrossPostOrder(t *testing.T) {
	t.Parallel()
	ga, gb := "alt.binaries.lh.xo.a", "alt.binaries.lh.xo.b"
	p := &poster{group: ga}
	p.chat(10, day)
	for f := 1; f <= 3; f++ {
		p.file("x <x@lh>", fmt.Sprintf(`[%d/5] - "Cross.2024.part%d.rar" yEnc (%%d/2)`, f, f), 2, day)
	}
	for f := 4; f <= 5; f++ {
		p.file("x <x@lh>", fmt.Sprintf(`[%d/5] - "Cross.2024.vol0%d+01.par2" yEnc (%%d/1)`, f, f), 1, day.Add(10*time.Minute), gb)
	}
	var inB []nntp.Header
	for _, h := range p.hs {
		if h.Xref != "" {
			h.Number += 1000
			inB = append(inB, h)
		}
	}
	readA := func(out *records) { readRange(t, NewWindow(ga), p.hs, 1, p.n, 4, p.n, false, out) }
	readB := func(out *records) { readRange(t, NewWindow(gb), inB, 1001, 1000+p.n, 4, 1000+p.n, false, out) }
	ab, ba := newRecords(), newRecords()
	readA(ab)
	readB(ab)
	readB(ba)
	readA(ba)
	// Interleaved: batch by batch, b's window ahead.
	mixed := newRecords()
	wa, wb := NewWindow(ga), NewWindow(gb)
	for lo := int64(1); lo <= p.n; lo += 3 {
		readRange(t, wb, inB, 1000+lo, 1000+min(lo+2, p.n), 3, 1000+p.n, false, mixed)
		readRange(t, wa, p.hs, lo, min(lo+2, p.n), 3, p.n, false, mixed)
	}
	if diff := ab.same(ba); diff != "" {
		t.Errorf("a then b against b then a: %s", diff)
	}
	if diff := ab.same(mixed); diff != "" {
		t.Errorf("a then b against interleaved: %s", diff)
	}
	rs := ab.releasesOf("x <x@lh>")["Cross.2024"]
	if len(ab.Releases) != 1 || len(rs) != 1 || rs[0].Files != 5 || !rs[0].Complete || rs[0].Group != ga ||
		!reflect.DeepEqual(rs[0].Groups, []string{ga, gb}) || len(ab.Files) != 5 {
		t.Errorf("the cross-posted release: %+v (%d releases, %d files)", rs, len(ab.Releases), len(ab.Files))
	}
	for _, f := range ab.Files {
		if f.Release != rs[0].Key {
			t.Errorf("file %s names release %s, not %s", f.Name, f.Release, rs[0].Key)
		}
	}
}

// TestLoadVersion2: a window saved before releases were keyed by
// identity and time keeps its spans read and counts; its files not yet
// written are counted expired.
func TestLoadVersion2(t *testing.T) {
	t.Parallel()
	v2 := `{"version":2,"group":"alt.a","max_distance":200000,"max_open":200000,"incomplete_after":20000,"read":[[1,10]],"top":10,
"counts":{"headers":10,"completed":1},"files":[
{"type":"file","key":"f1","release":"r1","group":"alt.a","groups":["alt.a"],"poster":"p","subject":"s","name":"n","parts":1,"total":2,
 "complete":false,"bytes":1,"posted":"2026-12-01T00:00:00Z","segments":[{"number":1,"article":3,"message_id":"<m>","bytes":1}],
 "subject_part":1,"last":3,"written":false,"dates":["2026-12-01T00:00:00Z"]}],
"releases":[{"key":"r1","poster":"p","key_subject":"s","files":["f1"],"last":3}]}`
	w := NewWindow("alt.a")
	if err := w.Load(strings.NewReader(v2)); err != nil {
		t.Fatal(err)
	}
	if !w.Covered(5) || w.Covered(11) || w.Headers != 10 || w.Completed != 1 || w.Expired != 1 || w.Open() != 0 || w.ReleaseWindow != DefaultReleaseWindow {
		t.Errorf("loaded: %+v", w)
	}
	if b := saved(t, w); !bytes.Contains(b, []byte(`"version":3`)) {
		t.Errorf("saved again as %s", b)
	}
}

// TestRules: a group's expressions from the node's rules name the
// release and the file before the built-in reading; the blacklist skips
// posts and counts them; expressions that do not compile or lack their
// named group are refused with where they stand.
func TestRules(t *testing.T) {
	t.Parallel()
	rules, err := ParseRules([]byte(`{"other":1,"usenet":{"groups":{"alt.binaries.lh.rules":{
		"release":"^(?P<release>\\S+) - ","file":"- (?P<name>\\S+) yEnc"}},
		"blacklist":{"posters":["@spam\\.example>$"],"subjects":["(?i)password"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := &poster{group: "alt.binaries.lh.rules"}
	for f := 1; f <= 3; f++ {
		p.file("r <r@lh>", fmt.Sprintf(`Show.S01E0%d - %08x yEnc (%%d/2)`, f%2+1, f*977), 2, day)
	}
	p.file("spam <s@spam.example>", `"spam.rar" yEnc (%d/1)`, 1, day)
	p.file("r <r@lh>", `Password inside - x.rar yEnc (%d/1)`, 1, day)
	w := NewWindow(p.group)
	w.Rules = rules
	out := newRecords()
	readRange(t, w, p.hs, 1, p.n, 100, p.n, false, out)
	rs := out.releasesOf("r <r@lh>")
	if len(rs) != 2 || len(rs["Show.S01E01"]) != 1 || rs["Show.S01E01"][0].Files != 1 || len(rs["Show.S01E02"]) != 1 || rs["Show.S01E02"][0].Files != 2 {
		t.Errorf("releases named by the group's expression: %v", rs)
	}
	for _, f := range out.Files {
		if len(f.Name) != 8 {
			t.Errorf("a file named %q, not by the group's expression", f.Name)
		}
	}
	if w.Blacklisted != 2 {
		t.Errorf("blacklisted %d posts, want 2", w.Blacklisted)
	}
	for body, want := range map[string]string{
		`{"usenet":{"groups":{"g":{"release":"(?P<release>["}}}}`: `groups "g" release`,
		`{"usenet":{"groups":{"g":{"file":"(.+)"}}}}`:             `no group named name`,
		`{"usenet":{"blacklist":{"posters":["a","(b"]}}}`:         `blacklist posters[1]`,
		`{"usenet":{"group":{}}}`:                                 `unknown field "group"`,
		`[1]`:                                                     `not a JSON object`,
	} {
		if _, err := ParseRules([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", body, err, want)
		}
	}
	if r, err := ParseRules([]byte(`{"spam":["x"]}`)); r != nil || err != nil {
		t.Errorf("rules without a Usenet section: %v, %v", r, err)
	}
	// The README's example reads the subject it is given for.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, _ := strings.Cut(string(readme), "```json\n{\"usenet\"")
	example, _, _ = strings.Cut(example, "```")
	ex, err := ParseRules([]byte(`{"usenet"` + example))
	if err != nil {
		t.Fatalf("the README's example: %v", err)
	}
	rd := ex.Read([]string{"alt.binaries.example"}, "Show.Name.S01E02 - 8f3a2c91 yEnc (1/50)")
	if rd.Release != "Show.Name.S01E02" || rd.Name != "8f3a2c91" || rd.Part != 1 || rd.Total != 50 || !ex.Blacklisted("x <x@spam.example>", "") {
		t.Errorf("the README's example reads %+v", rd)
	}
}
