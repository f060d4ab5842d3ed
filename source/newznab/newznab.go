// Package newznab serves the newznab API, the protocol every downloader
// and indexer manager speaks (NZBGet's and SABnzbd's RSS feeds, Sonarr,
// Radarr, Prowlarr, NZBHydra2), over the shared PostgreSQL index that
// leasehold's Usenet workers write: t=caps, t=search, t=tvsearch,
// t=movie, t=get (a release's NZB, made from the index) and t=details,
// in RSS 2.0 with newznab's attributes, or JSON with o=json.
//
// The API only reads the index (its connections are read only), so any
// number of API processes may serve one index. Its one table of its own,
// api_keys, is written by the key commands (AddKey, RevokeKey): every
// call but t=caps takes a key, and a remote address that sends wrong
// keys is refused for a while.
package newznab

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/source/binaries"
)

// Newznab's error codes the API answers with.
const (
	CodeBadKey       = 100 // Incorrect user credentials
	CodeMissing      = 200 // Missing parameter
	CodeBadParameter = 201 // Incorrect parameter
	CodeNoFunction   = 202 // No such function
	CodeNoItem       = 300 // No such item
	CodeLimit        = 500 // Request limit reached
	CodeUnknown      = 900 // Unknown error
)

// Error is a newznab error: its code and description, as answered.
type Error struct {
	Code        int
	Description string
}

func (e *Error) Error() string { return fmt.Sprintf("newznab error %d: %s", e.Code, e.Description) }

func apiError(code int, format string, args ...any) *Error {
	return &Error{Code: code, Description: fmt.Sprintf(format, args...)}
}

