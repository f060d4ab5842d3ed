package binaries

import (
	"path"
	"regexp"
	"strings"
)

// Newznab's standard category numbers: a parent of a thousand and its
// children. Downloaders (Sonarr, Radarr, NZBGet's feeds) filter by them,
// so the numbers are the ones every newznab indexer uses.
const (
	CategoryMovies      = 2000
	CategoryMoviesOther = 2020
	CategoryMoviesSD    = 2030
	CategoryMoviesHD    = 2040
	CategoryMoviesUHD   = 2045
	CategoryMovies3D    = 2060

	CategoryAudio          = 3000
	CategoryAudioMP3       = 3010
	CategoryAudioAudiobook = 3030
	CategoryAudioLossless  = 3040
	CategoryAudioOther     = 3050

	CategoryPC        = 4000
	CategoryPC0day    = 4010
	CategoryPCISO     = 4020
	CategoryPCMac     = 4030
	CategoryPCiOS     = 4060
	CategoryPCAndroid = 4070

	CategoryTV      = 5000
	CategoryTVSD    = 5030
	CategoryTVHD    = 5040
	CategoryTVUHD   = 5045
	CategoryTVOther = 5050

	CategoryBooks       = 7000
	CategoryBooksEbook  = 7020
	CategoryBooksComics = 7030

	CategoryOther       = 8000
	CategoryOtherMisc   = 8010
	CategoryOtherHashed = 8020
)

// CategoryNames are the names of the categories Category gives, by
// number, as newznab indexers name them (parents "Movies", children
// "Movies > HD" shortened to "HD").
var CategoryNames = map[int]string{
	CategoryMovies: "Movies", CategoryMoviesOther: "Other", CategoryMoviesSD: "SD", CategoryMoviesHD: "HD", CategoryMoviesUHD: "UHD", CategoryMovies3D: "3D",
	CategoryAudio: "Audio", CategoryAudioMP3: "MP3", CategoryAudioAudiobook: "Audiobook", CategoryAudioLossless: "Lossless", CategoryAudioOther: "Other",
	CategoryPC: "PC", CategoryPC0day: "0day", CategoryPCISO: "ISO", CategoryPCMac: "Mac", CategoryPCiOS: "Mobile-iOS", CategoryPCAndroid: "Mobile-Android",
	CategoryTV: "TV", CategoryTVSD: "SD", CategoryTVHD: "HD", CategoryTVUHD: "UHD", CategoryTVOther: "Other",
	CategoryBooks: "Books", CategoryBooksEbook: "Ebook", CategoryBooksComics: "Comics",
	CategoryOther: "Other", CategoryOtherMisc: "Misc", CategoryOtherHashed: "Hashed",
}

// The name patterns of the simplest rules newznab indexers categorise
// by. Names separate words with dots, spaces, dashes or underscores.
var (
	// An episode: S01E02 (and S01E02E03), 1x02, or a daily show's date.
	tvEpisode = regexp.MustCompile(`(?i)(^|[^a-z0-9])(s\d{1,3}[ ._-]?e\d{1,4}(e\d{1,4})*|\d{1,2}x\d{2,3}|(19|20)\d\d[ ._-](0[1-9]|1[0-2])[ ._-](0[1-9]|[12]\d|3[01]))([^a-z0-9]|$)`)
	// A season pack: S01 alone, before a resolution or source tag.
	tvSeason = regexp.MustCompile(`(?i)(^|[^a-z0-9])s\d{1,2}([^a-z0-9e]|$)`)
	year     = regexp.MustCompile(`(^|[^a-z0-9])(19[2-9]\d|20\d\d)([^a-z0-9]|$)`)
	// A resolution or source tag: what makes a name with a year a film.
	movieTag = regexp.MustCompile(`(?i)(^|[^a-z0-9])(480p|576p|720p|1080[pi]|2160p|4k|uhd|blu-?ray|bdrip|brrip|bd(25|50)|remux|dvdrip|dvd[59r]?|dvdscr|web-?dl|webrip|web|hdrip|hdtv|xvid|divx|x264|x265|h\.?26[45]|hevc|avc)([^a-z0-9]|$)`)
	uhd      = regexp.MustCompile(`(?i)(^|[^a-z0-9])(2160p|4k|uhd)([^a-z0-9]|$)`)
	hd       = regexp.MustCompile(`(?i)(^|[^a-z0-9])(720p|1080[pi]|blu-?ray|bdrip|brrip|bd(25|50)|remux)([^a-z0-9]|$)`)
	sd       = regexp.MustCompile(`(?i)(^|[^a-z0-9])(480p|576p|dvdrip|dvd[59r]?|dvdscr|sdtv|pdtv|hdtv|xvid|divx)([^a-z0-9]|$)`)
	threeD   = regexp.MustCompile(`(?i)(^|[^a-z0-9])(3d|h-?sbs|h-?ou)([^a-z0-9]|$)`)
	// A hashed (obfuscated) name: nothing but hex or base-62 noise.
	hashed = regexp.MustCompile(`^([0-9a-fA-F]{16,}|[0-9A-Za-z]{24,})$`)
)

