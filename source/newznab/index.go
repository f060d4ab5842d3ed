package newznab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/source/binaries"
)

// Bounds of what one call may ask of the index.
const (
	// MaxLimit is the most releases one search answers (newznab's
	// limit), and the default.
	MaxLimit = 100
	// MaxOffset is how deep a search may page: deeper pages cost the
	// index a scan of every row before them.
	MaxOffset = 10000
	// MaxQuery is the longest search text taken, in bytes.
	MaxQuery = 256
	// DefaultStatementTimeout is how long one statement of a call may
	// run before PostgreSQL cancels it.
	DefaultStatementTimeout = 5 * time.Second
)

// OpenIndex connects to the index database for the API: every
// connection read only (default_transaction_read_only) with a statement
// timeout, at most maxConns of them. It checks the index's tables and
// the table of keys are there, so a wrong URL stops the API at start.
func OpenIndex(ctx context.Context, url string, maxConns int32, timeout time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("newznab: --index: %w", err)
	}
	if timeout <= 0 {
		timeout = DefaultStatementTimeout
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(timeout.Milliseconds(), 10)
	cfg.ConnConfig.RuntimeParams["application_name"] = "leasehold usenet api"
	// A plan for one search's words is no plan for another's (a common
	// word wants the date index, a rare one the trigrams): plan each.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	// Searches are small: starting parallel workers costs more than
	// they save (tens of ms on a busy machine for a 300-row walk).
	cfg.ConnConfig.RuntimeParams["max_parallel_workers_per_gather"] = "0"
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// A new connection's first search plans with caches of nothing
	// (the tables', the indexes' and the operators' catalog rows: tens
	// of ms on a busy machine, the slowest call of its hundred): warm
	// them as the connection opens, and keep a few open, so that no
	// call waits for a connection to be made or warmed.
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		warmConnection(ctx, c)
		return nil
	}
	cfg.MinConns = min(cfg.MaxConns, 4)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("newznab: --index: %w", err)
	}
	var releases, keys bool
	err = pool.QueryRow(ctx, `SELECT to_regclass('releases') IS NOT NULL, to_regclass('api_keys') IS NOT NULL`).Scan(&releases, &keys)
	switch {
	case err != nil:
		err = fmt.Errorf("newznab: --index: %w", err)
	case !releases:
		err = errors.New("newznab: --index has no table releases: point it at the database a worker's --out postgres://… writes")
	case !keys:
		err = errors.New("newznab: --index has no API keys yet: add one with `leasehold usenet api keys add NAME --index …`")
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// warmConnection plans the searches on a new connection, without running
// them, and prepares the key's statement, so that the catalog rows they
// need are cached before its first call. An index without the table of
// days (a schema before version 2) fails the second plan: warming is
// best effort, and OpenIndex takes no error of it as the connection's.
func warmConnection(ctx context.Context, c *pgx.Conn) error {
	q, args := searchSQL(search{Words: []string{"leasehold"}, Categories: []int{2000}, Group: "g", MaxAge: time.Hour, Limit: 1}, time.Now(), allDays)
	_, err1 := c.Exec(ctx, "EXPLAIN "+q, args...)
	q, args = searchSQL(search{Words: []string{"leasehold"}, Limit: 1}, time.Now(), 0)
	_, err2 := c.Exec(ctx, "EXPLAIN "+q, args...)
	_, err3 := c.Exec(ctx, keySQL, keyHash(""))
	return errors.Join(err1, err2, err3)
}

// release is a row of releases as the API shows it.
type release struct {
	Key, Name, Poster, Group string
	Files                    int
	Bytes                    int64
	Posted                   time.Time
	Category                 int
}

// search is what a search call asks of the index.
type search struct {
	Words      []string // each in the name, case folded
	Pattern    string   // a regular expression the name matches (tvsearch's episode)
	Categories []int    // any of these (a parent takes its children)
	Group      string
	MaxAge     time.Duration
	Offset     int
	Limit      int
	// OneQuery asks the index once over every release, as searches by
	// words ran before newest (the benchmark compares the two).
	OneQuery bool
	// Key is the hash of the API key the call came with, checked in
	// the round trip of the search's first statement (keyed), which
	// answers errBadKey when it is no good key; nil checks none.
	Key []byte
	// asBefore asks much as searches were asked before (the benchmark's
	// comparison): newest's first statement asks its first slice and
	// not the next, an episode's pattern is asked of the index, and no
	// slice is asked matches first.
	asBefore bool
	// matchesFirst asks a slice's matches before their order (newest's
	// slices after its first): see searchSQL.
	matchesFirst bool
	// upToPage asks the page and every match before it (LIMIT offset +
	// limit + 1, no OFFSET), so that their count is the matches' up to
	// the page's end.
	upToPage bool
}

// listed is the condition of a release a downloader may take: complete,
// or given an NZB by its worker (a file of it was written incomplete,
// which par2 may repair). Releases still being read are not listed.
const listed = `(complete OR nzb IS NOT NULL)`

// find runs a search: its page of releases, newest first, and the
// total newznab clients page by. The total is exact on the last page;
// before it, it is one more than the matches up to this page's end: a
// client pages on while the total is past its page, and counting every
// match of a common word over a million releases would cost more than
// the page itself (one query, asking for one row past the page, says
// whether more follow).
//
// A search by words reads the newest days first (newest): the answer is
// that of one query over every release, at the cost of the matches of
// those days instead of all.
func find(ctx context.Context, db *pgxpool.Pool, dates *dateSpan, s search, now time.Time) ([]release, int, error) {
	var out []release
	var err error
	if (len(s.Words) > 0 || s.Pattern != "") && !s.OneQuery {
		out, _, err = newest(ctx, db, dates, s, now)
	} else {
		out, err = findSince(ctx, db, s, now, allDays)
	}
	if errors.Is(err, errBadKey) {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("newznab: searching: %w", err)
	}
	total := s.Offset + len(out)
	if len(out) > s.Limit {
		out = out[:s.Limit]
	}
	return out, total, nil
}

// findSince runs a search over the releases posted on day from (UTC
// days since 1970, leasehold_posted_day) or later: allDays for every
// release. It answers the page and one release past it.
func findSince(ctx context.Context, db *pgxpool.Pool, s search, now time.Time, from int) ([]release, error) {
	q, args := searchSQL(s, now, from)
	var out []release
	err := keyed(ctx, db, s.Key, q, args, func(rows pgx.Rows) error {
		x, err := scanRelease(rows)
		out = append(out, x)
		return err
	})
	return out, err
}

// errBadKey is a search's answer when its key is no good key.
var errBadKey = errors.New("newznab: no such API key")

// keySQL is whether $1 is the hash of a key not revoked.
const keySQL = `SELECT EXISTS (SELECT 1 FROM api_keys WHERE hash = $1 AND revoked IS NULL)`

// keyed runs query q, each row to each. With a key (a hash), it asks in
// the same round trip whether that is a good key (a pipeline of two
// statements: on a busy machine each round trip is a wait for the
// scheduler at both ends, much of a search's time), and q only runs
// when it is: q's rows are asked behind that condition, PostgreSQL's
// one-time filter, so a wrong key costs no search. errBadKey then.
func keyed(ctx context.Context, db *pgxpool.Pool, key []byte, q string, args []any, each func(pgx.Rows) error) error {
	read := func(rows pgx.Rows) error {
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	if key == nil {
		rows, err := db.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return read(rows)
	}
	var good bool
	b := &pgx.Batch{}
	b.Queue(keySQL, key).QueryRow(func(r pgx.Row) error { return r.Scan(&good) })
	args = append(args[:len(args):len(args)], key)
	b.Queue(`SELECT * FROM (`+q+`) page WHERE EXISTS (SELECT 1 FROM api_keys WHERE hash = $`+strconv.Itoa(len(args))+` AND revoked IS NULL)`, args...).Query(read)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if !good {
		return errBadKey
	}
	return nil
}

// allDays is findSince's bound for every release.
const allDays = math.MinInt32

// day is the day number of t, as leasehold_posted_day counts.
func day(t time.Time) int { return int(math.Floor(float64(t.Unix()) / 86400)) }

// Bounds of how newest widens its days.
const (
	// sliceMargin is how many times the matches a page needs newest
	// asks of the next days, at the rate the days read so far had:
	// enough that one more query almost always finishes (the rate of
	// a day's hundreds of matches is known to a few per cent), few
	// enough not to read many more rows than the page needs.
	sliceMargin = 1.5
	// maxSlices is how many day-bounded queries one search makes
	// before it asks for every release.
	maxSlices = 4
)

// newest answers a search by words newest days first. The matches of a
// common word over a million releases are thousands of rows spread over
// the whole table, and ordering them by date reads every one; the
// matches posted since a day, found together with the name's trigrams
// in one GIN index (releases_day_name), are few. So newest asks for the
// page among the releases of the last day (from the start of the day
// before the newest release's), then of as many days back as should
// hold the page sliceMargin times over at the rate found so far, and
// when that would be most of the index, or the words seem rare (all
// their matches are few rows to read), of every release. The first
// statement asks the first slice (its every match up to the page's
// end, so their count is exact), and behind its answer (PostgreSQL's
// one-time filters) the next slice when it is short but the words not
// rare, and every release when they are: one round trip for most
// searches, whatever their words and however deep their page.
//
// Every query asks for the same page (offset, limit and one more) of
// the releases posted since its day: when it is full, no older release
// can be in it, so it is the page of the search over every release.
// An index without releases_day_name (a schema before version 2, its
// workers not upgraded yet) is asked once, as before. newest says the
// day bound of the query that answered (allDays for every release).
func newest(ctx context.Context, db *pgxpool.Pool, dates *dateSpan, s search, now time.Time) ([]release, int, error) {
	span, err := dates.read(ctx, db)
	if err != nil {
		return nil, 0, err
	}
	if !span.byDay || !span.any {
		out, err := findSince(ctx, db, s, now, allDays)
		return out, allDays, err
	}
	// top: the newest release, or now for releases posted in the future
	// (a poster's wrong clock), which every slice holds anyway.
	top, oldest := span.last, span.first
	if top.After(now) {
		top = now
	}
	if s.MaxAge > 0 && oldest.Before(now.Add(-s.MaxAge)) {
		oldest = now.Add(-s.MaxAge)
	}
	whole := top.Sub(oldest)
	need := s.Offset + s.Limit + 1
	// covered is how long before top slice from begins; few is how many
	// matches fewer than make its words rare: at that rate, fewer than
	// three pages' worth in all, every match cheap to read, so the
	// search over every release answers.
	covered := func(from int) time.Duration { return top.Sub(time.Unix(int64(from)*86400, 0)) }
	few := func(from int) float64 { return 3 * float64(need) * covered(from).Seconds() / whole.Seconds() }
	from := day(top.Add(-24 * time.Hour))
	for slice := 0; slice < maxSlices; slice++ {
		if from <= day(oldest) {
			break
		}
		var out []release
		var found int
		var err error
		if slice == 0 {
			first := firstSlice{from: from, few: few(from), top: top, covered: covered(from), whole: whole, oldest: day(oldest), wider: !s.asBefore}
			var next firstAnswer
			next, err = findFirst(ctx, db, s, now, first)
			s.Key = nil                  // checked
			s.matchesFirst = !s.asBefore // the slices after the first
			if err != nil || len(next.page) > s.Limit {
				return next.page, from, err
			}
			if float64(next.found) < few(from) {
				return next.every, allDays, nil
			}
			out, found = next.page, next.found
			if next.widerFrom != allDays {
				slice, from, out = 1, next.widerFrom, next.wider
				found = matchedSince(s, out)
			}
		} else {
			out, err = findSince(ctx, db, s, now, from)
			found = matchedSince(s, out)
		}
		if err != nil || len(out) > s.Limit {
			return out, from, err
		}
		if float64(found) < few(from) {
			break
		}
		want := max(covered(from).Seconds()*sliceMargin*float64(need)/float64(max(found, 1)), 2*covered(from).Seconds())
		if want >= whole.Seconds()/2 {
			break
		}
		from = day(top.Add(-time.Duration(want) * time.Second))
	}
	out, err := findSince(ctx, db, s, now, allDays)
	return out, allDays, err
}

// matchedSince is how many releases matched a search whose page (out,
// short of a full one) was asked for: exact when the page has rows;
// when it is empty, at most the offset (taken as half of it).
func matchedSince(s search, out []release) int {
	if len(out) > 0 {
		return s.Offset + len(out)
	}
	return s.Offset / 2
}

// firstSlice is what newest's first statement asks: the slice since
// day from, and what decides the next (see newest).
type firstSlice struct {
	from           int
	few            float64
	top            time.Time
	covered, whole time.Duration
	oldest         int  // the day of the oldest release searched
	wider          bool // ask the next slice too, when wanted
}

// firstAnswer is its answer.
type firstAnswer struct {
	page, wider, every []release
	// found is how many releases since from matched, up to the page's
	// end (exact: the statement asks every match up to it);
	// widerFrom is the day the next slice was asked since, allDays
	// when it was not.
	found, widerFrom int
}

// findFirst asks newest's first slice, and in the same statement (one
// round trip, which on a busy machine is much of a search's time) what
// newest would ask next when its page is short: the search over every
// release when the words are rare (fewer than few matches), else (with
// f.wider) the slice since the day newest would take next from the
// matches found, worked out in the statement as newest does. Each is
// asked only when wanted: behind a condition on the first slice's count
// that PostgreSQL checks before running it.
func findFirst(ctx context.Context, db *pgxpool.Pool, s search, now time.Time, f firstSlice) (firstAnswer, error) {
	upTo := s
	upTo.upToPage = true
	recent, args := searchSQL(upTo, now, f.from)
	fromArg := len(args) // the day bound's: the last
	all, _ := searchSQL(s, now, allDays)
	const columns = `key, name, poster, grp, files, bytes, posted, category`
	// The page's bounds are arguments of searchSQL's (limit + 1 and
	// offset, just before from); the next slice's are after.
	limit, offset := "$"+strconv.Itoa(len(args)-2), "$"+strconv.Itoa(len(args)-1)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	need := `(` + limit + `::bigint + ` + offset + `::bigint)`
	few, covered, whole, top := arg(f.few), arg(f.covered.Seconds()), arg(f.whole.Seconds()), arg(float64(f.top.UnixNano())/1e9)
	oldest := arg(f.oldest)
	q := `WITH recent AS MATERIALIZED (` + recent + `),
		found AS MATERIALIZED (SELECT count(*) AS found FROM recent),
		want AS MATERIALIZED (SELECT found, GREATEST(` + covered + `::float8 * ` + strconv.FormatFloat(sliceMargin, 'g', -1, 64) + ` * ` + need + ` / GREATEST(found, 1), 2 * ` + covered + `::float8) AS want FROM found),
		next AS MATERIALIZED (SELECT found, found < ` + need + ` AND found::float8 < ` + few + `::float8 AS rare,
			found < ` + need + ` AND found::float8 >= ` + few + `::float8 AND want < ` + whole + `::float8 / 2
				AND floor((` + top + `::float8 - want) / 86400)::integer > ` + oldest + `::integer AS wider,
			floor((` + top + `::float8 - want) / 86400)::integer AS wider_from FROM want)
		SELECT ` + columns + `, 0, 0::bigint, 0 FROM (SELECT * FROM recent ORDER BY posted DESC, key OFFSET ` + offset + `) page
		UNION ALL
		SELECT ` + columns + `, 2, 0, 0 FROM (` + all + `) every WHERE (SELECT rare FROM next)
		UNION ALL
		SELECT '', '', '', '', 0, 0, 'epoch', 0, 3, found, CASE WHEN wider THEN wider_from END FROM next`
	if f.wider {
		// The next slice: the query of a slice after the first (matches
		// first), since the day worked out above.
		second := s
		second.matchesFirst = true
		wider, _ := searchSQL(second, now, f.from)
		q += `
		UNION ALL
		SELECT ` + columns + `, 1, 0, 0 FROM (` + strings.Replace(wider, sinceDay(fromArg), `leasehold_posted_day(posted) >= (SELECT wider_from FROM next)`, 1) + `) wider
		WHERE (SELECT wider FROM next)`
	}
	var a firstAnswer
	a.widerFrom = allDays
	err := keyed(ctx, db, s.Key, q, args, func(rows pgx.Rows) error {
		var x release
		var part int
		var found int64
		var widerFrom *int32
		if err := rows.Scan(&x.Key, &x.Name, &x.Poster, &x.Group, &x.Files, &x.Bytes, &x.Posted, &x.Category, &part, &found, &widerFrom); err != nil {
			return err
		}
		switch part {
		case 0:
			a.page = append(a.page, x)
		case 1:
			a.wider = append(a.wider, x)
		case 2:
			a.every = append(a.every, x)
		default:
			a.found = int(found)
			if widerFrom != nil && f.wider {
				a.widerFrom = int(*widerFrom)
			}
		}
		return nil
	})
	return a, err
}

// dateSpan is what newest needs to know of the index: its first and
// last posting dates and whether it has releases_day_name, read again
// when a reading is dateSpanAge old. A span read before the newest
// releases came in is still right for newest: every slice holds every
// release posted since its day, so a release posted later is in each;
// one read before older releases came in (a backfill) makes newest ask
// every release sooner, which is right too. So a call never waits for
// a new reading but the first: the reading it finds old is used once
// more while one is made in the background (a round trip every
// dateSpanAge is otherwise the slowest call of a hundred).
type dateSpan struct {
	mu      sync.Mutex
	at      time.Time
	span    indexDates
	reading bool // a background reading is under way
	inCall  bool // an old reading is read again in the call (the benchmark's comparison)
}

// indexDates is a reading of dateSpan.
type indexDates struct {
	first, last time.Time
	any, byDay  bool // any release; the index has releases_day_name
}

// dateSpanAge is how long a reading of the index's dates is used.
const dateSpanAge = 10 * time.Second

func (d *dateSpan) read(ctx context.Context, db *pgxpool.Pool) (indexDates, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at.IsZero() || d.inCall && time.Since(d.at) >= dateSpanAge {
		// The first reading (or an old one read again, as before: the
		// benchmark's comparison): calls meanwhile wait for it (the
		// lock).
		x, err := readDates(ctx, db)
		if err != nil {
			return indexDates{}, err
		}
		d.span, d.at = x, time.Now()
		return x, nil
	}
	if time.Since(d.at) >= dateSpanAge && !d.reading {
		d.reading = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), DefaultStatementTimeout)
			defer cancel()
			x, err := readDates(ctx, db)
			d.mu.Lock()
			defer d.mu.Unlock()
			d.reading = false
			if err == nil { // else the old reading serves until the next try
				d.span, d.at = x, time.Now()
			}
		}()
	}
	return d.span, nil
}

