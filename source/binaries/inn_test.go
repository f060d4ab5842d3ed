package binaries

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestBackfillAfterForwardINN reads INN groups (the fixed set, yEnc
// posts cross-posted to two groups, a file missing a part, generated
// files) three ways through the Indexer: one uninterrupted forward pass;
// the newer half first and then the older half backfilled in ranges read
// downwards; and a pass whose window is saved and loaded between ranges
// (as a takeover does). All end with the same last record of each file
// and release key, and the same NZBs.
func TestBackfillAfterForwardINN(t *testing.T) {
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("alt.binaries.lh.rec.bf%d", time.Now().UnixNano())
	a, b := prefix+".a", prefix+".b"
	if err := s.NewGroups(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 2})
	defer src.Close()
	arts := usenettest.Fixed(prefix)
	arts = append(arts, usenettest.YEncArticles(a+","+b, "poster <p@lh.example>", "bf.post", []usenettest.File{
		{Name: "bf.part1.rar", Data: bytes.Repeat([]byte("leasehold"), 500)}, {Name: "bf.vol0+1.par2", Data: []byte("par2")}}, 1000)...)
	ten := usenettest.YEncArticles(a, "ten <ten@lh.example>", "", []usenettest.File{{Name: "ten.bin", Data: bytes.Repeat([]byte{1, 2, 3}, 1000)}}, 300)
	arts = append(arts, append(ten[:4], ten[5:]...)...)
	arts = append(arts, usenettest.Generated(a, 20, 4)...)
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}
	fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer fresh.Close()

	type pass struct {
		name   string
		ranges func(high int64) [][2]int64
		reload bool
	}
	forward := func(size int64) func(int64) [][2]int64 {
		return func(high int64) [][2]int64 {
			var rs [][2]int64
			for lo := int64(1); lo <= high; lo += size {
				rs = append(rs, [2]int64{lo, min(lo+size-1, high)})
			}
			return rs
		}
	}
	backfill := func(high int64) [][2]int64 {
		mid := high / 2
		rs := [][2]int64{{mid, high}}
		for hi := mid - 1; hi >= 1; hi -= 6 {
			rs = append(rs, [2]int64{max(hi-5, 1), hi})
		}
		return rs
	}
	run := func(p pass) (Records, map[string][]byte) {
		dir := t.TempDir()
		sink, err := OpenJSONL(filepath.Join(dir, "out.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		nzb, err := NewNZBWriter(filepath.Join(dir, "nzb"))
		if err != nil {
			t.Fatal(err)
		}
		ix := &Indexer{Source: fresh, Sink: sink, NZB: nzb, Batch: 4, RetryMissing: 2,
			TailEnd: func(ctx context.Context, g string) (int64, error) {
				gi, err := fresh.Group(ctx, g)
				return gi.High, err
			}}
		for _, g := range []string{a, b} {
			gi, err := fresh.Group(ctx, g)
			if err != nil {
				t.Fatal(err)
			}
			w := NewWindow(g)
			w.IncompleteAfter = 10
			for _, r := range p.ranges(gi.High) {
				if err := ix.Index(ctx, w, r[0], r[1], nil); err != nil {
					t.Fatal(err)
				}
				if p.reload {
					var buf bytes.Buffer
					w.Save(&buf)
					w = NewWindow(g)
					if err := w.Load(&buf); err != nil {
						t.Fatal(err)
					}
				}
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
	want, wantNZB := run(pass{"forward", forward(1 << 20), false})
	if len(want.Files) < 25 || len(wantNZB) < 5 {
		t.Fatalf("one pass: %d files, %d NZBs; the case is too easy", len(want.Files), len(wantNZB))
	}
	for _, p := range []pass{{"backfill", backfill, true}, {"ranges of 5, reloaded", forward(5), true}} {
		got, gotNZB := run(p)
		if diff := (&records{Files: got.Files, Releases: got.Releases}).same(&records{Files: want.Files, Releases: want.Releases}); diff != "" {
			t.Errorf("%s: %s", p.name, diff)
		}
		for path, body := range wantNZB {
			if !bytes.Equal(gotNZB[path], body) {
				t.Errorf("%s: NZB %s:\n%s\nwant\n%s", p.name, path, gotNZB[path], body)
			}
		}
		if len(gotNZB) != len(wantNZB) {
			t.Errorf("%s: %d NZBs, want %d", p.name, len(gotNZB), len(wantNZB))
		}
	}
}
