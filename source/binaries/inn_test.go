package binaries

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
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
	t.Parallel()
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
		for k, r := range recs.Releases {
			if r.NZB != nil {
				nzbs[k], _ = os.ReadFile(filepath.Join(dir, "nzb", *r.NZB))
			}
		}
		return recs, nzbs
	}
	// unsuffixed is the records with each NZB named without the suffix
	// that keeps releases of one name apart: which of them is written
	// first, and so has the name plain, depends on the order of reading.
	unsuffixed := func(recs Records) *records {
		out := &records{Files: recs.Files, Releases: map[string]Release{}}
		for k, r := range recs.Releases {
			if r.NZB != nil {
				dir, file, _ := strings.Cut(*r.NZB, "/")
				plain := dir + "/" + nzbBase(file, k) + ".nzb"
				r.NZB = &plain
			}
			out.Releases[k] = r
		}
		return out
	}
	want, wantNZB := run(pass{"forward", forward(1 << 20), false})
	if len(want.Files) < 25 || len(wantNZB) < 5 {
		t.Fatalf("one pass: %d files, %d NZBs; the case is too easy", len(want.Files), len(wantNZB))
	}
	for _, p := range []pass{{"backfill", backfill, true}, {"ranges of 5, reloaded", forward(5), true}} {
		got, gotNZB := run(p)
		g, w := &records{Files: got.Files, Releases: got.Releases}, &records{Files: want.Files, Releases: want.Releases}
		if p.name == "backfill" {
			g, w = unsuffixed(got), unsuffixed(want)
		}
		if diff := g.same(w); diff != "" {
			t.Errorf("%s: %s", p.name, diff)
		}
		for key, body := range wantNZB {
			if !bytes.Equal(gotNZB[key], body) {
				t.Errorf("%s: NZB of %s:\n%s\nwant\n%s", p.name, key, gotNZB[key], body)
			}
		}
		if len(gotNZB) != len(wantNZB) {
			t.Errorf("%s: %d NZBs, want %d", p.name, len(gotNZB), len(wantNZB))
		}
	}
}

// TestRetryMissingINN cancels part 5 of a 10-part yEnc file in INN, so
// OVER skips its number: the worker asks for it again over the next
// ranges (--retry-missing 2), then counts it lost, and the file is
// written incomplete with the 9 parts there are.
func TestRetryMissingINN(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := fmt.Sprintf("alt.binaries.lh.rec.retry%d", time.Now().UnixNano())
	if err := s.NewGroups(ctx, g); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	arts := usenettest.YEncArticles(g, "r <r@lh.example>", "retry", []usenettest.File{{Name: "retry.bin", Data: bytes.Repeat([]byte("x"), 1000)}}, 100)
	for i := 0; i < 6; i++ {
		arts = append(arts, usenettest.Article{Group: g, From: "chat <c@lh.example>", Subject: "chat", Body: "hello"})
	}
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}
	fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer fresh.Close()
	hs, _, err := fresh.Overview(ctx, g, 5, 5)
	if err != nil || len(hs) != 1 {
		t.Fatalf("OVER 5: %v, %v", hs, err)
	}
	if err := s.CancelID(ctx, hs[0].MessageID); err != nil {
		t.Fatal(err)
	}
	reader := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer reader.Close()
	deadline, _ := ctx.Deadline()
	poll.Until(t, time.Until(deadline), "the cancel of article 5 to take", func() error {
		hs, _, err := reader.Overview(ctx, g, 4, 6)
		if err == nil && len(hs) != 2 {
			err = fmt.Errorf("article 5 still answered: %v", hs)
		}
		return err
	})
	var ups []Update
	sink := sinkFunc(func(_ context.Context, u []Update) error { ups = append(ups, u...); return nil })
	ix := &Indexer{Source: reader, Sink: sink, Batch: 100, RetryMissing: 2}
	w := NewWindow(g)
	w.IncompleteAfter = 3
	for _, r := range [][2]int64{{1, 7}, {8, 12}, {13, 16}} {
		if err := ix.Index(ctx, w, r[0], r[1], nil); err != nil {
			t.Fatal(err)
		}
	}
	out := newRecords()
	out.take(ups)
	var f File
	for _, x := range out.Files {
		f = x
	}
	if w.Lost != 1 || len(w.Missing) != 0 || len(out.Files) != 1 || f.Complete || f.Parts != 9 || *f.Total != 10 {
		t.Errorf("lost %d, missing %v, files %+v; want article 5 lost after 2 tries and retry.bin written with 9 of 10 parts", w.Lost, w.Missing, out.Files)
	}
}