// status is the HTTP status an error code is answered with: the body
// says the code, the status lets a plain HTTP client tell too.
func (e *Error) status() int {
	switch {
	case e.Code == CodeLimit:
		return http.StatusTooManyRequests
	case e.Code < 200:
		return http.StatusUnauthorized
	case e.Code == CodeNoItem:
		return http.StatusNotFound
	case e.Code < 300:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// Options configure a Server.
type Options struct {
	// Index is the index database, opened with OpenIndex.
	Index *pgxpool.Pool
	// Title names the server in caps and feeds; "" means "leasehold".
	Title string
	// PublicURL is where clients reach the API (https://host:port), for
	// the links in answers; "" takes the scheme and host each request
	// came with.
	PublicURL string
	// Logger logs failed calls; nil means slog.Default().
	Logger *slog.Logger
	// NowFunc is the clock (maxage, the failure window); nil is
	// time.Now.
	NowFunc func() time.Time
	// MaxFailures is how many calls with a wrong key one remote address
	// may make in FailureWindow before its calls are refused (error 500)
	// until the window ends; 0 means 10.
	MaxFailures int
	// FailureWindow is that window; 0 means a minute.
	FailureWindow time.Duration
	// CallTimeout bounds one call; 0 means 15 s. Each statement is
	// bounded by the index connection's statement timeout too.
	CallTimeout time.Duration
}

// Server answers the newznab API at /api.
type Server struct {
	db        *pgxpool.Pool
	title     string
	publicURL string
	log       *slog.Logger
	now       func() time.Time
	timeout   time.Duration
	echo      *echo.Echo
	fails     failures
	oneQuery  bool // search as before newest (the benchmark's comparison)
	// asBefore answers searches as before their round trips and work
	// were cut (the benchmark's comparison): the key checked in a round
	// trip of its own, the first statement asking one slice, an old
	// reading of the index's dates read again in the call, the feed
	// written by encoding/xml.
	asBefore bool
	dates    dateSpan
}

// New builds the API's server.
func New(o Options) *Server {
	s := &Server{db: o.Index, title: o.Title, publicURL: strings.TrimSuffix(o.PublicURL, "/"), log: o.Logger, now: o.NowFunc, timeout: o.CallTimeout}
	if s.title == "" {
		s.title = "leasehold"
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.timeout <= 0 {
		s.timeout = 15 * time.Second
	}
	s.fails = failures{max: o.MaxFailures, window: o.FailureWindow, remotes: map[string]*tally{}}
	if s.fails.max <= 0 {
		s.fails.max = 10
	}
	if s.fails.window <= 0 {
		s.fails.window = time.Minute
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *echo.HTTPError
		if errors.As(err, &he) && he.Code < 500 {
			c.String(he.Code, "the newznab API answers GET /api\n")
			return
		}
		c.String(http.StatusInternalServerError, "internal error\n")
	}
	e.GET("/api", s.api)
	e.GET("/api/", s.api)
	s.echo = e
	return s
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Failures is how many calls were refused for a wrong or missing key.
func (s *Server) Failures() int64 { return s.fails.total.Load() }

// api answers /api: the function t, with the key it takes.
func (s *Server) api(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.timeout)
	defer cancel()
	err := s.call(ctx, c)
	if err == nil {
		return nil
	}
	var ae *Error
	if !errors.As(err, &ae) {
		if ctx.Err() != nil {
			ae = apiError(CodeUnknown, "the index took too long to answer")
		} else {
			ae = apiError(CodeUnknown, "the index could not answer")
		}
		s.log.Error("newznab call failed", "t", c.QueryParam("t"), "err", err)
	}
	return s.answerError(c, ae)
}

func (s *Server) call(ctx context.Context, c echo.Context) error {
	t := c.QueryParam("t")
	switch t {
	case "":
		return apiError(CodeMissing, "Missing parameter (t)")
	case "caps":
		return s.answerXML(c, caps(s.title))
	case "search", "tvsearch", "tv", "movie", "get", "details":
	default:
		return apiError(CodeNoFunction, "No such function (%.40s)", t)
	}
	switch t {
	case "get", "details":
		if err := s.authenticate(ctx, c); err != nil {
			return err
		}
		if t == "get" {
			return s.get(ctx, c)
		}
		return s.details(ctx, c)
	}
	q, err := s.searchOf(c, t)
	if err != nil {
		// A wrong key is the answer before a wrong parameter.
		if err := s.authenticate(ctx, c); err != nil {
			return err
		}
		return err
	}
	// The key is checked in the search's first round trip.
	remote, hash, err := s.admit(c)
	if err != nil {
		return err
	}
	if hash == nil {
		return s.refuse(remote)
	}
	q.OneQuery, q.Key = s.oneQuery, hash
	if s.asBefore {
		if err := s.authenticate(ctx, c); err != nil {
			return err
		}
		q.Key, q.asBefore = nil, true
	}
	found, total, err := find(ctx, s.db, &s.dates, q, s.now())
	if errors.Is(err, errBadKey) {
		return s.refuse(remote)
	}
	if err != nil {
		return err
	}
	return s.answerFeed(c, found, q.Offset, total)
}

// authenticate lets a call with a good key through. A remote address
// that sent too many wrong keys within the window is refused without
// its key being looked at, so keys cannot be guessed at speed.
func (s *Server) authenticate(ctx context.Context, c echo.Context) error {
	remote, hash, err := s.admit(c)
	if err != nil {
		return err
	}
	good := false
	if hash != nil {
		if err := s.db.QueryRow(ctx, keySQL, hash).Scan(&good); err != nil {
			return err
		}
	}
	if good {
		return nil
	}
	return s.refuse(remote)
}

// admit is the remote address of a call and the hash of its key (nil
// when it has none, or one too long to be a key), or error 500 when
// the address sent too many wrong keys.
func (s *Server) admit(c echo.Context) (remote string, hash []byte, err error) {
	remote = c.Request().RemoteAddr
	if host, _, err := net.SplitHostPort(remote); err == nil {
		remote = host
	}
	if s.fails.blocked(remote, s.now()) {
		return remote, nil, apiError(CodeLimit, "Request limit reached (too many wrong API keys from this address; try again later)")
	}
	if key := c.QueryParam("apikey"); key != "" && len(key) <= 128 {
		hash = keyHash(key)
	}
	return remote, hash, nil
}

// refuse counts a wrong key from remote and is error 100.
func (s *Server) refuse(remote string) error {
	if n, log := s.fails.failed(remote, s.now()); log {
		s.log.Warn("newznab: wrong API key", "remote", remote, "failures", n)
	}
	return apiError(CodeBadKey, "Incorrect user credentials")
}

// searchOf reads a search call's parameters.
func (s *Server) searchOf(c echo.Context, t string) (search, error) {
	q := search{Limit: MaxLimit}
	text := c.QueryParam("q")
	if len(text) > MaxQuery {
		return q, apiError(CodeBadParameter, "Incorrect parameter (q: longer than %d bytes)", MaxQuery)
	}
	q.Words = strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(q.Words) > 16 {
		return q, apiError(CodeBadParameter, "Incorrect parameter (q: more than 16 words)")
	}
	var err error
	if q.Limit, err = intParam(c, "limit", MaxLimit, 0, 1<<30); err != nil {
		return q, err
	}
	q.Limit = min(q.Limit, MaxLimit) // newznab's way: a larger limit is the most there is
	if q.Limit == 0 {
		q.Limit = MaxLimit
	}
	if q.Offset, err = intParam(c, "offset", 0, 0, MaxOffset); err != nil {
		return q, err
	}
	days, err := intParam(c, "maxage", 0, 0, 100000)
	if err != nil {
		return q, err
	}
	q.MaxAge = time.Duration(days) * 24 * time.Hour
	if g := c.QueryParam("group"); g != "" {
		if len(g) > 255 {
			return q, apiError(CodeBadParameter, "Incorrect parameter (group)")
		}
		q.Group = g
	}
	if cat := c.QueryParam("cat"); cat != "" {
		for _, f := range strings.Split(cat, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 || n > 99999 || len(q.Categories) >= 32 {
				return q, apiError(CodeBadParameter, "Incorrect parameter (cat: numbers separated by commas)")
			}
			q.Categories = append(q.Categories, n)
		}
	}
	switch t {
	case "tvsearch", "tv":
		if len(q.Categories) == 0 {
			q.Categories = []int{binaries.CategoryTV}
		}
		q.Pattern, err = episodePattern(c.QueryParam("season"), c.QueryParam("ep"))
		if err != nil {
			return q, err
		}
	case "movie":
		if len(q.Categories) == 0 {
			q.Categories = []int{binaries.CategoryMovies}
		}
	}
	return q, nil
}

// intParam is the integer parameter name, or def when it is absent.
func intParam(c echo.Context, name string, def, lo, hi int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, apiError(CodeBadParameter, "Incorrect parameter (%s: a number from %d to %d)", name, lo, hi)
	}
	return n, nil
}

var (
	digits   = regexp.MustCompile(`^\d{1,4}$`)
	dailyDay = regexp.MustCompile(`^(\d{1,2})/(\d{1,2})$`)
)

// episodePattern is the regular expression (PostgreSQL's) of names of
// season season, episode ep: S01E02 or 1x02, a season alone for a
// season's releases, or a daily show's date (season 2024, ep 03/15).
func episodePattern(season, ep string) (string, error) {
	if season == "" && ep == "" {
		return "", nil
	}
	if season != "" && !digits.MatchString(season) {
		return "", apiError(CodeBadParameter, "Incorrect parameter (season)")
	}
	sn, _ := strconv.Atoi(season)
	if m := dailyDay.FindStringSubmatch(ep); m != nil && len(season) == 4 {
		mo, _ := strconv.Atoi(m[1])
		d, _ := strconv.Atoi(m[2])
		return fmt.Sprintf(`(^|[^0-9])%04d[ ._-]%02d[ ._-]%02d([^0-9]|$)`, sn, mo, d), nil
	}
	if ep != "" && !digits.MatchString(ep) {
		return "", apiError(CodeBadParameter, "Incorrect parameter (ep)")
	}
	en, _ := strconv.Atoi(ep)
	switch {
	case season == "":
		return fmt.Sprintf(`(^|[^a-z0-9])s[0-9]{1,3}[ ._-]?e0*%d([^0-9]|$)`, en), nil
	case ep == "":
		return fmt.Sprintf(`(^|[^a-z0-9])(s0*%d(e|[^0-9]|$)|%dx[0-9])`, sn, sn), nil
	}
	return fmt.Sprintf(`(^|[^a-z0-9])(s0*%d[ ._-]?e0*%d|%dx0*%d)([^0-9]|$)`, sn, en, sn, en), nil
}

// idParam is the id parameter: a release key.
func idParam(c echo.Context) (string, error) {
	id := c.QueryParam("id")
	if id == "" {
		return "", apiError(CodeMissing, "Missing parameter (id)")
	}
	if len(id) > 256 {
		return "", apiError(CodeBadParameter, "Incorrect parameter (id)")
	}
	return id, nil
}

// get answers t=get: the release's NZB, made from the index.
func (s *Server) get(ctx context.Context, c echo.Context) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	r, files, err := releaseNZB(ctx, s.db, id)
	if errors.Is(err, errNoRelease) {
		return apiError(CodeNoItem, "No such item (%.64s)", id)
	}
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": fileName(r.Name) + ".nzb"}))
	// NZBGet and SABnzbd read the name and category of a download from
	// these.
	h.Set("X-DNZB-Name", headerSafe(r.Name))
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	h.Set("X-DNZB-Category", categoryName(binaries.Category(r.Name, names)))
	return c.Blob(http.StatusOK, nzbType, binaries.NZB(r, files))
}

// details answers t=details: the release as a feed of one item.
func (s *Server) details(ctx context.Context, c echo.Context) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	r, err := one(ctx, s.db, id)
	if errors.Is(err, errNoRelease) {
		return apiError(CodeNoItem, "No such item (%.64s)", id)
	}
	if err != nil {
		return err
	}
	return s.answerFeed(c, []release{r}, 0, 1)
}

