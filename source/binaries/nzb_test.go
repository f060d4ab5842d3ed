package binaries

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/source/nntp"
	"golang.org/x/sys/unix"
)

// TestNZBLinear: a release that grows over many batches of one range
// (one poster's files of one announced count, 200 files of 5 parts read
// 10 articles a batch), due from its start (its first file misses a part
// and is written incomplete), has its NZB written within 3x the size of
// the final NZBs, and the NZBs on disk at the range's end are the last
// records' exactly. (Written every batch, as before, it was 50x.)
func TestNZBLinear(t *testing.T) {
	t.Parallel()
	const group = "alt.binaries.lh.rec.lin"
	var hs []nntp.Header
	for f := 1; f <= 200; f++ {
		for p := 1; p <= 5; p++ {
			if f == 1 && p == 3 {
				continue
			}
			n := int64(len(hs) + 1)
			hs = append(hs, nntp.Header{Number: n, Subject: fmt.Sprintf(`big [%d/200] - "big.part%03d.rar" yEnc (%d/5)`, f, f, p),
				From: "p <p@lh>", MessageID: fmt.Sprintf("<%d@lh>", n), Bytes: 700000, Date: "Mon, 7 Dec 2026 00:00:00 +0000"})
		}
	}
	dir := t.TempDir()
	nzb, err := NewNZBWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]Release{}
	files := map[string]File{}
	sink := sinkFunc(func(_ context.Context, ups []Update) error {
		for _, u := range ups {
			last[u.Release.Key] = u.Release
			for _, f := range u.ChangedFiles() {
				files[f.Key] = f
			}
		}
		return nil
	})
	ix := &Indexer{Source: sliceSource(hs), Sink: sink, NZB: nzb, Batch: 10}
	w := NewWindow(group)
	w.IncompleteAfter = 8
	if err := ix.Index(context.Background(), w, 1, int64(len(hs)), nil); err != nil {
		t.Fatal(err)
	}
	var final int64
	for k, r := range last {
		if r.NZB == nil {
			continue
		}
		var fs []File
		for _, f := range files {
			if f.Release == k {
				fs = append(fs, f)
			}
		}
		body, err := os.ReadFile(filepath.Join(dir, *r.NZB))
		if err != nil || string(body) != string(NZB(r, fs)) {
			t.Errorf("the NZB of %s at the range's end is not its last record's: %v", r.Name, err)
		}
		final += int64(len(body))
	}
	written, _ := nzb.Written()
	if final == 0 || written > 3*final {
		t.Errorf("%d bytes of NZBs written for %d bytes of final NZBs; want at most 3x", written, final)
	}
	t.Logf("%d bytes written for %d bytes of NZBs (%.2fx)", written, final, float64(written)/float64(final))
}

// sliceSource is an OverviewSource over headers in memory.
type sliceSource []nntp.Header

func (s sliceSource) Overview(_ context.Context, _ string, lo, hi int64) ([]nntp.Header, int, error) {
	var out []nntp.Header
	for _, h := range s {
		if h.Number >= lo && h.Number <= hi {
			out = append(out, h)
		}
	}
	return out, 0, nil
}

// TestNZBNames: NZBs are named after their release, made safe for file
// systems; a second release of one name gets a suffix of its key, kept
// by a new writer (a restart) from the directory's names.
func TestNZBNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"Alpha.2024":             "Alpha.2024",
		"a/b\\c:d*e?f":           "a_b_c_d_e_f",
		"..hidden":               "hidden",
		"":                       "release",
		"CON":                    "_CON",
		"x\x00y\x1fz. ":          "xyz",
		strings.Repeat("é", 150): strings.Repeat("é", 100),
	} {
		if got := safeName(name); got != want {
			t.Errorf("safeName(%q) = %q, want %q", name, got, want)
		}
	}
	dir := t.TempDir()
	const group = "alt.binaries.lh.rec.names"
	rel := func(key, poster string) Update {
		r := Release{Key: key, Name: "holiday", Poster: poster, Group: group, Groups: []string{group}, Complete: true}
		f := File{Key: key + "f", Release: key, Group: group, Groups: []string{group}, Poster: poster, Complete: true,
			Segments: []Segment{{Number: 1, MessageID: "<" + key + "@lh>", Bytes: 1}}}
		return Update{Release: r, Files: []File{f}, Changed: []bool{true}}
	}
	first := strings.Repeat("a", 32)
	second := strings.Repeat("b", 32)
	n, _ := NewNZBWriter(dir)
	ups := []Update{rel(first, "alice"), rel(second, "bob")}
	if err := n.Write(group, ups); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if *ups[0].Release.NZB != group+"/holiday.nzb" || *ups[1].Release.NZB != group+"/holiday.bbbbbbbb.nzb" {
		t.Fatalf("names %s and %s", *ups[0].Release.NZB, *ups[1].Release.NZB)
	}
	again, _ := NewNZBWriter(dir)
	ups = []Update{rel(second, "bob"), rel(first, "alice")}
	if err := again.Write(group, ups); err != nil {
		t.Fatal(err)
	}
	if err := again.Flush(group); err != nil {
		t.Fatal(err)
	}
	if *ups[1].Release.NZB != group+"/holiday.nzb" || *ups[0].Release.NZB != group+"/holiday.bbbbbbbb.nzb" {
		t.Errorf("after a restart: names %s and %s; want each release's own", *ups[1].Release.NZB, *ups[0].Release.NZB)
	}
	on, _ := filepath.Glob(filepath.Join(dir, group, "*.nzb"))
	if len(on) != 2 {
		t.Errorf("NZBs on disk: %v", on)
	}
}