// sinkFunc is a Sink that hands the updates to a function (the test's
// own record keeping).
type sinkFunc func(context.Context, []Update) error

func (f sinkFunc) Write(ctx context.Context, _ Lease, u []Update) error { return f(ctx, u) }

// plainSource is a news server read one OVER at a time: the Indexer's
// own batches, not the client's pipelined read.
type plainSource struct{ c *nntp.Client }

func (p plainSource) Overview(ctx context.Context, g string, lo, hi int64) ([]nntp.Header, int, error) {
	return p.c.Overview(ctx, g, lo, hi)
}

// TestIndexStoppedINN stops the Indexer in the middle of a range, as a
// worker told to stop does, read plain, pipelined and compressed from
// INN: the stop lands while a batch's records are being written (the
// sink refuses an ended context, as SQLite does). Index returns the
// context's error without a panic, the batch the window took is written
// whole and reported, the window reaches no further than the progress,
// and the NZBs it changed are on disk.
func TestIndexStoppedINN(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := fmt.Sprintf("alt.binaries.lh.rec.stop%d", time.Now().UnixNano())
	if err := s.NewGroups(ctx, g); err != nil {
		t.Fatal(err)
	}
	poster := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer poster.Close()
	if err := usenettest.Post(ctx, poster, usenettest.Generated(g, 20, 4)); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"plain", "pipelined", "compressed"} {
		c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, NoCompress: mode != "compressed"})
		var src OverviewSource = c
		if mode == "plain" {
			src = plainSource{c}
		}
		dir := t.TempDir()
		nzb, err := NewNZBWriter(dir)
		if err != nil {
			t.Fatal(err)
		}
		stop, stopNow := context.WithCancel(ctx)
		writes := 0
		var ups []Update
		sink := sinkFunc(func(wctx context.Context, u []Update) error {
			if writes++; writes == 3 {
				stopNow()
			}
			if err := wctx.Err(); err != nil {
				return err
			}
			ups = append(ups, u...)
			return nil
		})
		ix := &Indexer{Source: src, Sink: sink, NZB: nzb, Batch: 8, NZBEvery: time.Hour}
		w := NewWindow(g)
		var next int64
		err = func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return ix.Index(stop, w, 1, 80, func(n, _ int64) { next = n })
		}()
		c.Close()
		if !errors.Is(err, context.Canceled) || next <= 1 || next > 80 {
			t.Errorf("%s: Index returned %v at %d; want the stop's context.Canceled in the middle", mode, err, next)
			continue
		}
		if len(w.Read) != 1 || w.Read[0].Lo != 1 || w.Read[0].Hi != next-1 {
			t.Errorf("%s: the window read %v, the progress is %d: a window saved now runs ahead of its records", mode, w.Read, next)
		}
		for _, u := range ups {
			if u.Release.NZB == nil {
				continue
			}
			body, err := os.ReadFile(filepath.Join(dir, *u.Release.NZB))
			if err != nil || !bytes.Contains(body, []byte(strings.Trim(u.Files[len(u.Files)-1].Segments[0].MessageID, "<>"))) {
				t.Errorf("%s: the NZB %s after the stop: %v\n%s", mode, *u.Release.NZB, err, body)
			}
		}
		if len(ups) == 0 {
			t.Errorf("%s: no records before the stop", mode)
		}
	}
}