// fileName is a release name made safe for a file name.
func fileName(name string) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(`/\:*?"<>|`, r) {
			return '_'
		}
		return r
	}, name)
	name = strings.Trim(name, ". ")
	if len(name) > 200 {
		name = name[:200]
	}
	if name == "" {
		return "release"
	}
	return name
}

// headerSafe is text for a header: no line breaks, printable ASCII.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, s)
}

// base is where the caller reached the API, for links.
func (s *Server) base(c echo.Context) string {
	if s.publicURL != "" {
		return s.publicURL
	}
	scheme := "http"
	if c.Request().TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.Request().Host
}

// answerFeed answers found as RSS, or JSON with o=json.
func (s *Server) answerFeed(c echo.Context, found []release, offset, total int) error {
	base := s.base(c)
	key := c.QueryParam("apikey")
	feed := RSS{Version: "2.0", Atom: "http://www.w3.org/2005/Atom", Newznab: NewznabNS, Channel: Channel{
		AtomLink: AtomLink{Href: base + "/api", Rel: "self", Type: "application/rss+xml"},
		Title:    s.title, Description: s.title + " Usenet index", Link: base + "/", Language: "en-gb",
		Response: Response{Offset: offset, Total: total},
		Items:    []Item{},
	}}
	for _, r := range found {
		if r.Category == 0 {
			// Written before its worker categorised releases.
			r.Category = binaries.Category(r.Name, nil)
		}
		feed.Channel.Items = append(feed.Channel.Items, item(base, key, r))
	}
	if c.QueryParam("o") == "json" {
		return c.JSON(http.StatusOK, asJSON(feed))
	}
	if s.asBefore {
		return s.answerXML(c, feed)
	}
	return c.Blob(http.StatusOK, "application/rss+xml; charset=utf-8", append([]byte(xml.Header), feedXML(feed)...))
}