// TestSkipsCounted: an article without a Message-ID never becomes a
// segment (its part is missing, the file incomplete) and a subject over
// MaxSubject is read from its first MaxSubject bytes, each counted by
// reason with the lines a source could not read; the log says so once
// with an example.
func TestSkipsCounted(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxSubject) + ` - "long.bin" yEnc (1/1)`
	hs := []nntp.Header{
		{Number: 1, Subject: `"two.bin" yEnc (1/2)`, From: "p", MessageID: "<1@lh>", Bytes: 10},
		{Number: 2, Subject: `"two.bin" yEnc (2/2)`, From: "p", MessageID: "", Bytes: 10},
		{Number: 3, Subject: long, From: "p", MessageID: "<3@lh>", Bytes: 10},
	}
	var got []File
	sink := sinkFunc(func(_ context.Context, ups []Update) error {
		for _, u := range ups {
			got = append(got, u.ChangedFiles()...)
		}
		return nil
	})
	var log strings.Builder
	skips := &Skips{Log: slog.New(slog.NewTextHandler(&log, nil))}
	ix := &Indexer{Source: sliceSource(hs), Sink: sink, Skips: skips, RetryMissing: 2, TailEnd: func(context.Context, string) (int64, error) { return 3, nil }}
	w := NewWindow("alt.binaries.lh.rec.skips")
	if err := ix.Index(context.Background(), w, 1, 3, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		for _, s := range f.Segments {
			if s.MessageID == "" {
				t.Errorf("%s has a segment without a Message-ID", f.Name)
			}
		}
		if f.Name == "two.bin" && (f.Complete || f.Parts != 1) {
			t.Errorf("two.bin: %+v; want part 2 missing", f)
		}
	}
	if c := skips.Counts(); c[SkipNoMessageID] != 1 || c[SkipSubjectTooLong] != 1 || len(w.Missing) != 0 {
		t.Errorf("counted %v, missing %v; want one of each reason, nothing to ask again", c, w.Missing)
	}
	if n := strings.Count(log.String(), "overview lines skipped"); n != 1 || !strings.Contains(log.String(), "example=") {
		t.Errorf("logged %d times:\n%s", n, log.String())
	}
	if s := cutSubject("ab\u00e9", 3); s != "ab" {
		t.Errorf("a cut inside a UTF-8 sequence: %q", s)
	}
}

