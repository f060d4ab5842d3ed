package binaries

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/source/nntp"
)

// headers makes articles 1..n: files of parts parts by posters
// interleaved, every sixth article a plain text one, some parts missing,
// and a slow file whose ten parts come 110 articles apart.
func headers(n int, parts int) []nntp.Header {
	var hs []nntp.Header
	posters := []string{"alice", "bob", "erin"}
	for i := 1; i <= n; i++ {
		if k := (i - 50) / 110; i >= 50 && (i-50)%110 == 0 && k < 10 {
			hs = append(hs, nntp.Header{Number: int64(i), Subject: fmt.Sprintf(`"slow.bin" yEnc (%d/10)`, k+1), From: "slow", Bytes: 1})
			continue
		}
		if i%6 == 0 {
			hs = append(hs, nntp.Header{Number: int64(i), Subject: "chat", From: "carol"})
			continue
		}
		if i%53 == 0 {
			continue // expired
		}
		k := i / (parts * len(posters))
		p := 1 + (i/len(posters))%parts
		from := posters[i%len(posters)]
		hs = append(hs, nntp.Header{Number: int64(i), Subject: fmt.Sprintf(`"f%d.rar" yEnc (%d/%d)`, k, p, parts),
			From: from, MessageID: fmt.Sprintf("<%d@x>", i), Bytes: int64(100 + i), Date: "Thu, 03 Dec 2026 10:00:00 +0000"})
	}
	return hs
}