// readDates reads the index's dates.
func readDates(ctx context.Context, db *pgxpool.Pool) (indexDates, error) {
	var first, last *time.Time
	var x indexDates
	err := db.QueryRow(ctx, `SELECT (SELECT min(posted) FROM releases), (SELECT max(posted) FROM releases),
		to_regclass('releases_day_name') IS NOT NULL`).Scan(&first, &last, &x.byDay)
	if err != nil {
		return indexDates{}, err
	}
	if first != nil && last != nil {
		x.first, x.last, x.any = *first, *last, true
	}
	return x, nil
}

// sinceDay is the condition of a release posted on day $n or later.
func sinceDay(n int) string { return "leasehold_posted_day(posted) >= $" + strconv.Itoa(n) }

// searchSQL is a search's query and its arguments, over the releases
// posted on day from or later (allDays for every release). The query
// over every release takes the first arguments of the query since a
// day, the same.
func searchSQL(s search, now time.Time, from int) (string, []any) {
	where := []string{listed}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	for _, w := range s.Words {
		// ILIKE with a pattern of three characters or more is answered
		// from the trigrams of releases_day_name.
		where = append(where, "name ILIKE "+arg("%"+likeEscape(w)+"%"))
	}
	switch {
	case s.Pattern != "" && len(s.Words) > 0 && !s.asBefore:
		// The words find few rows; the pattern (an episode's, whose
		// trigrams are short and many alternatives) costs more to plan
		// and to look up in the index than to ask of each of them: an
		// expression the index is not on.
		where = append(where, "(name || '') ~* "+arg(s.Pattern))
	case s.Pattern != "":
		where = append(where, "name ~* "+arg(s.Pattern))
	}
	if len(s.Categories) > 0 {
		var any []string
		for _, c := range s.Categories {
			if c%1000 == 0 {
				any = append(any, fmt.Sprintf("category BETWEEN %d AND %d", c, c+999))
			} else {
				any = append(any, fmt.Sprintf("category = %d", c))
			}
		}
		// A release written before its worker categorised releases
		// (category 0) may be of any.
		where = append(where, "("+strings.Join(any, " OR ")+" OR category = 0)")
	}
	if s.Group != "" {
		where = append(where, "grp = "+arg(s.Group))
	}
	if s.MaxAge > 0 {
		where = append(where, "posted >= "+arg(now.Add(-s.MaxAge)))
	}
	// The page's bounds are arguments too, so that the statement's
	// text is the same for every page and every search of its shape
	// (one prepared statement on each connection, not one a page).
	limit, offset := arg(int64(s.Limit+1)), arg(int64(s.Offset))
	page := ` ORDER BY posted DESC, key LIMIT ` + limit + ` OFFSET ` + offset
	if s.upToPage {
		page = ` ORDER BY posted DESC, key LIMIT ` + limit + `::bigint + ` + offset + `::bigint`
	}
	if from != allDays {
		// Answered from the same index as the name, releases_day_name.
		// (Not also as posted >= the day's start: that bound makes a
		// walk of the date index look cheap to the planner for words
		// too rare to stop it early.) Last, so that the arguments of
		// the search over every release are the first of these.
		args = append(args, from)
		where = append(where, sinceDay(len(args)))
	}
	cond := strings.Join(where, " AND ")
	const columns = `key, name, poster, grp, files, bytes, posted, category`
	if s.matchesFirst && from != allDays {
		// A slice after newest's first is asked only when the first held
		// fewer matches than the page: its words are too sparse for a
		// walk of the dates, whatever PostgreSQL guesses of them (it
		// takes a title word for three times as common as it is, and
		// then walks a week of dates, 40,000 rows, for 600 matches). The
		// matches are found first (OFFSET 0 keeps the page's LIMIT out
		// of their plan: PostgreSQL plans finding all of them, from the
		// days' and trigrams' index), then ordered.
		return `SELECT * FROM (SELECT ` + columns + ` FROM releases WHERE ` + cond + ` OFFSET 0) matches` + page, args
	}
	return `SELECT ` + columns + ` FROM releases WHERE ` + cond + page, args
}

