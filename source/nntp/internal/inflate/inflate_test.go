package inflate

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"
)

// TestAnswersAsTheyArrive feeds the reader what INN 2.7.1 sent on a
// compressed connection, answer by answer (each ends in a partial flush:
// the last bits of its empty block stay at the server), and each answer
// must be readable before the next one is sent, as a client waiting for
// it needs. Go's compress/flate reader waits for the next block instead.
func TestAnswersAsTheyArrive(t *testing.T) {
	answers := []struct{ wire, text string }{
		{"3232345430343030303455803312734af49232f3128b32538bf57232f4ca338b52f59252f39233f41279b90002",
			"211 100015 1 100015 alt.binaries.lh.wire.bench.a\r\n"},
		{"c8c8c844c1bf2cb5a82c33b55c21332f2dbf2837b124333f4f01c85230d43504d23939f9e5c5bc5c0001",
			"224 Overview information for 1-1 follows\r\n"},
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	r := bufio.NewReader(NewReader(pr))
	for _, a := range answers {
		wire, err := hex.DecodeString(a.wire)
		if err != nil {
			t.Fatal(err)
		}
		go pw.Write(wire)
		got := make(chan string, 1)
		go func() {
			line, _ := r.ReadString('\n')
			got <- line
		}()
		select {
		case line := <-got:
			if line != a.text {
				t.Fatalf("read %q, want %q", line, a.text)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not read 5 s after its bytes arrived: the reader waits for the next answer", a.text)
		}
	}
}

// TestSameAsGo: on whole streams the reader gives what Go's does.
func TestSameAsGo(t *testing.T) {
	var text strings.Builder
	for i := range 5000 {
		text.WriteString(strings.Repeat("overview line ", i%7) + "\t<" + strings.Repeat("x", i%50) + ">\r\n")
	}
	for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.HuffmanOnly} {
		var z bytes.Buffer
		w, _ := flate.NewWriter(&z, level)
		for part := range strings.SplitAfterSeq(text.String(), "\n") {
			w.Write([]byte(part))
			if len(part)%3 == 0 {
				w.Flush()
			}
		}
		w.Close()
		got, err := io.ReadAll(NewReader(bytes.NewReader(z.Bytes())))
		if err != nil || string(got) != text.String() {
			t.Errorf("level %d: %d bytes, %v; want the %d bytes written", level, len(got), err, text.Len())
		}
	}
}
