// Package binaries assembles binaries from Usenet article overviews, as
// the worker's output contract (USENET.md) says: it reads a subject into
// a file name, a part counter and a file counter (ReadSubject), gathers
// the parts of a file and the files of a release in a Window, the state
// leasehold carries from range to range, and writes files and releases
// to a Sink (JSON lines or SQLite) and NZBs. Releases close by the
// posted times of their files (Window.ReleaseWindow), never by wall
// time, and memory is bounded by article distance and a cap, so a replay
// after a takeover ends in the same window and emits the same records.
package binaries

import (
	"cmp"
	"errors"
	"io"
	"mime"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/htmlindex"
)

// Reading is what a subject says of a post (USENET.md rules 1 and 2).
type Reading struct {
	// Subject is the subject as posted, RFC 2047 words decoded.
	Subject string
	// Name is the file name a person would give it.
	Name string
	// IsPart is whether the subject has a part counter (or is a yEnc
	// single part); Part is its number, Total the parts announced, 0
	// when the counter says (k/0).
	IsPart      bool
	Part, Total int
	// HasFile is whether the subject has a file counter: File of Files.
	HasFile     bool
	File, Files int
	// KeySubject is the subject with both counters, the name and the
	// size after yEnc blanked: what is left of a post's subject when its
	// files' own words are taken out.
	KeySubject string
	// Release is the release name (USENET.md rule 3): the subject's text
	// outside the counters, the name, a yEnc and sizes, when any is left;
	// else the file name's base (ReleaseBase). Empty when the subject is
	// not a part of a binary.
	Release string
	// FileSubject is what a file is keyed by: the subject with the part
	// counter blanked (its total kept), so every part of a file agrees.
	FileSubject string
	// Undecodable is set when the subject has RFC 2047 words that do not
	// decode (an unknown charset, bad base64): it is read raw.
	Undecodable bool
}

// MaxParts is the most parts a file may claim, and the most files a post
// may: a larger count is not a counter.
const MaxParts = 1 << 16

// MaxSubject bounds the subject a reading looks at: a subject is read
// whole up to it (counters at its end included), a longer one from its
// first MaxSubject bytes.
const MaxSubject = 16 << 10

var (
	// parenCounter is a (k/n) part counter, with spaces allowed inside.
	parenCounter = regexp.MustCompile(`\(\s*(\d{1,6})\s*/\s*(\d{1,6})\s*\)`)
	// bracketCounter is a [k/n] and fileOf a "File k of n": with the
	// (k/n) counters, the file counters.
	bracketCounter = regexp.MustCompile(`\[\s*(\d{1,6})\s*/\s*(\d{1,6})\s*\]`)
	fileOf         = regexp.MustCompile(`(?i)\bfile\s+(\d{1,6})\s+of\s+(\d{1,6})\b`)
	// bracketTail is a [k/n] that ends the subject, only a size after it.
	bracketTail = regexp.MustCompile(`(?i)\[\s*(\d{1,6})\s*/\s*(\d{1,6})\s*\]\s*(?:[\d.,]+\s*[kmg]?b?)?\s*$`)
	// entity is an HTML entity as posters' tools write them, "#34;" too.
	entity = regexp.MustCompile(`&?#(\d{1,5});|&(quot|amp|lt|gt|apos);`)
	// trailingYenc is a "yEnc" (and size) that ends the text before a
	// part counter, with the empty quotes and dashes around it.
	trailingYenc = regexp.MustCompile(`(?i)(?:[\s"-]*\byenc(?:\s+\d+)?)?[\s"-]*$`)
)

