package binaries

import (
	"bytes"
	"encoding/xml"
	"strconv"
	"strings"
	"time"
)

// NZB is the NZB 1.1 document of a release's files: a <head> with the
// release's name (meta title), poster, size in bytes and one meta group
// a group, then one <file> a file (by file counter, then name), its
// segments by part number.
func NZB(r Release, files []File) []byte {
	return appendNZB(make([]byte, 0, nzbSize(files)), r, files)
}

// appendNZB appends the NZB of a release's files to buf.
func appendNZB(buf []byte, r Release, files []File) []byte {
	b := bytes.NewBuffer(buf)
	var num [20]byte
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?>` + "\n")
	b.WriteString(`<!DOCTYPE nzb PUBLIC "-//newzBin//DTD NZB 1.1//EN" "http://www.newzbin.com/DTD/nzb/nzb-1.1.dtd">` + "\n")
	b.WriteString(`<nzb xmlns="http://www.newzbin.com/DTD/2003/nzb">` + "\n")
	b.WriteString(" <head>\n")
	b.WriteString(`  <meta type="title">` + esc(r.Name) + "</meta>\n")
	b.WriteString(`  <meta type="poster">` + esc(r.Poster) + "</meta>\n")
	b.WriteString(`  <meta type="size">` + strconv.FormatInt(r.Bytes, 10) + "</meta>\n")
	for _, g := range r.Groups {
		b.WriteString(`  <meta type="group">` + esc(g) + "</meta>\n")
	}
	b.WriteString(" </head>\n")
	for _, f := range sortedFiles(files) {
		if len(f.Segments) == 0 {
			continue
		}
		date := "0"
		if t, err := time.Parse(time.RFC3339, f.Posted); err == nil {
			date = strconv.FormatInt(t.Unix(), 10)
		}
		b.WriteString(` <file poster="` + esc(f.Poster) + `" date="` + date + `" subject="` + esc(f.Subject) + "\">\n")
		b.WriteString("  <groups>\n")
		for _, g := range f.Groups {
			b.WriteString("   <group>" + esc(g) + "</group>\n")
		}
		b.WriteString("  </groups>\n  <segments>\n")
		for _, s := range f.Segments {
			id := strings.TrimSuffix(strings.TrimPrefix(s.MessageID, "<"), ">")
			b.WriteString(`   <segment bytes="`)
			b.Write(strconv.AppendInt(num[:0], s.Bytes, 10))
			b.WriteString(`" number="`)
			b.Write(strconv.AppendInt(num[:0], int64(s.Number), 10))
			b.WriteString(`">`)
			b.WriteString(esc(id))
			b.WriteString("</segment>\n")
		}
		b.WriteString("  </segments>\n </file>\n")
	}
	b.WriteString("</nzb>\n")
	return b.Bytes()
}

// nzbSize is about the bytes of the NZB of files, to allocate once.
func nzbSize(files []File) int {
	n := 512
	for _, f := range files {
		n += 256 + len(f.Subject) + len(f.Poster) + 48*len(f.Groups)
		for _, s := range f.Segments {
			n += 64 + len(s.MessageID)
		}
	}
	return n
}

// sortedFiles orders a release's files by file counter, then name, then
// key.
func sortedFiles(files []File) []File {
	out := append([]File(nil), files...)
	num := func(f File) int {
		if f.File == nil {
			return -1
		}
		return *f.File
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0; j-- {
			a, b := out[j-1], out[j]
			if num(a) < num(b) || num(a) == num(b) && (a.Name < b.Name || a.Name == b.Name && a.Key <= b.Key) {
				break
			}
			out[j-1], out[j] = b, a
		}
	}
	return out
}

// esc escapes text for XML, dropping characters XML 1.0 cannot hold.
// Text of printable ASCII without a character to escape, as message ids
// and most subjects are, is its own escape.
func esc(s string) string {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\'' && c != '&' && c != '<' && c != '>'
	}
	if plain {
		return s
	}
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF {
			return r
		}
		return -1
	}, s)))
	return b.String()
}
