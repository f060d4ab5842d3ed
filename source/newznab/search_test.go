package newznab

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/poll"
)

// TestSearchNewestDays: a search by words, read newest days first,
// answers what one query over every release answers (the same releases
// in the same order, the same total) for a common word, a middling one,
// a rare one, one in no release and one in every release, at offsets and
// limits, with categories, a group, maxage and an episode; the common
// word is answered from its newest days, and some searches from the
// second slice their first statement asks.
func TestSearchNewestDays(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	dbURL, db := testIndex(t)
	t.Logf("index %s", time.Since(t0))
	if _, err := AddKey(ctx, db, "test", testNow); err != nil {
		t.Fatal(err)
	}
	// 4,000 releases over 83 days, two to a date (ties ordered by key,
	// which is not their order of i), the newest six posted after now
	// (a poster's wrong clock); every 11th incomplete, and unlisted but
	// for every 22nd, which has an NZB.
	_, err := db.Exec(ctx, `INSERT INTO releases (key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, nzb, category, lease_group, fence)
		SELECT md5(i::text),
		  concat_ws('.', CASE WHEN i % 2 = 0 THEN 'Common' END, CASE WHEN i % 37 = 0 THEN 'Middling' END,
		    CASE WHEN i IN (5, 1999, 3998) THEN 'Scarce' END, 'Show', 'S01E' || lpad((i % 30)::text, 2, '0'), '720p'),
		  'poster <p@example.org>', 'alt.binaries.t' || (i % 3), ARRAY['alt.binaries.t' || (i % 3)],
		  1, 1, 1, i % 11 <> 0, 1000 + i, $1::timestamptz + interval '3 hours' - (i / 2) * interval '30 minutes',
		  CASE WHEN i % 22 = 0 THEN 'nzb' END, CASE WHEN i % 3 = 0 THEN 2040 ELSE 5040 END, 'g', 1
		FROM generate_series(1, 4000) i`, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE releases`); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %s", time.Since(t0))
	pool, err := OpenIndex(ctx, dbURL, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	episode, err := episodePattern("1", "6")
	if err != nil {
		t.Fatal(err)
	}
	var searches []search
	for _, words := range [][]string{{"common"}, {"middling"}, {"scarce"}, {"absent"}, {"common", "middling"}, {"show"}} {
		for _, offset := range []int{0, 7, 150, 1500} {
			searches = append(searches, search{Words: words, Offset: offset, Limit: 10})
		}
	}
	searches = append(searches,
		search{Words: []string{"common"}, Limit: MaxLimit},
		search{Words: []string{"middling"}, Offset: 20, Limit: MaxLimit},
		search{Words: []string{"show"}, Offset: 900, Limit: MaxLimit},
		search{Words: []string{"common"}, Categories: []int{2000}, Limit: 10},
		search{Words: []string{"common"}, Categories: []int{5040}, Offset: 30, Limit: 10},
		search{Words: []string{"common"}, Group: "alt.binaries.t1", Offset: 5, Limit: 10},
		search{Words: []string{"middling"}, Group: "alt.binaries.t2", Limit: 10},
		search{Words: []string{"common"}, MaxAge: 10 * 24 * time.Hour, Offset: 200, Limit: MaxLimit},
		search{Words: []string{"middling"}, MaxAge: 30 * 24 * time.Hour, Limit: 10},
		search{Words: []string{"common"}, Pattern: episode, Limit: 10},
		search{Pattern: episode, Offset: 3, Limit: 10},
	)
	// The first slice (the newest release is in the future, so the
	// slices end at now), and how many searches the first statement's
	// next slice answered.
	first := day(testNow.Add(-24 * time.Hour))
	fromNext := 0
	// newest's statements, counted.
	counter := &statementCounter{}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = counter
	counted, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer counted.Close()
	dates := &dateSpan{}
	if _, err := dates.read(ctx, counted); err != nil {
		t.Fatal(err)
	}
	for _, s := range searches {
		name := fmt.Sprintf("%+v", s)
		// One query over every release, asked as before (an episode's
		// pattern of the index).
		asBefore := s
		asBefore.asBefore = true
		want, err := findSince(ctx, pool, asBefore, testNow, allDays)
		if err != nil {
			t.Fatal(err)
		}
		before := counter.n.Load()
		got, from, err := newest(ctx, counted, dates, s, testNow)
		statements := counter.n.Load() - before
		if from != first && from != allDays && statements == 1 {
			fromNext++
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(keysOf(got), keysOf(want)) {
			t.Errorf("%s (answered from day %d): newest days first found\n  %v\nthe whole index\n  %v", name, from, keysOf(got), keysOf(want))
		}
		if s.Offset == 0 && s.Limit == 10 && len(s.Words) == 1 && s.Words[0] == "common" && s.Group == "" && len(s.Categories) == 0 && s.Pattern == "" && from == allDays {
			t.Errorf("%s: answered from every release, not from the newest days", name)
		}
		page, total, err := find(ctx, pool, &dateSpan{}, s, testNow)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(len(want), s.Limit); len(page) != want || total != s.Offset+len(got) {
			t.Errorf("%s: find answered %d releases of total %d, want %d of %d", name, len(page), total, want, s.Offset+len(got))
		}
	}
	if fromNext == 0 {
		t.Errorf("no search answered by the first statement's next slice (after day %d's) in that statement", first)
	}
	t.Logf("searched %s; %d answered by the first statement's next slice", time.Since(t0), fromNext)
}

// statementCounter counts the statements a pool's connections run.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func keysOf(rs []release) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Key+" "+r.Posted.UTC().Format(time.RFC3339))
	}
	return out
}

// TestWarmConnection: a new connection of the API's plans its searches
// and prepares its key's statement before its first call, without
// error on an index of this schema.
func TestWarmConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, db := testIndex(t)
	if _, err := AddKey(ctx, db, "test", testNow); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := warmConnection(ctx, c); err != nil {
		t.Fatal(err)
	}
	var prepared bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE statement = $1)`, keySQL).Scan(&prepared); err != nil || !prepared {
		t.Errorf("the key's statement prepared: %v (%v)", prepared, err)
	}
}