// ReadSubject reads a subject (rules 1 and 2 of USENET.md). It never
// fails: a subject it cannot decode is read raw (Undecodable).
func ReadSubject(subject string) Reading {
	if len(subject) > MaxSubject {
		subject = subject[:MaxSubject]
		// A rune cut in two at the end is dropped, not read as Windows-1252.
		for i := 1; i < utf8.UTFMax && i < len(subject); i++ {
			if c := subject[len(subject)-i]; utf8.RuneStart(c) {
				if !utf8.FullRuneInString(subject[len(subject)-i:]) {
					subject = subject[:len(subject)-i]
				}
				break
			}
		}
	}
	if !utf8.ValidString(subject) {
		// Subjects are bytes; one that is not UTF-8 was written in the
		// posting tool's code page, nearly always Windows-1252.
		subject = Windows1252(subject)
	}
	r := Reading{Subject: subject}
	if strings.Contains(subject, "=?") {
		if d, err := decode2047(subject); err != nil {
			r.Undecodable = true
		} else {
			r.Subject = d
		}
	}
	t := clean(r.Subject)

	// The part counter: the last (k/n), an equal one just before it
	// taken with it; else a yEnc single part; else a [k/n] that ends the
	// subject.
	partLo, partHi := -1, -1
	if ms := parenCounter.FindAllStringSubmatchIndex(t, -1); len(ms) > 0 {
		m := ms[len(ms)-1]
		k, n := atoi(t[m[2]:m[3]]), atoi(t[m[4]:m[5]])
		if n <= MaxParts && (n == 0 || k <= n) {
			r.IsPart, r.Part, r.Total = true, k, n
			partLo, partHi = m[0], m[1]
			if len(ms) > 1 {
				p := ms[len(ms)-2]
				if strings.TrimSpace(t[p[1]:m[0]]) == "" && atoi(t[p[2]:p[3]]) == k && atoi(t[p[4]:p[5]]) == n {
					partLo = p[0]
				}
			}
		}
	}
	if !r.IsPart && containsFold(t, "yenc") {
		r.IsPart, r.Part, r.Total = true, 1, 1
	}
	if !r.IsPart {
		if m := bracketTail.FindStringSubmatchIndex(t); m != nil {
			k, n := atoi(t[m[2]:m[3]]), atoi(t[m[4]:m[5]])
			if n >= 1 && n <= MaxParts && k <= n {
				r.IsPart, r.Part, r.Total = true, k, n
				partLo, partHi = m[0], m[1]
			}
		}
	}
	// u is the subject with the part counter taken out: a counter inside
	// the name's quotes or brackets would otherwise name each part apart.
	u, cut := t, 0
	if partLo >= 0 {
		u = t[:partLo] + t[partHi:]
		cut = partHi - partLo
	}
	// at maps a position in u back to t.
	at := func(i int) int {
		if partLo >= 0 && i >= partLo {
			return i + cut
		}
		return i
	}

	nameLo, nameHi := -1, -1 // where the name stands in u
	name := ""
	if lo, hi, ok := quotedName(u, true); ok {
		name, nameLo, nameHi = u[lo:hi], lo, hi
	} else if lo, hi, last, ok := bracketName(u); ok {
		name, nameLo, nameHi = last, lo, hi
	} else if lo, hi, ok := quotedName(u, false); ok {
		name, nameLo, nameHi = u[lo:hi], lo, hi
	}

	// The file counter: a counter before the name (the last one), else
	// one after a bracketed name ([name.mkv]-[1/3]); never the part
	// counter (taken out of u already).
	fcs := fileCounters(u)
	fileLo, fileHi := -1, -1
	take := func(m []int) bool {
		k, n := atoi(u[m[2]:m[3]]), atoi(u[m[4]:m[5]])
		if n < 1 || n > MaxParts || k > n {
			return false
		}
		r.HasFile, r.File, r.Files = true, k, n
		fileLo, fileHi = m[0], m[1]
		return true
	}
	if nameLo >= 0 {
		for i := len(fcs) - 1; i >= 0; i-- {
			if fcs[i][1] <= nameLo && take(fcs[i]) {
				break
			}
		}
		if !r.HasFile {
			for _, m := range fcs {
				if m[0] >= nameHi && take(m) {
					break
				}
			}
		}
	} else {
		// The name is the text before the part counter (after it when
		// nothing stands before), a yEnc and size at its end removed,
		// and after a file counter in it when something is left there.
		lo, hi := 0, len(u)
		if partLo >= 0 {
			hi = partLo
			if strings.TrimSpace(trailingYenc.ReplaceAllString(u[:hi], "")) == "" {
				lo, hi = partLo, len(u)
			}
		}
		hi = lo + len(trailingYenc.ReplaceAllString(u[lo:hi], ""))
		for i := len(fcs) - 1; i >= 0; i-- {
			m := fcs[i]
			if m[0] < lo || m[1] > hi || !take(m) {
				continue
			}
			rest := strings.TrimLeft(u[m[1]:hi], " \t-:")
			if strings.IndexFunc(rest, func(c rune) bool { return unicode.IsLetter(c) || unicode.IsDigit(c) }) >= 0 {
				lo = hi - len(rest)
			}
			break
		}
		for lo < hi && u[lo] == ' ' {
			lo++
		}
		for hi > lo && u[hi-1] == ' ' {
			hi--
		}
		name, nameLo, nameHi = u[lo:hi], lo, hi
	}
	r.Name = name

	// The keys: t with spans blanked, in t's positions.
	blank := func(spans ...span) string {
		spans = slices.Clone(spans)
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
		var b strings.Builder
		prev := 0
		for _, s := range spans {
			if s.lo < prev || s.lo < 0 {
				continue
			}
			b.WriteString(t[prev:s.lo])
			prev = s.hi
		}
		b.WriteString(t[prev:])
		return strings.Join(strings.Fields(b.String()), " ")
	}
	part := span{partLo, partHi}
	if partLo < 0 {
		part = span{-1, -1}
	}
	fs := blank(part)
	if r.IsPart {
		fs += " (/" + strconv.Itoa(r.Total) + ")"
	}
	r.FileSubject = fs
	spans := []span{part}
	if fileLo >= 0 {
		spans = append(spans, span{at(fileLo), at(fileHi)})
	}
	if nameLo >= 0 && nameHi > nameLo {
		spans = append(spans, span{at(nameLo), at(nameHi)})
	}
	r.KeySubject = dropYencSize(blank(spans...))
	if r.IsPart {
		r.Release = releaseName(r.KeySubject, r.Name)
	}
	return r
}