// answerXML writes v as an XML document.
func (s *Server) answerXML(c echo.Context, v any) error {
	return s.xmlStatus(c, http.StatusOK, v)
}

func (s *Server) xmlStatus(c echo.Context, status int, v any) error {
	b, err := xml.Marshal(v)
	if err != nil {
		return err
	}
	ct := "application/xml; charset=utf-8"
	if _, ok := v.(RSS); ok {
		ct = "application/rss+xml; charset=utf-8"
	}
	return c.Blob(status, ct, append([]byte(xml.Header), b...))
}

// answerError writes a newznab error, as JSON with o=json.
func (s *Server) answerError(c echo.Context, e *Error) error {
	a := ErrorAnswer{Code: e.Code, Description: e.Description}
	if c.QueryParam("o") == "json" {
		b, _ := json.Marshal(map[string]ErrorAnswer{"error": a})
		return c.Blob(e.status(), echo.MIMEApplicationJSON, b)
	}
	return s.xmlStatus(c, e.status(), a)
}

// failures counts wrong keys by remote address in fixed windows: a
// remote with max failures in its window is refused until the window
// ends. At most maxRemotes addresses are tracked, so a flood from many
// addresses cannot grow it without bound (past that, failures are
// counted but not limited, as the node's log of them does).
type failures struct {
	max    int
	window time.Duration
	total  atomic.Int64

	mu      sync.Mutex
	remotes map[string]*tally
}

type tally struct {
	start  time.Time // the window's start
	n      int       // failures in it
	logged bool      // whether this window's first failure was logged
}

const maxRemotes = 4096

// blocked reports whether remote is refused now.
func (f *failures) blocked(remote string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.remotes[remote]
	return t != nil && t.n >= f.max && now.Sub(t.start) < f.window
}

// failed counts a wrong key from remote: the failures in its window,
// and whether to log it (once a window a remote, so a flood of wrong
// keys is a line a minute).
func (f *failures) failed(remote string, now time.Time) (int, bool) {
	f.total.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.remotes[remote]
	if t == nil {
		if len(f.remotes) >= maxRemotes {
			for r, t := range f.remotes {
				if now.Sub(t.start) >= f.window {
					delete(f.remotes, r)
				}
			}
		}
		if len(f.remotes) >= maxRemotes {
			return 0, false
		}
		t = &tally{start: now}
		f.remotes[remote] = t
	}
	if now.Sub(t.start) >= f.window {
		*t = tally{start: now}
	}
	t.n++
	log := !t.logged
	t.logged = true
	return t.n, log
}
