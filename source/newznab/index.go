package newznab

import (
	"context"
	"errors"
	"fmt"
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
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
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
// A search by name looks among the newest releases first (recent):
// PostgreSQL answers a word's matches from the trigram index, then reads
// each matching row to order them by date, so a common word (thousands
// of matches) costs thousands of row reads; the newest releases read in
// date order hold a page of such a word's matches after a few thousand
// rows. Only when they do not (a rarer word, a deep page) is the
// trigram index asked, which a rare word costs little.
func find(ctx context.Context, db *pgxpool.Pool, s search, now time.Time, recent *recentWindow) ([]release, int, error) {
	var out []release
	if len(s.Words) > 0 || s.Pattern != "" {
		if cut, ok := recent.cutoff(ctx, db, now); ok {
			q, args := searchSQL(s, now, &cut)
			rows, _ := db.Query(ctx, q, args...)
			page, err := pgx.CollectRows(rows, scanRelease)
			if err != nil {
				return nil, 0, fmt.Errorf("newznab: searching: %w", err)
			}
			if len(page) > s.Limit {
				// The window holds this page and a row past it: every
				// release newer than those is in the window too.
				out = page
			}
		}
	}
	if out == nil {
		q, args := searchSQL(s, now, nil)
		rows, _ := db.Query(ctx, q, args...)
		var err error
		if out, err = pgx.CollectRows(rows, scanRelease); err != nil {
			return nil, 0, fmt.Errorf("newznab: searching: %w", err)
		}
	}
	total := s.Offset + len(out)
	if len(out) > s.Limit {
		out = out[:s.Limit]
	}
	return out, total, nil
}

// searchSQL is a search's query and its arguments: over every release,
// or, with a cutoff, over those posted since it, read in date order.
func searchSQL(s search, now time.Time, cutoff *time.Time) (string, []any) {
	where := []string{listed}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	name := "name"
	if cutoff != nil {
		// Not the indexed column: the rows since the cutoff are read by
		// date, not looked up by trigram.
		name = "(name || '')"
		where = append(where, "posted >= "+arg(*cutoff))
	}
	for _, w := range s.Words {
		// ILIKE with a pattern of three characters or more is answered
		// from the trigram index on name.
		where = append(where, name+" ILIKE "+arg("%"+likeEscape(w)+"%"))
	}
	if s.Pattern != "" {
		where = append(where, name+" ~* "+arg(s.Pattern))
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
	cond := strings.Join(where, " AND ")
	q := `SELECT key, name, poster, grp, files, bytes, posted, category FROM releases WHERE ` + cond +
		` ORDER BY posted DESC, key LIMIT ` + strconv.Itoa(s.Limit+1) + ` OFFSET ` + strconv.Itoa(s.Offset)
	return q, args
}

// recentWindow is the date from which the newest recentRows releases
// were posted, read again at most every recentEvery: a date a little
// old only makes the window a little larger.
type recentWindow struct {
	rows int // the window's size; 0 means recentRows
	mu   sync.Mutex
	read time.Time // when it was read; zero before
	at   time.Time
	ok   bool // false: the index has fewer releases
}

const (
	recentRows  = 20000
	recentEvery = 30 * time.Second
)

// cutoff is the window's date, and false when the index is smaller than
// the window (search it whole) or the date cannot be read.
func (w *recentWindow) cutoff(ctx context.Context, db *pgxpool.Pool, now time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.read.IsZero() && now.Sub(w.read) < recentEvery && now.After(w.read) {
		return w.at, w.ok
	}
	rows := w.rows
	if rows <= 0 {
		rows = recentRows
	}
	err := db.QueryRow(ctx, `SELECT posted FROM releases ORDER BY posted DESC OFFSET `+strconv.Itoa(rows)+` LIMIT 1`).Scan(&w.at)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false
	}
	w.read, w.ok = now, err == nil
	return w.at, w.ok
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
