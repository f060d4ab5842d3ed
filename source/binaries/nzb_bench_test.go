package binaries

import (
	"fmt"
	"testing"
)

// BenchmarkNZBWrite is one complete release's NZB (one file of 20
// parts, the speed run's shape) written by Write in batches of 50
// releases (an OVER of 1,000 articles), a Flush every 20 batches as a
// window save would: what --nzb adds to a release read. go test -run - -bench NZBWrite ./source/binaries
func BenchmarkNZBWrite(b *testing.B) {
	n, err := NewNZBWriter(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	const group = "alt.binaries.lh.bench.nzb"
	one := 1
	var batch []Update
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("%032x", i)
		f := File{Key: key, Release: key, Group: group, Groups: []string{group}, Poster: "poster <p@example.com>",
			Subject: fmt.Sprintf(`[1/1] - "bench%06d.rar" yEnc (1/20)`, i), Name: fmt.Sprintf("bench%06d.rar", i),
			File: &one, Files: &one, Complete: true, Posted: "2026-12-01T00:00:00Z"}
		for p := 1; p <= 20; p++ {
			f.Segments = append(f.Segments, Segment{Number: p, Article: int64(i*20 + p), MessageID: fmt.Sprintf("<part%dof20.%d@bench>", p, i), Bytes: 740000})
		}
		u := Update{Release: Release{Key: key, Name: fmt.Sprintf("bench%06d", i), Poster: f.Poster, Group: group, Groups: f.Groups,
			Files: 1, TotalFiles: &one, CompleteFiles: 1, Complete: true, Bytes: 20 * 740000, Posted: f.Posted}, Files: []File{f}, Changed: []bool{true}}
		batch = append(batch, u)
		if len(batch) < 50 && i < b.N-1 {
			continue
		}
		if err := n.Write(group, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
		if i%1000 == 999 {
			if err := n.Flush(group); err != nil {
				b.Fatal(err)
			}
		}
	}
}