// TestNZBWriteFailure: an NZB the writing goroutine fails to write (its
// group's directory gone under it) fails the group's next Flush and
// Write, so no window goes up past it, until the group's Reset starts
// over; other groups go on.
func TestNZBWriteFailure(t *testing.T) {
	n, err := NewNZBWriter(filepath.Join(t.TempDir(), "nzb"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	rel := func(group, key string) []Update {
		r := Release{Key: key, Name: key, Poster: "p", Group: group, Groups: []string{group}, Complete: true}
		f := File{Key: key + "f", Release: key, Group: group, Groups: []string{group}, Poster: "p", Complete: true,
			Segments: []Segment{{Number: 1, MessageID: "<" + key + "@lh>", Bytes: 1}}}
		return []Update{{Release: r, Files: []File{f}, Changed: []bool{true}}}
	}
	const group, other = "alt.binaries.lh.rec.fail", "alt.binaries.lh.rec.fine"
	for _, g := range []string{group, other} {
		if err := n.Write(g, rel(g, "first")); err != nil {
			t.Fatal(err)
		}
		if err := n.Flush(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(n.Dir, group)); err != nil {
		t.Fatal(err)
	}
	if err := n.Write(group, rel(group, "second")); err != nil {
		t.Fatalf("handing over an NZB failed at once: %v", err)
	}
	if err := n.Flush(group); err == nil {
		t.Fatal("Flush succeeded though an NZB of the group was not written")
	}
	if err := n.Write(group, rel(group, "third")); err == nil {
		t.Error("Write succeeded after an NZB of the group was not written")
	}
	if err := n.Write(other, rel(other, "second")); err != nil {
		t.Errorf("another group's Write: %v", err)
	}
	if err := n.Flush(other); err != nil {
		t.Errorf("another group's Flush: %v", err)
	}
	n.Reset(group)
	if err := n.Write(group, rel(group, "fourth")); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if err := n.Flush(group); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.Dir, group, "fourth.nzb")); err != nil {
		t.Errorf("after Reset: %v", err)
	}
}

// TestNZBEscape: the text of an NZB is escaped alike whether it takes
// esc's plain path or the whole one: XML's five special characters,
// tabs and line ends as character references, characters XML 1.0
// cannot hold dropped, bytes that are not UTF-8 as U+FFFD.
func TestNZBEscape(t *testing.T) {
	for in, want := range map[string]string{
		"part1of20.123@bench":     "part1of20.123@bench",
		`a "b" & 'c' <d>`:         "a &#34;b&#34; &amp; &#39;c&#39; &lt;d&gt;",
		"tab\there\nline\rend":    "tab&#x9;here&#xA;line&#xD;end",
		"nul\x00del\x7f":          "nuldel\x7f",
		"caf\xc3\xa9 \xff \uFFFE": "café \uFFFD ",
		">":                       "&gt;",
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNZBBothWays: an NZB is the same file whether it is made without a
// name and linked in (a new one) or written to a temporary name and
// renamed (one replaced, or a file system without O_TMPFILE), and
// neither way leaves a temporary file.
func TestNZBBothWays(t *testing.T) {
	for _, tmpfile := range []bool{true, false} {
		n, err := NewNZBWriter(filepath.Join(t.TempDir(), "nzb"))
		if err != nil {
			t.Fatal(err)
		}
		n.noTmpfile.Store(!tmpfile)
		const group = "alt.binaries.lh.rec.ways"
		var ups []Update
		for i := range 3 {
			key := fmt.Sprintf("%032x", i)
			r := Release{Key: key, Name: fmt.Sprintf("way%d", i), Poster: "p", Group: group, Groups: []string{group}, Complete: true}
			f := File{Key: key + "f", Release: key, Group: group, Groups: []string{group}, Poster: "p", Complete: true,
				Segments: []Segment{{Number: 1, MessageID: fmt.Sprintf("<%d@lh>", i), Bytes: 1}}}
			ups = append(ups, Update{Release: r, Files: []File{f}, Changed: []bool{true}})
		}
		// Written twice: made, then replaced by the same release's
		// later record (a second file).
		for round := range 2 {
			if round == 1 {
				for i := range ups {
					f := ups[i].Files[0]
					f.Key, f.Segments = f.Key+"2", []Segment{{Number: 1, MessageID: fmt.Sprintf("<%d.2@lh>", i), Bytes: 2}}
					ups[i].Files = append(ups[i].Files, f)
				}
			}
			if err := n.Write(group, ups); err != nil {
				t.Fatal(err)
			}
			if err := n.Flush(group); err != nil {
				t.Fatal(err)
			}
			for _, u := range ups {
				body, err := os.ReadFile(filepath.Join(n.Dir, *u.Release.NZB))
				if err != nil || !bytes.Equal(body, NZB(u.Release, u.Files)) {
					t.Errorf("O_TMPFILE %v, round %d: %s is not its release's NZB: %v\n%s", tmpfile, round, *u.Release.NZB, err, body)
				}
			}
		}
		if left, _ := filepath.Glob(filepath.Join(n.Dir, group, ".nzb-*")); len(left) != 0 {
			t.Errorf("O_TMPFILE %v: temporary files left: %v", tmpfile, left)
		}
		if tmpfile && n.noTmpfile.Load() {
			t.Log("this file system makes no file without a name: both rounds went by a temporary name")
		}
		n.Close()
	}
}

// TestNZBGroupsSpread: on a file system that keeps the mark (ext4), the
// NZB directory is marked the top of a directory hierarchy (chattr +T),
// so its group directories are placed apart from the machine's other
// directories.
func TestNZBGroupsSpread(t *testing.T) {
	base := t.TempDir()
	// flags are dir's file flags; a file system without them skips.
	flags := func(dir string) uint32 {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		f, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		if err != nil {
			t.Skipf("this file system keeps no flags: %v", err)
		}
		return f
	}
	probe := filepath.Join(base, "probe")
	if err := os.Mkdir(probe, 0o700); err != nil {
		t.Fatal(err)
	}
	spreadGroups(probe)
	if flags(probe)&topDirFlag == 0 {
		t.Skip("this file system keeps no top directory mark")
	}
	n, err := NewNZBWriter(filepath.Join(base, "nzb"))
	if err != nil {
		t.Fatal(err)
	}
	if f := flags(n.Dir); f&topDirFlag == 0 {
		t.Errorf("the NZB directory's flags are %#x: not marked the top of a hierarchy", f)
	}
}

// TestNZBSyncBehind: a range's end (Wait) starts syncing what was
// written in the background, so the Flush before a window upload has
// less to wait for; a directory written again while that sync ran is
// still synced by the next Flush, not taken for synced.
func TestNZBSyncBehind(t *testing.T) {
	t.Parallel()
	n, err := NewNZBWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	const group = "alt.binaries.lh.rec.behind"
	dir := filepath.Join(n.Dir, group)
	unsynced := func() (uint64, bool) {
		n.smu.Lock()
		defer n.smu.Unlock()
		c, ok := n.unsynced[dir]
		return c, ok
	}
	if err := n.Write(group, oneRelease(group, "first")); err != nil {
		t.Fatal(err)
	}
	if err := n.Wait(group); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, "the background sync of the range's NZBs", func() bool {
		_, ok := unsynced()
		return !ok
	})

	if err := n.Write(group, oneRelease(group, "second")); err != nil {
		t.Fatal(err)
	}
	// A sync that began after "second" was written and ends after
	// "third" was: the directory stays unsynced.
	began, _ := unsynced()
	if err := n.Write(group, oneRelease(group, "third")); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.drain()
	n.mu.Unlock()
	if err := n.syncDirs(map[string]uint64{dir: began}); err != nil {
		t.Fatal(err)
	}
	if _, ok := unsynced(); !ok {
		t.Fatal("a directory written during a sync is taken for synced")
	}
	if err := n.Flush(group); err != nil {
		t.Fatal(err)
	}
	if c, ok := unsynced(); ok {
		t.Errorf("after Flush the group's directory is unsynced (written %d)", c)
	}
}

// TestNZBClaimsFirst: a Write's claims go to the names file before any
// NZB that bears them: when the claims cannot be written, neither is the
// NZB (a restart would take it for another's file and name the release
// apart), and the group's next Wait fails.
func TestNZBClaimsFirst(t *testing.T) {
	t.Parallel()
	n, err := NewNZBWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	const group = "alt.binaries.lh.rec.claims"
	if err := n.Write(group, oneRelease(group, "first")); err != nil {
		t.Fatal(err)
	}
	if err := n.Wait(group); err != nil {
		t.Fatal(err)
	}
	// The names file, open for appending, swapped for one open only for
	// reading: the next claim's write fails.
	nm := n.names[group]
	ro, err := os.Open(nm.file.Name())
	if err != nil {
		t.Fatal(err)
	}
	nm.file.Close()
	nm.file = ro
	if err := n.Write(group, oneRelease(group, "second")); err != nil {
		t.Fatalf("handing over failed at once: %v", err)
	}
	if err := n.Wait(group); err == nil {
		t.Error("Wait succeeded though the claims were not written")
	}
	if _, err := os.Stat(filepath.Join(n.Dir, group, "second.nzb")); err == nil {
		t.Error("the NZB was written though its name's claim was not")
	}
}

// oneRelease is the update of a complete release of one file, key its
// key and name.
func oneRelease(group, key string) []Update {
	r := Release{Key: key, Name: key, Poster: "p", Group: group, Groups: []string{group}, Complete: true}
	f := File{Key: key + "f", Release: key, Group: group, Groups: []string{group}, Poster: "p", Complete: true,
		Segments: []Segment{{Number: 1, MessageID: "<" + key + "@lh>", Bytes: 1}}}
	return []Update{{Release: r, Files: []File{f}, Changed: []bool{true}}}
}
