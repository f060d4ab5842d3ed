package binaries

import "testing"

// TestCategory: release names (and their files' names) with the newznab
// category a downloader expects them under.
func TestCategory(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		files []string
		want  int
	}{
		{"Some.Show.S01E02.720p.HDTV.x264-GRP", nil, CategoryTVHD},
		{"Some.Show.S01E02.1080p.WEB-DL", nil, CategoryTVHD},
		{"Some.Show.S03E10.2160p.WEB.h265", nil, CategoryTVUHD},
		{"Some.Show.S01E02.HDTV.XviD-GRP", nil, CategoryTVSD},
		{"Some Show 1x02 DVDRip", nil, CategoryTVSD},
		{"Some.Show.S01E02E03", nil, CategoryTVOther},
		{"The.Daily.Show.2024.03.15.720p.WEB", nil, CategoryTVHD},
		{"Some.Show.S02.1080p.BluRay.x264", nil, CategoryTVHD},
		{"Mix.Show.S01E01.720p", []string{"Mix.Show.S01E01.720p.part01.rar"}, CategoryTVHD},
		{"A.Film.2019.1080p.BluRay.x264-GRP", nil, CategoryMoviesHD},
		{"A.Film.2019.2160p.UHD.BluRay.x265", nil, CategoryMoviesUHD},
		{"A.Film.1999.DVDRip.XviD", nil, CategoryMoviesSD},
		{"A.Film.2019.3D.1080p.BluRay.Half-SBS", nil, CategoryMovies3D},
		{"A Film (2021) 720p WEBRip", nil, CategoryMoviesHD},
		{"A.Film.2021.WEB", nil, CategoryMoviesOther},
		{"Alpha.2024", []string{"Alpha.2024.part1.rar", "Alpha.2024.par2"}, CategoryOtherMisc},
		{"Artist - Album (2020)", []string{"01 - Song.mp3", "02 - Song.mp3", "cover.jpg", "album.nfo"}, CategoryAudioMP3},
		{"Artist - Album [FLAC]", []string{"01.flac", "02.flac", "album.par2"}, CategoryAudioLossless},
		{"An Author - A Book", []string{"A Book.m4b"}, CategoryAudioAudiobook},
		{"An Author - A Book", []string{"A Book.epub"}, CategoryBooksEbook},
		{"A Comic 001", []string{"A Comic 001.cbz"}, CategoryBooksComics},
		{"SomeApp 2.1", []string{"setup.exe", "readme.txt"}, CategoryPC0day},
		{"SomeApp for Mac", []string{"SomeApp.dmg"}, CategoryPCMac},
		{"song.mp3", nil, CategoryAudioMP3},
		{"holiday", []string{"holiday.rar", "holiday.par2"}, CategoryOtherMisc},
		{"a3f9c2e81b7d4f60a3f9c2e81b7d4f60", []string{"a3f9c2e81b7d4f60a3f9c2e81b7d4f60.part01.rar"}, CategoryOtherHashed},
		// An obfuscated post whose file names still tell.
		{"vacation photos", []string{"Other.Show.S05E06.720p.mkv"}, CategoryTVHD},
		// A year alone, or a resolution alone, is not a film.
		{"Holidays 2019", nil, CategoryOtherMisc},
		{"screen 1920x1080 wallpapers", nil, CategoryOtherMisc},
		{"", nil, CategoryOtherMisc},
	} {
		if got := Category(c.name, c.files); got != c.want {
			t.Errorf("Category(%q, %q) = %d (%s), want %d (%s)", c.name, c.files, got, CategoryNames[got], c.want, CategoryNames[c.want])
		}
	}
	for c := range CategoryNames {
		if _, ok := CategoryNames[CategoryParent(c)]; !ok {
			t.Errorf("category %d has no parent %d among the names", c, CategoryParent(c))
		}
	}
}
