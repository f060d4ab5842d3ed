package newznab

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// BenchmarkSearch fills an index with LEASEHOLD_BENCH_RELEASES releases
// (default 1,000,000; generate_series on the server, then the day and
// trigram index built over them) and times t=search over HTTP against
// the API: names of two title words, then an episode or a year with
// tags, as posters name them. It reports p50 and p99 in ms of each kind
// of call, one client at a time, and of all kinds with four clients at
// once, for searches by words read newest days first ("newest days")
// and asked once over every release as before them ("one query"), the
// two taking turns call by call so that the machine's load falls on
// both alike. scripts/bench-newznab.sh runs it once (-benchtime 1x).
func BenchmarkSearch(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("LEASEHOLD_BENCH_RELEASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("LEASEHOLD_BENCH_RELEASES=%q: a number of releases, at least 1000", v)
		}
		rows = n
	}
	samples := 400
	dbURL, db, filled, indexed := benchFill(b, rows)
	words := titleWords(300)
	ctx := context.Background()
	key, err := AddKey(ctx, db, "bench-"+strconv.FormatInt(time.Now().UnixNano(), 36), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	pool, err := OpenIndex(ctx, dbURL, 8, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	serve := func(oneQuery, asBefore bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		api := New(Options{Index: pool})
		api.oneQuery, api.asBefore, api.dates.inCall = oneQuery, asBefore, asBefore
		srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close() })
		return "http://" + ln.Addr().String() + "/api?apikey=" + key + "&"
	}
	// base[0]: newest days first; base[1]: what it is compared with,
	// LEASEHOLD_BENCH_AGAINST: one query over every release (one-query,
	// the default), as before the round trips and work of a call were
	// cut (before: the key checked in a round trip of its own, the
	// first statement asking one slice, the index's dates read in the
	// call, the feed written by encoding/xml), or the same (same: the
	// machine's noise alone, and no one query's thousands of row reads
	// beside the calls timed).
	base := [2]string{serve(false, false), ""}
	against := cmp.Or(os.Getenv("LEASEHOLD_BENCH_AGAINST"), "one-query")
	switch against {
	case "one-query":
		base[1] = serve(true, false)
	case "before":
		base[1] = serve(false, true)
	case "same":
		base[1] = base[0]
	default:
		b.Fatalf("LEASEHOLD_BENCH_AGAINST=%q: one-query, before or same", against)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	if filled == 0 {
		fmt.Printf("newznab search bench: %d releases, the index of LEASEHOLD_BENCH_INDEX filled before\n", rows)
	} else {
		fmt.Printf("newznab search bench: %d releases filled in %s, day and trigram index built in %s\n", rows, filled.Round(time.Millisecond), indexed.Round(time.Millisecond))
	}

	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string { return words[rng.IntN(len(words))] }
	kinds := []struct {
		name string
		call func() string
	}{
		{"feed (no q)", func() string { return "t=search" }},
		{"feed cat=2000", func() string { return "t=search&cat=2000" }},
		{"q=two title words", func() string { return "t=search&q=" + url.QueryEscape(word()+" "+word()) }},
		{"q=one title word", func() string { return "t=search&q=" + word() }},
		{"q=word 1080p", func() string { return "t=search&q=" + word() + "+1080p" }},
		{"q=1080p", func() string { return "t=search&q=1080p" }},
		{"q=absent word", func() string { return "t=search&q=zzqxv" + strconv.Itoa(rng.IntN(1000)) }},
		{"tvsearch q season ep", func() string {
			return fmt.Sprintf("t=tvsearch&q=%s+%s&season=%d&ep=%d", word(), word(), 1+rng.IntN(12), 1+rng.IntN(24))
		}},
		{"q offset=500", func() string { return "t=search&q=" + word() + "&offset=500" }},
	}
	get := func(base, q string) time.Duration {
		t0 := time.Now()
		resp, err := hc.Get(base + q)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: %d", q, resp.StatusCode)
		}
		return time.Since(t0)
	}
	for range 20 { // warm the pool and the caches a little
		q := kinds[2].call()
		get(base[0], q)
		get(base[1], q)
	}
	b.ResetTimer()
	// Each call is asked of both ways in turn (which first alternates).
	var all [2][]time.Duration
	for _, k := range kinds {
		var ds [2][]time.Duration
		for i := range samples / 4 {
			q := k.call()
			for j := range 2 {
				w := (i + j) % 2
				ds[w] = append(ds[w], get(base[w], q))
			}
		}
		for w := range 2 {
			all[w] = append(all[w], ds[w]...)
		}
		fmt.Printf("  %-22s newest days p50 %7.2f ms  p99 %7.2f ms | %s p50 %7.2f ms  p99 %7.2f ms  (%d calls each, one client)\n",
			k.name, ms(pct(ds[0], 50)), ms(pct(ds[0], 99)), against, ms(pct(ds[1], 50)), ms(pct(ds[1], 99)), len(ds[0]))
	}
	fmt.Printf("  %-22s newest days p50 %7.2f ms  p99 %7.2f ms | %s p50 %7.2f ms  p99 %7.2f ms  (%d calls each, one client)\n",
		"every kind", ms(pct(all[0], 50)), ms(pct(all[0], 99)), against, ms(pct(all[1], 50)), ms(pct(all[1], 99)), len(all[0]))
	b.ReportMetric(ms(pct(all[0], 50)), "p50-ms")
	b.ReportMetric(ms(pct(all[0], 99)), "p99-ms")

	var mu sync.Mutex
	var par [2][]time.Duration
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range samples / 2 {
				q := kinds[i%len(kinds)].call()
				w := (i + c) % 2
				d := get(base[w], q)
				mu.Lock()
				par[w] = append(par[w], d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	fmt.Printf("  %-22s newest days p50 %7.2f ms  p99 %7.2f ms | %s p50 %7.2f ms  p99 %7.2f ms  (%d calls each, four clients, %.0f calls/s)\n",
		"every kind", ms(pct(par[0], 50)), ms(pct(par[0], 99)), against, ms(pct(par[1], 50)), ms(pct(par[1], 99)), len(par[0]), float64(len(par[0])+len(par[1]))/el.Seconds())
	b.ReportMetric(ms(pct(par[0], 99)), "p99-4clients-ms")

	if os.Getenv("LEASEHOLD_BENCH_EXPLAIN") == "" {
		return
	}
	// How PostgreSQL answers each kind (EXPLAIN ANALYZE), to see which
	// index it takes: over every release, and over the newest day.
	now := time.Now()
	var newestDay time.Time
	if err := db.QueryRow(ctx, `SELECT max(posted) FROM releases`).Scan(&newestDay); err != nil {
		b.Fatal(err)
	}
	for _, q := range []search{
		{Limit: MaxLimit},
		{Categories: []int{2000}, Limit: MaxLimit},
		{Words: []string{words[1], words[2]}, Limit: MaxLimit},
		{Words: []string{words[3]}, Limit: MaxLimit},
		{Words: []string{words[4], "1080p"}, Limit: MaxLimit},
		{Words: []string{"1080p"}, Limit: MaxLimit},
		{Words: []string{words[5]}, Offset: 500, Limit: MaxLimit},
	} {
		for _, from := range []int{allDays, day(newestDay) - 1} {
			sql, args := searchSQL(q, now, from)
			rows, err := db.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
			if err != nil {
				b.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("\n%+v since day %d\n  %s\n", q, from, strings.Join(plan, "\n  "))
		}
	}
}

// releasesDayName is the index version 2 of the schema makes on release
// names and days (source/binaries' indexByDay).
const releasesDayName = `CREATE INDEX releases_day_name ON releases USING gin (leasehold_posted_day(posted), name gin_trgm_ops)`

// benchFill makes the benchmark's index of rows releases and returns
// its URL, a connection to it and how long filling it and building its
// day and trigram index took. With LEASEHOLD_BENCH_INDEX (the URL of a
// database, e.g. of internal/pgtest/cmd/pgserver) it fills that database
// once and reuses it on later runs while it holds rows releases (zero
// times then), so runs compare on the same rows without minutes of
// filling each; otherwise it fills a database of the test server.
func benchFill(b *testing.B, rows int) (dbURL string, db *pgx.Conn, filled, indexed time.Duration) {
	b.Helper()
	ctx := context.Background()
	dbURL = os.Getenv("LEASEHOLD_BENCH_INDEX")
	if dbURL == "" {
		dbURL = pgtest.Database(b)
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(context.Background()) })
	var have int
	var made bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('releases') IS NOT NULL`).Scan(&made); err != nil {
		b.Fatal(err)
	}
	if made {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM releases`).Scan(&have); err != nil {
			b.Fatal(err)
		}
		if have == rows {
			if _, err := db.Exec(ctx, benchIndexes); err != nil {
				b.Fatal(err)
			}
			return dbURL, db, 0, 0
		}
		if _, err := db.Exec(ctx, `DROP TABLE releases, files, segments, api_keys, leasehold_index_schema`); err != nil {
			b.Fatal(err)
		}
	}
	// The tables without the day and trigram index, which is built once
	// the rows are in (as fast as building it row by row is slow).
	if _, err := db.Exec(ctx, indexSchema+`; DROP INDEX releases_day_name`); err != nil {
		b.Fatal(err)
	}
	words := titleWords(300)
	start := time.Now()
	_, err = db.Exec(ctx, `INSERT INTO releases (key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, nzb, category, lease_group, fence)
		SELECT md5(i::text),
		  initcap(($2::text[])[1 + abs(hashint4(i)) % $4]) || '.' || initcap(($2::text[])[1 + abs(hashint4(i + 7777777)) % $4]) ||
		    CASE WHEN i % 3 = 0 THEN '.' || (1960 + i % 65) || '.1080p.BluRay.x264'
		         ELSE '.S' || lpad((1 + i % 12)::text, 2, '0') || 'E' || lpad((1 + (i / 12) % 24)::text, 2, '0') || '.720p.HDTV.x264' END ||
		    '-GRP' || (i % 50),
		  'poster' || (i % 1000) || ' <p@example.org>', 'alt.binaries.g' || (i % 20), ARRAY['alt.binaries.g' || (i % 20)],
		  10, 10, 10, i % 50 <> 0, 1000000 + i, $3::timestamptz - make_interval(secs => i * 3), NULL,
		  CASE WHEN i % 3 = 0 THEN 2040 ELSE 5040 END, 'g', 1
		FROM generate_series(1, $1) i`, rows, words, time.Now(), len(words))
	if err != nil {
		b.Fatal(err)
	}
	filled = time.Since(start)
	start = time.Now()
	if _, err := db.Exec(ctx, releasesDayName+`; `+benchIndexes+`; ANALYZE releases`); err != nil {
		b.Fatal(err)
	}
	return dbURL, db, filled, time.Since(start)
}

// benchIndexes are the indexes of the schema's versions after 2, made
// on a reused index that lacks them.
const benchIndexes = `SELECT 1`

// titleWords are n distinct made-up words of 5 to 8 letters, the
// vocabulary release titles are drawn from.
func titleWords(n int) []string {
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		b := make([]byte, 5+rng.IntN(4))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		if w := string(b); !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
