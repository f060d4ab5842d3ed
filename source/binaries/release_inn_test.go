package binaries

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestReleasesINN posts to INN what today's posting tools post: two
// releases of one poster in Nyuu's default subject with the same file
// count, a post without file counters, a 3,000-byte subject, a release
// whose 3 rar files go to group a and whose 2 par2 files are cross-posted
// to a and b; and reads both groups through the Indexer, a first and b
// first. Both orders end with the same records and NZBs, and every
// release as posted.
func TestReleasesINN(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("alt.binaries.lh.rel.inn%d", time.Now().UnixNano())
	a, b := prefix+".a", prefix+".b"
	if err := s.NewGroups(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	data := func(name string) []byte { return bytes.Repeat([]byte(name), 40) }
	files := func(names ...string) []usenettest.File {
		var out []usenettest.File
		for _, n := range names {
			out = append(out, usenettest.File{Name: n, Data: data(n)})
		}
		return out
	}
	const nyuu = "nyuu <nyuu@lh.example>"
	var arts []usenettest.Article
	for _, r := range []string{"Alpha.2024", "Beta.2024"} {
		arts = append(arts, usenettest.YEncArticles(a, nyuu, "", files(r+".part1.rar", r+".part2.rar", r+".part3.rar", r+".par2"), 400)...)
	}
	for _, n := range []string{"Delta.2024.part1.rar", "Delta.2024.part2.rar", "Delta.2024.vol0+1.par2"} {
		arts = append(arts, usenettest.YEncParts(a, "bare <bare@lh.example>", usenettest.File{Name: n, Data: data(n)}, 400,
			func(p, parts int) string { return fmt.Sprintf(`"%s" yEnc (%d/%d)`, n, p, parts) })...)
	}
	// The long subject is posted folded (INN refuses a header line over
	// 1,000 bytes); the overview has it unfolded, 3,000 bytes and more.
	long := "Omega" + strings.Repeat(strings.Repeat(" long", 19)+"\r\n", 32)
	arts = append(arts, usenettest.YEncArticles(a, "long <long@lh.example>", strings.TrimSuffix(long, "\r\n"), files("Omega.bin"), 400)...)
	cross := files("Cross.part1.rar", "Cross.part2.rar", "Cross.part3.rar", "Cross.vol0+1.par2", "Cross.vol1+1.par2")
	for k, f := range cross {
		groups := a
		if k >= 3 {
			groups = a + "," + b
		}
		arts = append(arts, usenettest.YEncParts(groups, nyuu, f, 400, func(p, parts int) string {
			return fmt.Sprintf(`[%d/5] - "%s" yEnc (%d/%d)`, k+1, f.Name, p, parts)
		})...)
	}
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}
	fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer fresh.Close()
	run := func(groups ...string) (Records, map[string][]byte) {
		dir := t.TempDir()
		sink, err := OpenJSONL(filepath.Join(dir, "out.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		nzb, err := NewNZBWriter(filepath.Join(dir, "nzb"))
		if err != nil {
			t.Fatal(err)
		}
		ix := &Indexer{Source: fresh, Sink: sink, NZB: nzb, Batch: 7,
			TailEnd: func(ctx context.Context, g string) (int64, error) {
				gi, err := fresh.Group(ctx, g)
				return gi.High, err
			}}
		for _, g := range groups {
			gi, err := fresh.Group(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			if err := ix.Index(ctx, NewWindow(g), gi.Low, gi.High, nil); err != nil {
				t.Fatal(err)
			}
		}
		sink.Close()
		raw, _ := os.ReadFile(filepath.Join(dir, "out.jsonl"))
		recs, err := ReadJSONL(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		nzbs := map[string][]byte{}
		for _, r := range recs.Releases {
			if r.NZB != nil {
				nzbs[*r.NZB], _ = os.ReadFile(filepath.Join(dir, "nzb", *r.NZB))
			}
		}
		return recs, nzbs
	}
	ab, abNZB := run(a, b)
	ba, baNZB := run(b, a)
	if diff := (&records{Files: ab.Files, Releases: ab.Releases}).same(&records{Files: ba.Files, Releases: ba.Releases}); diff != "" {
		t.Errorf("a then b against b then a: %s", diff)
	}
	for path, body := range abNZB {
		if !bytes.Equal(baNZB[path], body) {
			t.Errorf("NZB %s differs between the orders", path)
		}
	}
	want := map[string]int{"Alpha.2024": 4, "Beta.2024": 4, "Delta.2024": 3, "Cross": 5}
	got := map[string]int{}
	for _, r := range ab.Releases {
		if !r.Complete || r.NZB == nil {
			t.Errorf("release %s (%d files) complete %v, NZB %v", r.Name, r.Files, r.Complete, r.NZB)
		}
		if strings.HasPrefix(r.Name, "Omega long long") {
			r.Name = "Omega"
		}
		got[r.Name] = r.Files
	}
	want["Omega"] = 1
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("releases (name: files) %v, want %v", got, want)
	}
	for _, f := range ab.Files {
		if f.Name == "Omega.bin" && (len(f.Subject) < 3000 || !f.Complete) {
			t.Errorf("the long subject's file: %d bytes of subject, complete %v", len(f.Subject), f.Complete)
		}
	}
	if len(abNZB) != len(want) || len(baNZB) != len(want) {
		t.Errorf("%d and %d NZBs, want %d", len(abNZB), len(baNZB), len(want))
	}
}
