package binaries

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
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