// feed reads articles lo..hi of hs into w in batches of batch ids,
// saving and loading the window between batches when reload is set.
func feed(t *testing.T, w *Window, hs []nntp.Header, lo, hi, batch int64, reload bool) []File {
	t.Helper()
	var out []File
	for b := lo; b <= hi; b += batch {
		e := min(b+batch-1, hi)
		var in []nntp.Header
		for _, h := range hs {
			if h.Number >= b && h.Number <= e {
				in = append(in, h)
			}
		}
		out = append(out, w.Add(b, e, in)...)
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
	return out
}

func saved(t *testing.T, w *Window) []byte {
	var b bytes.Buffer
	if err := w.Save(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestWindowReplay: a window ends the same, and completes the same files,
// whatever the batches, with the window saved and loaded between them or
// not, with ageing and the cap at work; articles read again change
// nothing; a replay from a saved window emits what the uninterrupted pass
// emitted after that point.
func TestWindowReplay(t *testing.T) {
	hs := headers(3000, 7)
	fresh := func() *Window {
		w := NewWindow("alt.test")
		w.MaxDistance, w.MaxOpen = 120, 12
		return w
	}
	base := fresh()
	want := feed(t, base, hs, 1, 3000, 3000, false)
	slow := slices.IndexFunc(want, func(f File) bool { return f.Name == "slow.bin" })
	if len(want) < 50 || base.Expired == 0 || base.Open() == 0 || slow < 0 {
		t.Fatalf("the case is too easy: %d complete (slow.bin at %d), %d expired, %d open", len(want), slow, base.Expired, base.Open())
	}
	for _, c := range []struct {
		batch  int64
		reload bool
	}{{1, false}, {7, true}, {100, false}, {999, true}} {
		t.Run(fmt.Sprintf("Batch%dReload%v", c.batch, c.reload), func(t *testing.T) {
			w := fresh()
			got := feed(t, w, hs, 1, 3000, c.batch, c.reload)
			if !slices.EqualFunc(got, want, filesSame) || !bytes.Equal(saved(t, w), saved(t, base)) {
				t.Errorf("%d files, window %d open; want %d, %d", len(got), w.Open(), len(want), base.Open())
			}
		})
	}
	t.Run("ReadAgain", func(t *testing.T) {
		w := fresh()
		feed(t, w, hs, 1, 3000, 50, false)
		if again := feed(t, w, hs, 1000, 2000, 10, false); len(again) != 0 || !bytes.Equal(saved(t, w), saved(t, base)) {
			t.Errorf("articles read again completed %d files or changed the window", len(again))
		}
	})
	t.Run("Takeover", func(t *testing.T) {
		w := fresh()
		before := feed(t, w, hs, 1, 1400, 100, false)
		snap := saved(t, w)
		feed(t, w, hs, 1401, 2100, 100, false) // the killed holder's work after its last snapshot
		next := NewWindow("alt.test")
		if err := next.Load(bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		after := feed(t, next, hs, 1401, 3000, 33, false)
		if got := append(before, after...); !slices.EqualFunc(got, want, filesSame) || !bytes.Equal(saved(t, next), saved(t, base)) {
			t.Errorf("after a takeover: %d files, want %d", len(got), len(want))
		}
	})
}

func filesSame(a, b File) bool {
	return a.Key == b.Key && a.Name == b.Name && a.Posted == b.Posted && a.Bytes == b.Bytes && slices.Equal(a.Segments, b.Segments)
}

func TestLoadRefuses(t *testing.T) {
	w := NewWindow("alt.a")
	w.Add(1, 3, headers(3, 7))
	snap := saved(t, w)
	for name, c := range map[string]struct {
		group string
		body  []byte
	}{
		"OtherGroup": {"alt.b", snap},
		"NotJSON":    {"alt.a", []byte("{")},
		"Version":    {"alt.a", []byte(`{"version":2,"group":"alt.a"}`)},
		"Spans":      {"alt.a", []byte(`{"version":1,"group":"alt.a","read":[[5,9],[1,2]]}`)},
	} {
		into := NewWindow(c.group)
		into.Add(1, 1, headers(1, 7))
		before := saved(t, into)
		if err := into.Load(bytes.NewReader(c.body)); err == nil || !bytes.Equal(saved(t, into), before) {
			t.Errorf("%s: %v, want refused and the window kept", name, err)
		}
	}
}

// TestSinks: the SQLite output keeps one row a key, the last written, so
// a file written twice (a takeover, a repost) is one row; the JSON-lines
// output drops a line cut off by a crash before appending.
func TestSinks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := NewWindow("alt.a")
	files := feed(t, w, headers(400, 3), 1, 400, 400, false)
	if len(files) < 10 {
		t.Fatalf("%d files", len(files))
	}
	t.Run("SQLite", func(t *testing.T) {
		s, err := OpenSQLite(filepath.Join(dir, "b.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, batch := range [][]File{files[:5], files, files[3:]} {
			if err := s.Write(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Files(ctx)
		if err != nil || len(got) != len(files) {
			t.Fatalf("%d rows, %v; want %d", len(got), err, len(files))
		}
		byKey := map[string]File{}
		for _, f := range got {
			byKey[f.Key] = f
		}
		for _, f := range files {
			if g := byKey[f.Key]; !filesSame(g, f) || g.Group != "alt.a" {
				t.Errorf("row %s: %+v, want %+v", f.Key, g, f)
			}
		}
	})
	t.Run("JSONLCutLine", func(t *testing.T) {
		path := filepath.Join(dir, "b.jsonl")
		j, err := OpenJSONL(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Write(ctx, files[:2]); err != nil {
			t.Fatal(err)
		}
		j.Close()
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(`{"group":"alt.a","key":"cut`)
		f.Close()
		j, err = OpenJSONL(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Write(ctx, files[2:4]); err != nil {
			t.Fatal(err)
		}
		j.Close()
		raw, _ := os.ReadFile(path)
		got, err := ReadJSONL(bytes.NewReader(raw))
		if err != nil || len(got) != 4 || bytes.Count(raw, []byte("\n")) != 4 {
			t.Errorf("%d files, %v:\n%s", len(got), err, raw)
		}
	})
}

// BenchmarkWindowSize reports what a window costs per open part in its
// gzipped snapshot (bytes/part) and how fast it takes headers: 20,000
// open files of 20 parts, each half read, with Message-IDs and subjects
// of real lengths (24 random hex digits in a Message-ID).
func BenchmarkWindowSize(b *testing.B) {
	const files, parts = 20000, 20
	var hs []nntp.Header
	n := int64(0)
	for p := 1; p <= parts/2; p++ {
		for f := 0; f < files; f++ {
			n++
			id := sha256.Sum256(fmt.Appendf(nil, "%d/%d", f, p))
			hs = append(hs, nntp.Header{Number: n,
				Subject:   fmt.Sprintf(`[%d/%d] - "some.release.name.2026.part%03d.rar" yEnc (%d/%d)`, f%40+1, 40, f, p, parts),
				From:      fmt.Sprintf("poster%d <poster%d@example.com>", f%50, f%50),
				MessageID: fmt.Sprintf("<%x@powerpost2000AA.local>", id[:12]), // random, as posters make them
				Bytes:     739000 + int64(f%1000), Date: "Thu, 03 Dec 2026 10:00:00 +0000"})
		}
	}
	var w *Window
	for b.Loop() {
		w = NewWindow("alt.binaries.test")
		w.Add(1, n, hs)
	}
	var raw, gz bytes.Buffer
	w.Save(&raw)
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	zw.Close()
	open := w.OpenParts()
	b.ReportMetric(float64(gz.Len())/float64(open), "gz-bytes/part")
	b.ReportMetric(float64(raw.Len())/float64(open), "json-bytes/part")
	b.ReportMetric(float64(len(hs))*float64(b.N)/b.Elapsed().Seconds(), "headers/s")
}