// Extensions that say what a release is when its name does not.
var (
	extAudioMP3      = set("mp3")
	extAudioLossless = set("flac", "ape", "wav", "alac", "wv", "dsf")
	extAudiobook     = set("m4b")
	extAudioOther    = set("ogg", "opus", "m4a", "aac", "wma")
	extEbook         = set("epub", "mobi", "azw", "azw3", "pdf", "djvu", "fb2", "lit")
	extComics        = set("cbr", "cbz", "cb7")
	extPC0day        = set("exe", "msi")
	extPCMac         = set("dmg", "pkg")
	extPCiOS         = set("ipa")
	extPCAndroid     = set("apk")
	// Files that come with any kind of post and say nothing of it.
	extNeutral = set("par2", "nfo", "sfv", "nzb", "txt", "jpg", "jpeg", "png", "srr", "md5", "url", "diz")
)

func set(exts ...string) map[string]bool {
	m := map[string]bool{}
	for _, e := range exts {
		m[e] = true
	}
	return m
}

// Category is the newznab category number of a release, from its name
// and its files' names, by the simplest rules newznab indexers use: an
// episode (S01E02, 1x02, a daily show's date) or a season pack is TV; a
// year with a resolution or source tag is a film; both by resolution
// (SD, HD, UHD); else the files' extensions say audio, books or PC; a
// name of nothing but hex noise is Other > Hashed; else Other > Misc.
// When the release name says nothing (an obfuscated post), its files'
// names are read the same way.
func Category(name string, fileNames []string) int {
	names := append([]string{name}, fileNames...)
	for _, n := range names {
		if c := videoCategory(n); c != 0 {
			return c
		}
	}
	if c := extensionCategory(fileNames); c != 0 {
		return c
	}
	if c := extensionCategory([]string{name}); c != 0 {
		return c
	}
	if hashed.MatchString(strings.TrimSpace(name)) {
		return CategoryOtherHashed
	}
	return CategoryOtherMisc
}

// videoCategory is the TV or Movies category a name says, or 0.
func videoCategory(n string) int {
	switch {
	case tvEpisode.MatchString(n) || tvSeason.MatchString(n) && movieTag.MatchString(n):
		switch {
		case uhd.MatchString(n):
			return CategoryTVUHD
		case hd.MatchString(n):
			return CategoryTVHD
		case sd.MatchString(n):
			return CategoryTVSD
		}
		return CategoryTVOther
	case year.MatchString(n) && movieTag.MatchString(n):
		switch {
		case threeD.MatchString(n):
			return CategoryMovies3D
		case uhd.MatchString(n):
			return CategoryMoviesUHD
		case hd.MatchString(n):
			return CategoryMoviesHD
		case sd.MatchString(n):
			return CategoryMoviesSD
		}
		return CategoryMoviesOther
	}
	return 0
}

// extensionCategory is the category the files' extensions say, or 0:
// the kind most of the telling files are (files that come with any post,
// par2, nfo, sfv, say nothing), ties going to the first in the order
// audio, books, PC.
func extensionCategory(fileNames []string) int {
	count := map[int]int{}
	for _, f := range fileNames {
		ext := strings.ToLower(strings.TrimPrefix(path.Ext(f), "."))
		if ext == "" || extNeutral[ext] {
			continue
		}
		switch {
		case extAudioMP3[ext]:
			count[CategoryAudioMP3]++
		case extAudioLossless[ext]:
			count[CategoryAudioLossless]++
		case extAudiobook[ext]:
			count[CategoryAudioAudiobook]++
		case extAudioOther[ext]:
			count[CategoryAudioOther]++
		case extComics[ext]:
			count[CategoryBooksComics]++
		case extEbook[ext]:
			count[CategoryBooksEbook]++
		case extPC0day[ext]:
			count[CategoryPC0day]++
		case extPCMac[ext]:
			count[CategoryPCMac]++
		case extPCiOS[ext]:
			count[CategoryPCiOS]++
		case extPCAndroid[ext]:
			count[CategoryPCAndroid]++
		}
	}
	best, n := 0, 0
	for _, c := range []int{CategoryAudioMP3, CategoryAudioLossless, CategoryAudioAudiobook, CategoryAudioOther,
		CategoryBooksEbook, CategoryBooksComics, CategoryPC0day, CategoryPCMac, CategoryPCiOS, CategoryPCAndroid} {
		if count[c] > n {
			best, n = c, count[c]
		}
	}
	return best
}

// CategoryParent is the parent of a category: 5040 → 5000.
func CategoryParent(c int) int { return c / 1000 * 1000 }
