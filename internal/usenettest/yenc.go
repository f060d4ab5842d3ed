package usenettest

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"strings"
)

// YEnc encodes data as yEnc 1.3 body lines of at most lineLen encoded
// characters: each byte plus 42, with NUL, LF, CR and '=' escaped ('='
// then the byte plus 64), and a TAB or space at either end of a line and
// a '.' that starts one escaped too, so no server or reader alters them.
func YEnc(data []byte, lineLen int) []byte {
	var b bytes.Buffer
	col := 0
	for i, c := range data {
		o := c + 42
		esc := o == 0 || o == '\n' || o == '\r' || o == '='
		if (o == '\t' || o == ' ') && (col == 0 || col >= lineLen-1 || i == len(data)-1) || o == '.' && col == 0 {
			esc = true
		}
		if esc {
			b.WriteByte('=')
			o += 64
			col++
		}
		b.WriteByte(o)
		col++
		if col >= lineLen && i < len(data)-1 {
			b.WriteString("\r\n")
			col = 0
		}
	}
	return b.Bytes()
}

// File is a file to post in yEnc parts.
type File struct {
	Name string
	Data []byte
}

// YEncArticles is the articles of a multi-part yEnc post of files (the
// "[k/n] - "name" yEnc (p/P)" subjects posters' tools write), each file
// split in parts of at most partSize bytes, to groups (comma-separated
// for a cross-post), from from; subject prefixes every subject (a
// post's name). Each part's =yend has its pcrc32, the last one the
// file's crc32 too.
func YEncArticles(groups, from, subject string, files []File, partSize int) []Article {
	var out []Article
	for k, f := range files {
		parts := max(1, (len(f.Data)+partSize-1)/partSize)
		crc := crc32.ChecksumIEEE(f.Data)
		for p := 1; p <= parts; p++ {
			lo, hi := (p-1)*partSize, min(p*partSize, len(f.Data))
			chunk := f.Data[lo:hi]
			var body bytes.Buffer
			fmt.Fprintf(&body, "=ybegin part=%d total=%d line=128 size=%d name=%s\r\n", p, parts, len(f.Data), f.Name)
			fmt.Fprintf(&body, "=ypart begin=%d end=%d\r\n", lo+1, hi)
			body.Write(YEnc(chunk, 128))
			fmt.Fprintf(&body, "\r\n=yend size=%d part=%d pcrc32=%08x", len(chunk), p, crc32.ChecksumIEEE(chunk))
			if p == parts {
				fmt.Fprintf(&body, " crc32=%08x", crc)
			}
			s := fmt.Sprintf(`%s [%02d/%02d] - "%s" yEnc (%d/%d)`, subject, k+1, len(files), f.Name, p, parts)
			out = append(out, Article{Group: groups, From: from, Subject: strings.TrimSpace(s), Body: body.String()})
		}
	}
	return out
}
