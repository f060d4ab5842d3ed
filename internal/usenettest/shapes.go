package usenettest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Corpus is a set of posts over groups PREFIX.a and PREFIX.b in the
// shapes today's posting tools give them, and the releases an indexer
// must make of them. It is posted in three steps (Post): Before, then
// Fillers, then After.
type Corpus struct {
	// A and B are the corpus's groups.
	A, B string
	// Before is every post but the second half of the release posted in
	// two halves; its first half is dated HalvesApart earlier.
	Before []Article
	// Fillers are plain text articles in A between the two halves.
	Fillers []Article
	// After is the second half of the release posted in two halves.
	After []Article
	// Releases are the releases as posted.
	Releases []PostedRelease
}

// HalvesApart is how long before the rest the first half of the release
// posted in two halves is dated: hours, within a release's window (a
// worker's --release-window, 24 hours by default).
const HalvesApart = 5 * time.Hour

// Halves is the name of the release posted in two halves.
const Halves = "Halves.2026"

// PostedRelease is a release as it was posted: what an indexer must
// write of it.
type PostedRelease struct {
	Name, Poster string
	// Groups are the groups its files went to, sorted.
	Groups []string
	// Files are its files as posted, each with every byte.
	Files []File
	// Complete is whether every part of every file was posted.
	Complete bool
	// Shape says what the release stands for.
	Shape string
}

// Posters of the corpus.
const (
	Nyuu   = "nyuu <nyuu@shapes.example>"
	NgPost = "ngpost <ngpost@shapes.example>"
)