// Windows1252 reads s as Windows-1252: every byte is a character (the
// five the code page leaves undefined are read as the C1 controls), so
// no subject becomes U+FFFD.
func Windows1252(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	for i := 0; i < len(s); i++ {
		r := charmap.Windows1252.DecodeByte(s[i])
		if r == utf8.RuneError {
			r = rune(s[i]) // undefined in the code page: the C1 control
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	// clutter is what a blanked subject keeps of a post's dressing: empty
	// quotes and brackets, yEnc, and sizes (each file of a post has its
	// own).
	clutter = regexp.MustCompile(`(?i)""|\[\s*\]|\(\s*\)|\byenc\b|\b\d+(?:[.,]\d+)?\s*(?:[kmgt]i?b|bytes)\b`)
	// archiveSuffix is one part, volume or archive suffix of a file name,
	// taken off its end again and again: .vol03+04.par2, .part01.rar,
	// .7z.001, .r00, .par2, .sfv, .nfo, .nzb …
	archiveSuffix = regexp.MustCompile(`(?i)(?:\.vol\d+[+-]\d+\.par2|\.part\d+\.rar|\.\d{3}|\.[rs]\d{2,3}|` +
		`\.(?:par2|sfv|nfo|nzb|srr|srs|md5|sha1|sha256|rar|zip|7z|tar|gz|txt|jpg|jpeg|png))$`)
	// mediaSuffix is the extension of a file that is itself the release's
	// content (Alpha.2024.mkv beside Alpha.2024.nfo), taken off once.
	mediaSuffix = regexp.MustCompile(`(?i)\.(?:mkv|mp4|m4v|avi|mov|wmv|mpg|mpeg|ts|m2ts|iso|img|bin|exe|mp3|flac|m4a|m4b|ogg|epub|pdf|mobi|cbr|cbz)$`)
)

// releaseName is rule 3's release name: the text left of a subject with
// its counters, name, yEnc and sizes blanked, when it says anything;
// else the base of the file name. An obfuscating tool's tag says nothing
// of the release: in [PRiVATE]-[WtFnZb]-[Name.mkv]-[1/1] - "" yEnc (and
// [N3wZ] \…\::[PRiVATE]-[EnCrYpTnZb]-…) every word outside the name is
// the tool's, the same in every post, so such a subject is named by its
// file's base. The tag is looked for before the trim, which takes the
// tag's outer brackets off ("PRiVATE]-[WtFnZb" named every such post of
// a poster alike, and merged them).
//
// An advertiser's tag says nothing of the release either: the text
// between brackets that holds a web address (<www.town.ag >, [ partner
// of www.ssl-news.info ], <<< www.nfo-underground.xxx >>>, <example.com>)
// or an IRC channel ([#scnzb@efnet]) is taken out, and with it, in a
// subject that carries such a tag, every bracketed lone word (<TOWN>,
// [ 1080p ], [ MOVIE ], <Games-NDS >): the advertiser's name and
// category, the same in every post of theirs. A subject left with
// nothing but such lone words, address or not ([MOVIE] "Film.mkv"), is
// named by its file's base: the category named every film of a poster
// alike. What is left is tidied (empty and unmatched brackets dropped,
// one pair around the whole taken off).
func releaseName(keySubject, name string) string {
	if strings.Contains(keySubject, privateTag) {
		return ReleaseBase(name)
	}
	s := dropAdvertisersTags(clutter.ReplaceAllString(keySubject, " "))
	if name != "" && onlyLabels(s) {
		return ReleaseBase(name)
	}
	s = tidyRelease(s)
	if strings.IndexFunc(s, isWordRune) < 0 {
		return ReleaseBase(name)
	}
	return s
}

func isWordRune(c rune) bool { return unicode.IsLetter(c) || unicode.IsDigit(c) }

// holdsAddress reports whether s holds what marks an advertiser's tag:
// a www. or http address, a host of two or three labels (tagHost), or
// an IRC channel (#chan@net), each a whole word; inTag is whether s
// stands in a tag's brackets, where a host may be in any top-level
// domain. A release's own words with dots are not addresses: they have
// more labels (Dragons.Den.UK.S11E02…) or end otherwise (Alpha.2024,
// Pro 3.21-Sebaro, Name.mkv); .xxx is an address only after www., as
// XXX ends release names (Site.Name.XXX). It is a plain scan, not a
// regular expression: every part of every post is read.
func holdsAddress(s string, inTag bool) bool {
	for i := 0; i < len(s); i++ {
		// Only a word's start: each byte is looked at from one start at
		// most, so a 16 KiB subject costs one pass.
		if i > 0 && (isAlnum(s[i-1]) || s[i-1] == '.' || s[i-1] == '-' || s[i-1] == '@') {
			continue
		}
		t := s[i:]
		switch {
		case t[0] == '#':
			if ircChannel(t[1:]) {
				return true
			}
		case !isAlnum(t[0]):
		case afterPrefixFold(t, "www."), afterPrefixFold(t, "http://"), afterPrefixFold(t, "https://"):
			return true
		default:
			j := 0
			for j < len(t) && (isAlnum(t[j]) || t[j] == '.' || t[j] == '-') {
				j++
			}
			if tagHost(t[:j], inTag) {
				return true
			}
		}
	}
	return false
}

// afterPrefixFold reports whether s starts with prefix, in any case, and
// a letter or digit follows it.
func afterPrefixFold(s, prefix string) bool {
	return len(s) > len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) && isAlnum(s[len(prefix)])
}

// tagHost reports whether a word of letters, digits, dots and hyphens is
// a host of two or three labels, each starting with a letter or digit:
// in .ag or .info (ssl-news.info, News.Info, town.ag), or, with anyTLD,
// in a top-level domain of 2 to 6 lower-case letters that ends no file's
// or release's name (example.com, usenet-site.net; not Name.mkv,
// file.part01.rar, Show.web).
func tagHost(w string, anyTLD bool) bool {
	dot := strings.LastIndexByte(w, '.')
	if dot <= 0 || !isAlnum(w[0]) {
		return false
	}
	tld := w[dot+1:]
	if !strings.EqualFold(tld, "ag") && !strings.EqualFold(tld, "info") && !(anyTLD && bareTLD(tld)) {
		return false
	}
	labels := 1
	for i := 0; i < dot; i++ {
		if w[i] == '.' {
			labels++
			if !isAlnum(w[i+1]) {
				return false
			}
		}
	}
	return labels <= 2
}

// nameEnds end file and release names though shaped like a top-level
// domain (.zip and .mov are both): extensions and release words.
const nameEnds = " rar zip tar gz tgz txt jpg jpeg png gif sfv nfo nzb srr srs par mkv avi mov wmv mpg mpeg ts iso " +
	"img bin exe flac ogg epub pdf mobi cbr cbz srt sub idx ass ssa sup cue log wav ape aac dts vob ifo bup webm flv " +
	"azw djvu doc docx htm html xml url apk dmg pkg msi cab web webrip webdl hdtv bluray bdrip brrip dvdrip dvdr " +
	"hdrip remux repack proper rerip xxx german french dutch multi dubbed subbed nordic hevc avc uhd hdr "

// bareTLD reports whether tld may end a bare host in a tag: 2 to 6
// lower-case letters, none of nameEnds.
func bareTLD(tld string) bool {
	return len(tld) >= 2 && len(tld) <= 6 && strings.Trim(tld, "abcdefghijklmnopqrstuvwxyz") == "" &&
		!strings.Contains(nameEnds, " "+tld+" ")
}

// ircChannel reports whether s (after a #) is a channel@network.
func ircChannel(s string) bool {
	j := 0
	for j < len(s) && (isAlnum(s[j]) || s[j] == '_' || s[j] == '.' || s[j] == '-') {
		j++
	}
	return j > 0 && j+1 < len(s) && s[j] == '@' && isAlnum(s[j+1])
}

func isAlnum(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' }

// piece is a one-byte bracket, a " - " outside brackets or the text
// between them, of a blanked subject (pieces).
type piece struct {
	lo, hi            int
	open, close, text bool
}

// pieces cuts s at each bracket, and at " - " outside brackets; a run
// of two or more < or > is a tag's own arrow (<<< www.… >>>, with>>>
// www.… <<<), not a bracket, so the words it points with go with the
// address.
func pieces(s string) []piece {
	var ps []piece
	depth, lo := 0, 0
	flush := func(i int) {
		if i > lo {
			ps = append(ps, piece{lo: lo, hi: i, text: true})
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		arrow := (c == '<' || c == '>') && (i > 0 && s[i-1] == c || i+1 < len(s) && s[i+1] == c)
		switch {
		case !arrow && strings.IndexByte("<[({", c) >= 0:
			flush(i)
			ps = append(ps, piece{lo: i, hi: i + 1, open: true})
			depth++
			i++
			lo = i
		case !arrow && strings.IndexByte(">])}", c) >= 0:
			flush(i)
			ps = append(ps, piece{lo: i, hi: i + 1, close: true})
			depth = max(depth-1, 0)
			i++
			lo = i
		case depth == 0 && strings.HasPrefix(s[i:], " - "):
			flush(i)
			ps = append(ps, piece{lo: i, hi: i + 3})
			i += 3
			lo = i
		default:
			i++
		}
	}
	flush(len(s))
	return ps
}

// bracketed reports whether piece i stands between an opening and a
// closing bracket.
func bracketed(ps []piece, i int) bool {
	return i > 0 && i+1 < len(ps) && ps[i-1].open && ps[i+1].close
}

// dropAdvertisersTags takes the advertisers' tags out of a blanked
// subject (see releaseName): the pieces holding an address (a host in any
// domain in brackets or by a tag's arrow), then lone bracketed words.
func dropAdvertisersTags(s string) string {
	if !holdsAddress(s, true) {
		return s
	}
	ps := pieces(s)
	drop := make([]bool, len(ps))
	tagged := false
	for i, p := range ps {
		t := s[p.lo:p.hi]
		drop[i] = p.text && holdsAddress(t, bracketed(ps, i) || strings.Contains(t, "<<") || strings.Contains(t, ">>"))
		tagged = tagged || drop[i]
	}
	if !tagged {
		return s
	}
	glued := func(i int) bool {
		return i >= 0 && i < len(s) && (isWordByte(s[i]) || s[i] == '.')
	}
	for i, p := range ps {
		if !p.text || drop[i] || !bracketed(ps, i) || glued(ps[i-1].lo-1) || glued(ps[i+1].hi) {
			continue
		}
		drop[i] = tagLabel(strings.TrimSpace(s[p.lo:p.hi]))
	}
	var b strings.Builder
	for i, p := range ps {
		if !drop[i] {
			b.WriteString(s[p.lo:p.hi])
		}
	}
	return b.String()
}

// onlyLabels reports whether every word of s is a lone word in brackets
// with a letter in it ([MOVIE], [ TV ] [1080p]): a poster's category
// and labels, the same in every post of theirs. Numbers in brackets
// ([140022]-[04]) are a release's id, its own.
func onlyLabels(s string) bool {
	if !strings.ContainsAny(s, "<[({") {
		return false
	}
	ps := pieces(s)
	labels := 0
	for i, p := range ps {
		w := strings.TrimSpace(s[p.lo:p.hi])
		if !p.text || strings.IndexFunc(w, isWordRune) < 0 {
			continue
		}
		if !bracketed(ps, i) || !tagLabel(w) || strings.IndexFunc(w, unicode.IsLetter) < 0 {
			return false
		}
		labels++
	}
	return labels > 0
}

// tagLabel reports whether w is a lone word without a dot: standing in
// brackets in a subject with an advertiser's address, the advertiser's
// name or a category (a word glued to the brackets, .(EU) or
// [480p].mkv, is the release's).
func tagLabel(w string) bool {
	for _, r := range w {
		if !unicode.IsLetter(r) && !unicode.IsNumber(r) && r != '_' && r != '-' {
			return false
		}
	}
	return w != ""
}

// emptyBrackets is a pair of brackets with nothing but spaces inside.
var emptyBrackets = regexp.MustCompile(`<\s*>|\[\s*\]|\(\s*\)|\{\s*\}`)

// tidyRelease makes a release name of what is left of a subject: empty
// and unmatched brackets dropped, spaces collapsed, separators trimmed
// off both ends, and a pair of brackets around the whole taken off
// ([140022]-[04] stays as posted, not "140022]-[04").
func tidyRelease(s string) string {
	for strings.ContainsAny(s, "<>[](){}") {
		t := emptyBrackets.ReplaceAllString(s, " ")
		if t == s {
			break
		}
		s = t
	}
	if strings.ContainsAny(s, "<>[](){}") {
		s = dropUnmatched(s)
	}
	s = strings.Join(strings.Fields(s), " ")
	for {
		s = strings.Trim(s, " -_:.,;|\"'")
		if len(s) < 2 || closer(s[0]) == 0 || matching(s, 0) != len(s)-1 {
			return s
		}
		s = s[1 : len(s)-1]
	}
}

// closer is the closing bracket of an opening one, 0 for any other byte.
func closer(c byte) byte {
	switch c {
	case '<':
		return '>'
	case '[':
		return ']'
	case '(':
		return ')'
	case '{':
		return '}'
	}
	return 0
}

// matching is the index of the bracket that closes the one at i, -1
// when none does.
func matching(s string, i int) int {
	var stack []byte
	for j := i; j < len(s); j++ {
		if c := closer(s[j]); c != 0 {
			stack = append(stack, c)
		} else if strings.IndexByte(">])}", s[j]) >= 0 {
			if len(stack) == 0 || stack[len(stack)-1] != s[j] {
				return -1
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j
			}
		}
	}
	return -1
}

// dropUnmatched takes out the brackets of s that no bracket of their
// kind closes or opens.
func dropUnmatched(s string) string {
	keep := make([]bool, len(s))
	for i := range keep {
		keep[i] = true
	}
	var stack []int
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case closer(c) != 0:
			stack = append(stack, i)
		case strings.IndexByte(">])}", c) >= 0:
			if n := len(stack); n > 0 && closer(s[stack[n-1]]) == c {
				stack = stack[:n-1]
			} else {
				keep[i] = false
			}
		}
	}
	for _, i := range stack {
		keep[i] = false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if keep[i] {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// privateTag is the tag of the obfuscating posting tools that put the
// file name in brackets and leave the quoted name empty.
const privateTag = "[PRiVATE]"

// ReleaseBase is a file name without its part, volume and archive
// suffixes (Alpha.2024.part01.rar, Alpha.2024.r00, Alpha.2024.7z.001,
// Alpha.2024.vol03+04.par2, Alpha.2024.sfv, Alpha.2024.mkv: Alpha.2024),
// so the files of one post share it. A name that is nothing but a
// suffix is kept whole.
func ReleaseBase(name string) string {
	base := name
	for {
		b := archiveSuffix.ReplaceAllString(base, "")
		if b == base {
			break
		}
		base = b
	}
	base = mediaSuffix.ReplaceAllString(base, "")
	if strings.Trim(base, " .-_") == "" {
		return name
	}
	return base
}

// dropYencSize writes each "yEnc" of s (any case, a word) as "yEnc" and
// drops the file size after it: the files of a post differ in size.
func dropYencSize(s string) string {
	var b strings.Builder
	for {
		i := indexFold(s, "yenc")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + 4
		if i > 0 && isWordByte(s[i-1]) || end < len(s) && isWordByte(s[end]) {
			b.WriteString(s[:end])
			s = s[end:]
			continue
		}
		j := end
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		b.WriteString(s[:i])
		b.WriteString("yEnc")
		if k > j && (k == len(s) || !isWordByte(s[k])) {
			s = s[k:]
		} else {
			s = s[end:]
		}
	}
}

// indexFold is strings.Index of an ASCII lower-case sub, any case in s.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

func isWordByte(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' || c == '_' }

// hasExtension reports whether a name ends in an extension: a dot, then
// up to four digits, a letter and up to four letters or digits (.mkv,
// .r71, .par2), or three digits (.001).
func hasExtension(name string) bool {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 || dot == len(name)-1 {
		return false
	}
	ext := name[dot+1:]
	digits, i := 0, 0
	for i < len(ext) && ext[i] >= '0' && ext[i] <= '9' {
		digits++
		i++
	}
	if i == len(ext) {
		return digits == 3
	}
	if digits > 4 || !isLetter(ext[i]) {
		return false
	}
	rest := ext[i+1:]
	if len(rest) > 4 {
		return false
	}
	for j := 0; j < len(rest); j++ {
		if !isLetter(rest[j]) && (rest[j] < '0' || rest[j] > '9') {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// fileCounters are the [k/n], (k/n) and "File k of n" of s in order,
// each as the indexes of the match, k and n.
func fileCounters(s string) [][]int {
	var out [][]int
	if strings.IndexByte(s, '[') >= 0 {
		out = append(out, bracketCounter.FindAllStringSubmatchIndex(s, -1)...)
	}
	if strings.IndexByte(s, '(') >= 0 {
		out = append(out, parenCounter.FindAllStringSubmatchIndex(s, -1)...)
	}
	if containsFold(s, "file") {
		out = append(out, fileOf.FindAllStringSubmatchIndex(s, -1)...)
	}
	slices.SortFunc(out, func(a, b []int) int { return cmp.Compare(a[0], b[0]) })
	return out
}

// span is the bytes lo..hi of a subject.
type span struct{ lo, hi int }

// clean takes the reply prefixes and HTML entities out of a subject: they
// are not part of any name.
func clean(s string) string {
	s = strings.TrimSpace(s)
	for len(s) >= 3 && strings.EqualFold(s[:3], "re:") {
		s = strings.TrimSpace(s[3:])
	}
	if strings.Contains(s, ";") {
		s = entity.ReplaceAllStringFunc(s, func(e string) string {
			switch strings.Trim(e, "&;") {
			case "quot":
				return `"`
			case "amp":
				return "&"
			case "lt":
				return "<"
			case "gt":
				return ">"
			case "apos":
				return "'"
			}
			n, err := strconv.Atoi(strings.Trim(e, "&#;"))
			if err != nil || n < 32 || n > unicode.MaxRune || !utf8.ValidRune(rune(n)) {
				return e
			}
			return string(rune(n))
		})
	}
	return s
}

// quotedName finds the text between the first run of quotes and the next
// (`""name""` is name), non-empty, with an extension when ext is set.
func quotedName(s string, ext bool) (lo, hi int, ok bool) {
	i := 0
	for {
		a := strings.IndexByte(s[i:], '"')
		if a < 0 {
			return 0, 0, false
		}
		a += i
		for a < len(s) && s[a] == '"' {
			a++
		}
		b := strings.IndexByte(s[a:], '"')
		if b < 0 {
			return 0, 0, false
		}
		b += a
		inner := strings.TrimSpace(s[a:b])
		if inner != "" && (!ext || hasExtension(inner)) {
			lo = a + strings.Index(s[a:b], inner)
			return lo, lo + len(inner), true
		}
		i = b
		for i < len(s) && s[i] == '"' {
			i++
		}
	}
}

// bracketName finds the first [...] (brackets nest) whose content, or
// the last element of it when it is a path, has an extension: lo..hi is
// the whole content, last the name.
func bracketName(s string) (lo, hi int, last string, ok bool) {
	depth, start := 0, -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if depth == 0 {
				start = i + 1
			}
			depth++
		case ']':
			if depth == 0 {
				continue
			}
			depth--
			if depth > 0 {
				continue
			}
			inner := strings.TrimSpace(s[start:i])
			if j := strings.LastIndexByte(inner, '/'); j >= 0 {
				inner = strings.TrimSpace(inner[j+1:])
			}
			if inner != "" && hasExtension(inner) && !strings.ContainsAny(inner, `"`) {
				return start, i, inner, true
			}
		}
	}
	return 0, 0, "", false
}

// decode2047 decodes the RFC 2047 words of s, in the charsets the web
// knows by name.
func decode2047(s string) (string, error) {
	d := mime.WordDecoder{CharsetReader: func(charset string, in io.Reader) (io.Reader, error) {
		e, err := htmlindex.Get(charset)
		if err != nil {
			return nil, errors.New("binaries: unknown charset " + charset)
		}
		return e.NewDecoder().Reader(in), nil
	}}
	out, err := d.DecodeHeader(s)
	if err != nil {
		return s, err
	}
	if !utf8.ValidString(out) {
		return s, errors.New("binaries: RFC 2047 words decode to invalid UTF-8")
	}
	return out, nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}