// TestFeedXML: feedXML writes what xml.Marshal writes of a feed, byte
// for byte: empty, and pages of items whose names, posters, groups and
// links hold XML's special characters, line breaks, control characters,
// other scripts and bytes that are not UTF-8.
func TestFeedXML(t *testing.T) {
	odd := []string{"", "Plain.Name.S01E02.720p", "It's.Only.An.Apostrophe", "Only>Greater", `a "quoted" & <tagged> 'name'`, "tab\there\nline\rcr", "\x00\x01\x1f\x7f",
		"Ünïcödé.日本語.Фильм", "bad \xff\xfe utf8 \xc3", "\ufffd real replacement", "emoji 🎬 and \u2028 sep", "]]> <![CDATA[ x"}
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func() string { return odd[rng.IntN(len(odd))] + odd[rng.IntN(len(odd))] }
	for _, n := range []int{0, 1, 5, 40} {
		feed := RSS{Version: "2.0", Atom: "http://www.w3.org/2005/Atom", Newznab: NewznabNS, Channel: Channel{
			AtomLink: AtomLink{Href: "http://h/" + pick(), Rel: "self", Type: "application/rss+xml"},
			Title:    pick(), Description: pick(), Link: pick(), Language: "en-gb",
			Response: Response{Offset: rng.IntN(500), Total: rng.IntN(5000)},
			Items:    []Item{},
		}}
		for range n {
			r := release{Key: pick(), Name: pick(), Poster: pick(), Group: pick(), Files: rng.IntN(100), Bytes: rng.Int64(),
				Posted: time.Unix(rng.Int64N(2e9), 0), Category: []int{0, 2040, 5000, 5040, 7020}[rng.IntN(5)]}
			feed.Channel.Items = append(feed.Channel.Items, item("http://h:1/"+pick(), pick(), r))
		}
		want, err := xml.Marshal(feed)
		if err != nil {
			t.Fatal(err)
		}
		if got := feedXML(feed); !bytes.Equal(got, want) {
			t.Errorf("%d items: feedXML wrote\n%q\nxml.Marshal\n%q", len(feed.Channel.Items), got, want)
		}
	}
}

// TestDateSpanAge: a reading of the index's dates that is old is used
// once more, without a wait, while a new one is made in the background,
// which the calls after it see.
func TestDateSpanAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, db := testIndex(t)
	if _, err := AddKey(ctx, db, "test", testNow); err != nil {
		t.Fatal(err)
	}
	pool, err := OpenIndex(ctx, dbURL, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r, fs := sampleRelease("d1", "Dated.Show.S01E01.720p", "alt.binaries.tv", 1, testNow.Add(-time.Hour))
	writeRelease(t, db, r, fs)
	d := &dateSpan{}
	x, err := d.read(ctx, pool)
	if err != nil || !x.any || !x.last.Equal(testNow.Add(-time.Hour)) {
		t.Fatalf("the first reading: %+v %v", x, err)
	}
	r, fs = sampleRelease("d2", "Dated.Show.S01E02.720p", "alt.binaries.tv", 1, testNow)
	writeRelease(t, db, r, fs)
	if x, _ := d.read(ctx, pool); !x.last.Equal(testNow.Add(-time.Hour)) {
		t.Errorf("a reading younger than %s read again: last %s", dateSpanAge, x.last)
	}
	d.mu.Lock()
	d.at = d.at.Add(-dateSpanAge)
	d.mu.Unlock()
	if x, _ := d.read(ctx, pool); !x.last.Equal(testNow.Add(-time.Hour)) {
		t.Errorf("an old reading waited for a new one: last %s", x.last)
	}
	poll.Eventually(t, 10*time.Second, "the new reading", func() bool {
		x, _ := d.read(ctx, pool)
		return x.last.Equal(testNow)
	})
}