func scanRelease(r pgx.CollectableRow) (release, error) {
	var x release
	err := r.Scan(&x.Key, &x.Name, &x.Poster, &x.Group, &x.Files, &x.Bytes, &x.Posted, &x.Category)
	return x, err
}

// likeEscape escapes LIKE's wildcards (and its escape) in a word.
func likeEscape(w string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(w)
}

// errNoRelease is returned for a release key the index does not list.
var errNoRelease = errors.New("newznab: no such release")

// one is the listed release of key, or errNoRelease.
func one(ctx context.Context, db *pgxpool.Pool, key string) (release, error) {
	rows, _ := db.Query(ctx, `SELECT key, name, poster, grp, files, bytes, posted, category FROM releases WHERE key = $1 AND `+listed, key)
	r, err := pgx.CollectExactlyOneRow(rows, scanRelease)
	if errors.Is(err, pgx.ErrNoRows) {
		return release{}, errNoRelease
	}
	return r, err
}

// releaseNZB reads a listed release and its files and segments from the
// index as the worker's records, for binaries.NZB. One read-only
// transaction, so a worker writing the release meanwhile is seen before
// or after, never halfway.
func releaseNZB(ctx context.Context, db *pgxpool.Pool, key string) (binaries.Release, []binaries.File, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return binaries.Release{}, nil, err
	}
	defer tx.Rollback(ctx)
	var r binaries.Release
	var posted time.Time
	err = tx.QueryRow(ctx, `SELECT key, name, poster, grp, groups, files, total_files, complete_files, complete, bytes, posted, nzb
		FROM releases WHERE key = $1 AND `+listed, key).Scan(&r.Key, &r.Name, &r.Poster, &r.Group, &r.Groups, &r.Files, &r.TotalFiles,
		&r.CompleteFiles, &r.Complete, &r.Bytes, &posted, &r.NZB)
	if errors.Is(err, pgx.ErrNoRows) {
		return binaries.Release{}, nil, errNoRelease
	}
	if err != nil {
		return binaries.Release{}, nil, err
	}
	r.Type, r.Posted = "release", posted.UTC().Format(time.RFC3339)
	rows, _ := tx.Query(ctx, `SELECT key, release, grp, groups, poster, subject, name, file, files, parts, total, complete, bytes, posted
		FROM files WHERE release = $1 ORDER BY key`, key)
	files, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (binaries.File, error) {
		var f binaries.File
		var posted time.Time
		err := row.Scan(&f.Key, &f.Release, &f.Group, &f.Groups, &f.Poster, &f.Subject, &f.Name, &f.File, &f.Files, &f.Parts, &f.Total, &f.Complete, &f.Bytes, &posted)
		f.Type, f.Posted = "file", posted.UTC().Format(time.RFC3339)
		return f, err
	})
	if err != nil {
		return binaries.Release{}, nil, err
	}
	at := map[string]int{}
	keys := make([]string, len(files))
	for i, f := range files {
		at[f.Key], keys[i] = i, f.Key
	}
	rows, err = tx.Query(ctx, `SELECT file, number, article, message_id, bytes FROM segments WHERE file = ANY($1) ORDER BY file, number`, keys)
	if err != nil {
		return binaries.Release{}, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var file string
		var s binaries.Segment
		if err := rows.Scan(&file, &s.Number, &s.Article, &s.MessageID, &s.Bytes); err != nil {
			return binaries.Release{}, nil, err
		}
		f := &files[at[file]]
		f.Segments = append(f.Segments, s)
	}
	if err := rows.Err(); err != nil {
		return binaries.Release{}, nil, err
	}
	return r, files, nil
}
