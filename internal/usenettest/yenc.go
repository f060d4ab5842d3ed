package usenettest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
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
// post's name).
func YEncArticles(groups, from, subject string, files []File, partSize int) []Article {
	var out []Article
	for k, f := range files {
		out = append(out, YEncParts(groups, from, f, partSize, func(p, parts int) string {
			return strings.TrimSpace(fmt.Sprintf(`%s [%02d/%02d] - "%s" yEnc (%d/%d)`, subject, k+1, len(files), f.Name, p, parts))
		})...)
	}
	return out
}

// YEncParts is the articles of one file in yEnc parts of at most
// partSize bytes, with the subjects subject gives. Each part's =yend has
// its pcrc32, the last one the file's crc32 too.
func YEncParts(groups, from string, f File, partSize int, subject func(part, parts int) string) []Article {
	var out []Article
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
		out = append(out, Article{Group: groups, From: from, Subject: subject(p, parts), Body: body.String()})
	}
	return out
}

// Mix is a realistic mix of posts for PREFIX.a (the release also
// cross-posted to PREFIX.b), in posting order, and the files of it that
// are complete (what a downloader must rebuild): a 15-file release of 13
// rar volumes and 2 par2 volumes, an obfuscated [PRiVATE] post, a subject
// in RFC 2047 words, a doubled part counter, a 10-part file whose part 7
// never comes, and a repost of a part.
func Mix(prefix string, seed uint64) ([]Article, []File) {
	a, b := prefix+".a", prefix+".b"
	rng := rand.New(rand.NewPCG(seed, 15))
	data := func(n int) []byte {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		return d
	}
	var arts []Article
	var files []File
	var show []File
	for k := 1; k <= 13; k++ {
		show = append(show, File{fmt.Sprintf("Mix.Show.S01E01.720p.part%02d.rar", k), data(2500 + 100*k)})
	}
	show = append(show, File{"Mix.Show.S01E01.720p.vol00+01.par2", data(700)}, File{"Mix.Show.S01E01.720p.vol01+02.par2", data(1400)})
	arts = append(arts, YEncArticles(a+","+b, "Scene Poster <poster@mix.example>", "Mix.Show.S01E01.720p", show, 1000)...)
	files = append(files, show...)

	private := File{"Mix.Private.Name.2026.mkv", data(3900)}
	arts = append(arts, YEncParts(a, "anon <anon@mix.example>", private, 1000, func(p, parts int) string {
		return fmt.Sprintf(`[PRiVATE]-[WtFnZb]-[%s]-[1/1] - "" yEnc %d (%d/%d)`, private.Name, len(private.Data), p, parts)
	})...)
	files = append(files, private)

	utf := File{"Später.mkv", data(1500)}
	arts = append(arts, YEncParts(a, "utf <utf@mix.example>", utf, 1000, func(p, parts int) string {
		return "=?UTF-8?B?" + base64.StdEncoding.EncodeToString(fmt.Appendf(nil, `"%s" yEnc (%d/%d)`, utf.Name, p, parts)) + "?="
	})...)
	files = append(files, utf)

	doubled := File{"mix.doubled.bin", data(1800)}
	dbl := YEncParts(a, "doubler <dbl@mix.example>", doubled, 1000, func(p, parts int) string {
		return fmt.Sprintf(`"%s" yEnc (%d/%d) (%d/%d)`, doubled.Name, p, parts, p, parts)
	})
	arts = append(arts, dbl...)
	files = append(files, doubled)

	ten := YEncParts(a, "ten <ten@mix.example>", File{"mix.ten.bin", data(5000)}, 500, func(p, parts int) string {
		return fmt.Sprintf(`[1/1] - "mix.ten.bin" yEnc (%d/%d)`, p, parts)
	})
	arts = append(arts, ten[:6]...)
	arts = append(arts, ten[7:]...)

	arts = append(arts, dbl[0]) // the repost: a second copy of part 1
	return arts, files
}