// Shapes is the corpus over PREFIX.a and PREFIX.b, with fillers plain
// articles between the two halves of the release posted in two halves:
//
//   - three releases of one poster in Nyuu's default subject
//     (`[01/04] - "Alpha.2026.part1.rar" yEnc (1/2)`: no text outside the
//     counters and the quoted name) with the same file count, and two of
//     another poster with the counters unpadded;
//   - a release posted in two halves, HalvesApart and the fillers apart;
//   - files without file counters (`"Bare.2026.part1.rar" yEnc (1/2)`);
//   - a release whose 3 rar files go to a and whose 2 par2 files are
//     cross-posted to a and b;
//   - a par2 volume set (.par2, .vol00+01.par2, .vol01+02.par2,
//     .vol03+04.par2) and a multi-volume rar of old-style names (.rar,
//     .r00…, .sfv, .nfo);
//   - a subject of over 3,000 bytes (posted folded);
//   - a subject in Windows-1252, not UTF-8 (fed as a peer feeds it:
//     INN's nnrpd refuses it from a poster);
//   - a release with a file missing a part: incomplete;
//   - two releases of one poster with the same file count whose only
//     words outside the counters and the name are a category tag
//     (`[MOVIE] [01/03] - "Film.2026.part1.rar" yEnc (1/2)`).
//
// Every file is a few hundred bytes to a few KB of random data in yEnc
// parts of 500 bytes, with its part's and file's CRCs.
func Shapes(prefix string, fillers int, seed uint64) Corpus {
	a, b := prefix+".a", prefix+".b"
	c := Corpus{A: a, B: b}
	rng := rand.New(rand.NewPCG(seed, 41))
	sized := func(name string, n int) File {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		return File{Name: name, Data: d}
	}
	file := func(name string) File { return sized(name, 300+rng.IntN(1200)) }
	files := func(base string, suffixes ...string) []File {
		var out []File
		for _, s := range suffixes {
			out = append(out, file(base+s))
		}
		return out
	}
	// post adds a release's articles: subject gives file k's (of n)
	// subject, %d left for the part counters.
	post := func(to *[]Article, groups, from string, fs []File, subject func(k, n int, name string) string) {
		for k, f := range fs {
			*to = append(*to, YEncParts(groups, from, f, 500, func(p, parts int) string {
				return subject(k+1, len(fs), f.Name) + fmt.Sprintf(" yEnc (%d/%d)", p, parts)
			})...)
		}
	}
	release := func(shape, name, from string, fs []File, groups ...string) {
		slices.Sort(groups)
		c.Releases = append(c.Releases, PostedRelease{Name: name, Poster: from, Groups: groups, Files: fs, Complete: true, Shape: shape})
	}
	nyuu := func(k, n int, name string) string { return fmt.Sprintf(`[%02d/%02d] - "%s"`, k, n, name) }
	unpadded := func(k, n int, name string) string { return fmt.Sprintf(`[%d/%d] - "%s"`, k, n, name) }

	// The first half of the release posted in two halves, dated hours
	// before the rest.
	halves := files(Halves, ".part1.rar", ".part2.rar", ".part3.rar", ".part4.rar", ".part5.rar", ".par2")
	var first []Article
	post(&first, a, Nyuu, halves, nyuu)
	cut := 0
	for i, art := range first {
		if strings.Contains(art.Subject, `"`+Halves+`.part4.rar"`) {
			cut = i
			break
		}
	}
	for i := range first[:cut] {
		first[i].Date = time.Now().Add(-HalvesApart)
	}
	c.Before = append(c.Before, first[:cut]...)
	c.After = first[cut:]
	release("posted in two halves, hours and the fillers apart", Halves, Nyuu, halves, a)

	for _, name := range []string{"Alpha.2026", "Beta.2026", "Gamma.2026"} {
		fs := files(name, ".part1.rar", ".part2.rar", ".part3.rar", ".par2")
		post(&c.Before, a, Nyuu, fs, nyuu)
		release("Nyuu's default subject, one poster, the same file count", name, Nyuu, fs, a)
	}
	for _, name := range []string{"Delta.2026", "Echo.2026"} {
		fs := files(name, ".part1.rar", ".part2.rar", ".par2")
		post(&c.Before, a, NgPost, fs, unpadded)
		release("the default subject unpadded, one poster, the same file count", name, NgPost, fs, a)
	}
	bare := files("Bare.2026", ".part1.rar", ".part2.rar", ".part3.rar", ".vol00+01.par2")
	post(&c.Before, a, "bare <bare@shapes.example>", bare, func(_, _ int, name string) string { return fmt.Sprintf(`"%s"`, name) })
	release("files without counters", "Bare.2026", "bare <bare@shapes.example>", bare, a)

	cross := files("Cross.2026", ".part1.rar", ".part2.rar", ".part3.rar", ".vol00+01.par2", ".vol01+02.par2")
	post(&c.Before, a, "cross <cross@shapes.example>", cross[:3], func(k, _ int, name string) string { return unpadded(k, 5, name) })
	post(&c.Before, a+","+b, "cross <cross@shapes.example>", cross[3:], func(k, _ int, name string) string { return unpadded(k+3, 5, name) })
	release("rar files to a, par2 files cross-posted to a and b", "Cross.2026", "cross <cross@shapes.example>", cross, a, b)

	vols := files("Vols.2026", ".part1.rar", ".part2.rar", ".par2", ".vol00+01.par2", ".vol01+02.par2", ".vol03+04.par2")
	post(&c.Before, a, "vols <vols@shapes.example>", vols, nyuu)
	release("a par2 volume set", "Vols.2026", "vols <vols@shapes.example>", vols, a)

	multi := files("Multi.2026", ".rar", ".r00", ".r01", ".r02", ".sfv", ".nfo")
	post(&c.Before, a, "multi <multi@shapes.example>", multi, nyuu)
	release("a multi-volume rar of old-style names", "Multi.2026", "multi <multi@shapes.example>", multi, a)

	// A header line over 1,000 bytes is refused: the long subject is
	// posted folded, and the overview has it unfolded.
	long := "Omega" + strings.Repeat(" long", 600)
	folded := "Omega"
	for i := range 600 {
		if i > 0 && i%19 == 0 {
			folded += "\r\n"
		}
		folded += " long"
	}
	omega := files("Omega.2026", ".bin")
	post(&c.Before, a, "long <long@shapes.example>", omega, func(k, n int, name string) string { return folded + " " + nyuu(k, n, name) })
	release("a subject of 3,000 bytes and more", long, "long <long@shapes.example>", omega, a)

	latin := files("Cafe.Creme.2026", ".part1.rar", ".part2.rar")
	post(&c.Before, b, "latin <latin@shapes.example>", latin, func(k, n int, name string) string {
		return "Caf\xe9.Cr\xe8me.2026 " + nyuu(k, n, name) // Windows-1252 bytes
	})
	release("a subject in Windows-1252, not UTF-8", "Café.Crème.2026", "latin <latin@shapes.example>", latin, b)

	broken := []File{file("Broken.2026.part1.rar"), sized("Broken.2026.part2.rar", 1400)}
	var arts []Article
	post(&arts, a, "broken <broken@shapes.example>", broken, nyuu)
	for i, art := range arts {
		if strings.Contains(art.Subject, `"Broken.2026.part2.rar" yEnc (2/`) {
			arts = slices.Delete(arts, i, i+1) // its part 2 never comes
			break
		}
	}
	c.Before = append(c.Before, arts...)
	release("a file missing a part", "Broken.2026", "broken <broken@shapes.example>", broken, a)
	c.Releases[len(c.Releases)-1].Complete = false

	// A category tag the only words outside the counters and the name:
	// the tag named every film of the poster alike, and merged them.
	for _, name := range []string{"Film.2026", "Other.Film.2026"} {
		fs := files(name, ".part1.rar", ".part2.rar", ".par2")
		post(&c.Before, a, "movie <movie@shapes.example>", fs, func(k, n int, name string) string { return "[MOVIE] " + nyuu(k, n, name) })
		release("a category tag ([MOVIE]), one poster, the same file count", name, "movie <movie@shapes.example>", fs, a)
	}

	for i := range fillers {
		c.Fillers = append(c.Fillers, Article{Group: a, From: "talk <talk@shapes.example>", Subject: fmt.Sprintf("chat %d", i), Body: "hello"})
	}
	return c
}

// Post makes the corpus's groups and feeds it to the server as a peer
// does (IHAVE to innd): Before in order, the fillers over conns
// connections at once, After in order; then waits until the server
// counts every article.
func (c Corpus) Post(ctx context.Context, s *Server, conns int) error {
	if err := s.NewGroups(ctx, c.A, c.B); err != nil {
		return err
	}
	f := newFeeder(s.Addr)
	if err := f.feed(ctx, c.Before); err != nil {
		return err
	}
	if err := f.feedAtOnce(ctx, c.Fillers, conns); err != nil {
		return err
	}
	if err := f.feed(ctx, c.After); err != nil {
		return err
	}
	want := map[string]int64{}
	countGroups(want, c.Before)
	countGroups(want, c.Fillers)
	countGroups(want, c.After)
	return waitCounts(ctx, s.Addr, want)
}

// Complete is the corpus's complete releases.
func (c Corpus) Complete() []PostedRelease {
	var out []PostedRelease
	for _, r := range c.Releases {
		if r.Complete {
			out = append(out, r)
		}
	}
	return out
}
