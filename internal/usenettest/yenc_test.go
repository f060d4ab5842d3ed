package usenettest

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// yDecode is the yEnc decoding a downloader does: drop line ends, an '='
// takes 64 off the next byte, then 42 off every byte.
func yDecode(enc []byte) []byte {
	var out []byte
	esc := false
	for _, c := range enc {
		switch {
		case c == '\r' || c == '\n':
			continue
		case c == '=' && !esc:
			esc = true
			continue
		case esc:
			c -= 64
			esc = false
		}
		out = append(out, c-42)
	}
	return out
}

// TestYEnc: every byte value round-trips; no line is longer than asked,
// starts with a '.', or starts or ends with a space or TAB; the parts of
// a post carry their pcrc32 and the last one the file's crc32.
func TestYEnc(t *testing.T) {
	data := make([]byte, 0, 70000)
	for i := 0; i < 256; i++ {
		data = append(data, byte(i), byte(i), '.', ' ', '\t', byte(i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for len(data) < cap(data) {
		data = append(data, byte(rng.Uint32()))
	}
	enc := YEnc(data, 128)
	if got := yDecode(enc); !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d bytes back of %d", len(got), len(data))
	}
	for i, line := range strings.Split(string(enc), "\r\n") {
		if len(line) > 129 || line == "" || line[0] == '.' || strings.ContainsAny(line[:1], " \t") || strings.ContainsAny(line[len(line)-1:], " \t") {
			t.Errorf("line %d: %q", i, line)
		}
		if strings.ContainsAny(line, "\x00\r\n") {
			t.Errorf("line %d has NUL, CR or LF", i)
		}
	}
	arts := YEncArticles("alt.binaries.lh.rec.y", "p <p@lh>", "post", []File{{Name: "a.bin", Data: data[:5000]}}, 2000)
	if len(arts) != 3 || arts[2].Subject != `post [01/01] - "a.bin" yEnc (3/3)` {
		t.Fatalf("%d articles, last %q", len(arts), arts[len(arts)-1].Subject)
	}
	var whole []byte
	for i, a := range arts {
		lines := strings.Split(a.Body, "\r\n")
		body := []byte(strings.Join(lines[2:len(lines)-1], "\r\n"))
		part := yDecode(body)
		whole = append(whole, part...)
		end := lines[len(lines)-1]
		if !strings.Contains(end, "pcrc32="+strconv.FormatUint(uint64(crc32.ChecksumIEEE(part)), 16)) && !strings.Contains(end, "pcrc32="+leftPad(crc32.ChecksumIEEE(part))) {
			t.Errorf("part %d: %q lacks its pcrc32", i+1, end)
		}
	}
	if !bytes.Equal(whole, data[:5000]) || !strings.HasSuffix(arts[2].Body, "crc32="+leftPad(crc32.ChecksumIEEE(data[:5000]))) {
		t.Errorf("the parts do not make the file, or the last lacks its crc32: %q", arts[2].Body[len(arts[2].Body)-60:])
	}
}

func leftPad(v uint32) string {
	s := strconv.FormatUint(uint64(v), 16)
	return strings.Repeat("0", 8-len(s)) + s
}
