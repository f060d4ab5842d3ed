package newznab

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/source/binaries"
)

// world is an index with a few releases, a key, and the API over it.
type world struct {
	db    *pgx.Conn
	url   string // the API's base
	key   string
	api   *Server
	pool  *pgxpool.Pool
	clock *clock
	rels  map[string]binaries.Release
	files map[string][]binaries.File
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var testNow = time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)

func newWorld(t *testing.T) *world {
	t.Helper()
	dbURL, db := testIndex(t)
	w := &world{db: db, clock: &clock{now: testNow}, rels: map[string]binaries.Release{}, files: map[string][]binaries.File{}}
	add := func(key, name, group string, n int, age time.Duration) {
		r, fs := sampleRelease(key, name, group, n, testNow.Add(-age))
		writeRelease(t, db, r, fs)
		w.rels[key], w.files[key] = r, fs
	}
	add("a1", "Some.Show.S01E02.720p.HDTV.x264-GRP", "alt.binaries.tv", 3, time.Hour)
	add("a2", "Some.Show.S01E03.720p.HDTV.x264-GRP", "alt.binaries.tv", 2, 2*time.Hour)
	add("a3", "A.Film.2019.1080p.BluRay.x264-GRP", "alt.binaries.movies", 2, 3*time.Hour)
	add("a4", "Other.Show.S02E01.HDTV.XviD", "alt.binaries.tv", 1, 10*24*time.Hour)
	add("a5", "Daily.Talk.2026.03.15.720p.WEB", "alt.binaries.tv", 1, 5*24*time.Hour)
	// Still being read: not listed, not gettable.
	r, fs := sampleRelease("a6", "Some.Show.S01E04.720p.HDTV.x264-GRP", "alt.binaries.tv", 2, testNow)
	r.Complete, r.CompleteFiles = false, 1
	writeRelease(t, db, r, fs)

	ctx := context.Background()
	key, err := AddKey(ctx, db, "sonarr", testNow)
	if err != nil {
		t.Fatal(err)
	}
	w.key = key
	pool, err := OpenIndex(ctx, dbURL, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	w.pool = pool
	w.api = New(Options{Index: pool, NowFunc: w.clock.Now, MaxFailures: 3})
	srv := httptest.NewServer(w.api)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// call asks the API with params (apikey added unless given) and returns
// the status, the body and the response's headers.
func (w *world) call(t *testing.T, params string) (int, []byte, http.Header) {
	t.Helper()
	v, err := url.ParseQuery(params)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Has("apikey") && v.Get("t") != "caps" {
		v.Set("apikey", w.key)
	}
	resp, err := http.Get(w.url + "/api?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body, resp.Header
}

// feed asks for a feed and returns its items' guids (release keys) and
// its total.
func (w *world) feed(t *testing.T, params string) ([]string, int) {
	t.Helper()
	status, body, _ := w.call(t, params)
	if status != http.StatusOK {
		t.Fatalf("%s: %d %s", params, status, body)
	}
	var f parsedFeed
	if err := xml.Unmarshal(body, &f); err != nil {
		t.Fatalf("%s: %v\n%s", params, err, body)
	}
	var keys []string
	for _, it := range f.Channel.Items {
		keys = append(keys, it.attr("guid")[0])
	}
	return keys, f.Channel.Response.Total
}

// TestSearch: searches by text, category, group, age, page and episode
// find the listed releases that match, newest first.
func TestSearch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, c := range []struct {
		params string
		want   []string
		total  int
	}{
		{"t=search", []string{"a1", "a2", "a3", "a5", "a4"}, 5},
		{"t=search&q=some+show", []string{"a1", "a2"}, 2},
		{"t=search&q=SOME.show+s01e03", []string{"a2"}, 1},
		{"t=search&q=nothing+like+it", nil, 0},
		{"t=search&q=x264&limit=1", []string{"a1"}, 2},
		{"t=search&q=x264&limit=1&offset=1", []string{"a2"}, 3},
		{"t=search&q=x264&limit=1&offset=2", []string{"a3"}, 3},
		{"t=search&cat=2000", []string{"a3"}, 1},
		{"t=search&cat=5040", []string{"a1", "a2", "a5"}, 3},
		{"t=search&cat=2040,5030", []string{"a3", "a4"}, 2},
		{"t=search&group=alt.binaries.movies", []string{"a3"}, 1},
		{"t=search&maxage=1", []string{"a1", "a2", "a3"}, 3},
		{"t=search&limit=2", []string{"a1", "a2"}, 3}, // more follow
		{"t=search&limit=2&offset=2", []string{"a3", "a5"}, 5},
		{"t=search&limit=500", []string{"a1", "a2", "a3", "a5", "a4"}, 5},
		{"t=tvsearch&q=some+show&season=1&ep=3", []string{"a2"}, 1},
		{"t=tvsearch&season=1", []string{"a1", "a2"}, 2},
		{"t=tvsearch&season=2&ep=1", []string{"a4"}, 1},
		{"t=tvsearch&season=2026&ep=03/15", []string{"a5"}, 1},
		{"t=tvsearch", []string{"a1", "a2", "a5", "a4"}, 4},
		{"t=movie&q=film", []string{"a3"}, 1},
		{"t=movie&q=show", nil, 0},
	} {
		t.Run(c.params, func(t *testing.T) {
			got, total := w.feed(t, c.params)
			if !slices.Equal(got, c.want) || total != c.total {
				t.Errorf("got %v (total %d), want %v (total %d)", got, total, c.want, c.total)
			}
		})
	}
}

// TestJSON: o=json gives the feed in newznab's JSON shape.
func TestJSON(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	status, body, h := w.call(t, "t=search&q=film&o=json")
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %s: %s", status, h.Get("Content-Type"), body)
	}
	var j struct {
		Channel struct {
			Response struct {
				Attributes struct{ Total string } `json:"@attributes"`
			}
			Item []struct {
				Title     string
				Enclosure struct {
					Attributes struct{ URL, Length string } `json:"@attributes"`
				}
				Attr []struct {
					Attributes struct{ Name, Value string } `json:"@attributes"`
				}
			}
		}
	}
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	if j.Channel.Response.Attributes.Total != "1" || len(j.Channel.Item) != 1 || j.Channel.Item[0].Title != w.rels["a3"].Name ||
		j.Channel.Item[0].Enclosure.Attributes.Length != "4000" || !strings.Contains(j.Channel.Item[0].Enclosure.Attributes.URL, "t=get&id=a3") {
		t.Fatalf("JSON: %s", body)
	}
	var size string
	for _, a := range j.Channel.Item[0].Attr {
		if a.Attributes.Name == "size" {
			size = a.Attributes.Value
		}
	}
	if size != "4000" {
		t.Errorf("size attribute %q, want 4000: %s", size, body)
	}
	status, body, _ = w.call(t, "t=get&o=json")
	if status != 400 || !strings.Contains(string(body), `"code":200`) {
		t.Errorf("a JSON error: %d %s", status, body)
	}
}

// TestGet: t=get answers the release's NZB as binaries.NZB makes it from
// the worker's records, named for the release; t=details its item.
func TestGet(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	status, body, h := w.call(t, "t=get&id=a1")
	if status != 200 {
		t.Fatalf("t=get: %d %s", status, body)
	}
	if want := binaries.NZB(w.rels["a1"], w.files["a1"]); !bytes.Equal(body, want) {
		t.Errorf("the NZB:\n%s\nwant\n%s", body, want)
	}
	if got, want := h.Get("Content-Disposition"), `attachment; filename=Some.Show.S01E02.720p.HDTV.x264-GRP.nzb`; got != want {
		t.Errorf("Content-Disposition %q, want %q", got, want)
	}
	if got := h.Get("Content-Type"); got != "application/x-nzb" {
		t.Errorf("Content-Type %q", got)
	}
	got, total := w.feed(t, "t=details&id=a3")
	if !slices.Equal(got, []string{"a3"}) || total != 1 {
		t.Errorf("t=details: %v %d", got, total)
	}
}

// indexState is every table's rows as text: what no call may change.
func indexState(t *testing.T, db *pgx.Conn) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"releases", "files", "segments", "api_keys", "leasehold_index_schema"} {
		var s *string
		if err := db.QueryRow(context.Background(), `SELECT string_agg(t::text, E'\n' ORDER BY t::text) FROM `+table+` t`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s != nil {
			b.WriteString(*s)
		}
		b.WriteString("\n--\n")
	}
	return b.String()
}

// TestBadInput: each bad call is answered with its newznab error code,
// and no call changes anything in the index.
func TestBadInput(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	before := indexState(t, w.db)
	for _, c := range []struct {
		params string
		code   int
		status int
	}{
		{"", CodeMissing, 400},
		{"t=nosuch", CodeNoFunction, 400},
		{"t=register", CodeNoFunction, 400},
		{"t=search&apikey=", CodeBadKey, 401},
		{"t=get&id=a1&apikey=0123456789abcdef0123456789abcdef", CodeBadKey, 401},
		{"t=get", CodeMissing, 400},
		{"t=get&id=nosuch", CodeNoItem, 404},
		{"t=get&id=a6", CodeNoItem, 404}, // still being read
		{"t=details", CodeMissing, 400},
		{"t=details&id=nosuch", CodeNoItem, 404},
		{"t=search&limit=ten", CodeBadParameter, 400},
		{"t=search&offset=-1", CodeBadParameter, 400},
		{"t=search&offset=99999999", CodeBadParameter, 400},
		{"t=search&maxage=x", CodeBadParameter, 400},
		{"t=search&cat=tv", CodeBadParameter, 400},
		{"t=search&q=" + strings.Repeat("x", MaxQuery+1), CodeBadParameter, 400},
		{"t=tvsearch&season=one", CodeBadParameter, 400},
		{"t=tvsearch&season=1&ep=x", CodeBadParameter, 400},
		// A word that reads as SQL is a word.
		{"t=search&q=%27%3B+DROP+TABLE+releases%3B--", 0, 200},
		{"t=search&q=100%25+_", 0, 200},
	} {
		t.Run(c.params, func(t *testing.T) {
			status, body, _ := w.call(t, c.params)
			if status != c.status {
				t.Errorf("status %d, want %d: %s", status, c.status, body)
			}
			if c.code == 0 {
				return
			}
			var e ErrorAnswer
			if err := xml.Unmarshal(body, &e); err != nil || e.Code != c.code || e.Description == "" {
				t.Errorf("answer %s, want error %d (%v)", body, c.code, err)
			}
		})
	}
	for _, c := range []struct{ method, path string }{{"GET", "/"}, {"GET", "/api/nosuch"}, {"POST", "/api?t=caps"}} {
		req, _ := http.NewRequest(c.method, w.url+c.path, strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 405 {
			t.Errorf("%s %s: %d, want 404 or 405", c.method, c.path, resp.StatusCode)
		}
	}
	// The API's connections cannot write, whatever a call would make of
	// them.
	if _, err := w.pool.Exec(context.Background(), `DELETE FROM releases`); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a write over the API's connections: %v, want refused as read-only", err)
	}
	if after := indexState(t, w.db); after != before {
		t.Errorf("the calls changed the index:\n%s\nwas\n%s", after, before)
	}
}

// TestKeys: a revoked key is refused; names are unique and checked; a
// remote that sends too many wrong keys is refused, good key or not,
// until its window ends.
func TestKeys(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	if _, err := AddKey(ctx, w.db, "sonarr", testNow); !errors.Is(err, ErrKeyExists) {
		t.Errorf("a second key of a name: %v", err)
	}
	if _, err := AddKey(ctx, w.db, "bad name", testNow); !errors.Is(err, ErrKeyName) {
		t.Errorf("a bad name: %v", err)
	}
	radarr, err := AddKey(ctx, w.db, "radarr", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if status, body, _ := w.call(t, "t=search&apikey="+radarr); status != 200 {
		t.Fatalf("the new key: %d %s", status, body)
	}
	if err := RevokeKey(ctx, w.db, "radarr", testNow); err != nil {
		t.Fatal(err)
	}
	if err := RevokeKey(ctx, w.db, "radarr", testNow); !errors.Is(err, ErrNoKey) {
		t.Errorf("revoking twice: %v", err)
	}
	if status, _, _ := w.call(t, "t=search&apikey="+radarr); status != 401 {
		t.Errorf("the revoked key: %d", status)
	}
	keys, err := ListKeys(ctx, w.db)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Name != "radarr" || keys[0].Revoked == nil || keys[1].Name != "sonarr" || keys[1].Revoked != nil {
		t.Errorf("the keys: %+v", keys)
	}
	// The revoked key was one failure; two more reach the limit of 3.
	for range 2 {
		w.call(t, "t=search&apikey=wrong")
	}
	if got := w.api.Failures(); got != 3 {
		t.Errorf("%d failures counted, want 3", got)
	}
	status, body, _ := w.call(t, "t=search")
	var e ErrorAnswer
	xml.Unmarshal(body, &e)
	if status != http.StatusTooManyRequests || e.Code != CodeLimit {
		t.Errorf("the good key after 3 failures: %d %s", status, body)
	}
	if status, _, _ := w.call(t, "t=caps"); status != 200 {
		t.Errorf("t=caps takes no key, limited or not: %d", status)
	}
	w.clock.add(time.Minute)
	if status, body, _ := w.call(t, "t=search"); status != 200 {
		t.Errorf("the good key a minute later: %d %s", status, body)
	}
}

// TestKeyedSearch: a search's key is checked in its first statement's
// round trip: a wrong or revoked key is refused (and counted) for a
// search by words, an episode and the feed, a wrong key is the answer
// before a wrong parameter, and behind a wrong key no search is run
// (its rows are never read).
func TestKeyedSearch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.fails.mu.Lock()
	w.api.fails.max = 10 // six wrong keys below, all answered as such
	w.api.fails.mu.Unlock()
	ctx := context.Background()
	radarr, err := AddKey(ctx, w.db, "radarr", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if status, body, _ := w.call(t, "t=search&q=film&apikey="+radarr); status != 200 || !strings.Contains(string(body), "A.Film.2019") {
		t.Fatalf("a good key: %d %s", status, body)
	}
	if err := RevokeKey(ctx, w.db, "radarr", testNow); err != nil {
		t.Fatal(err)
	}
	for _, params := range []string{
		"t=search&q=film&apikey=" + radarr,
		"t=search&q=show&apikey=wrong",
		"t=search&q=show+hdtv&offset=3&apikey=wrong",
		"t=tvsearch&q=some+show&season=1&ep=2&apikey=wrong",
		"t=search&cat=5000&apikey=wrong",
		"t=search&q=show&limit=ten&apikey=wrong",
	} {
		status, body, _ := w.call(t, params)
		var e ErrorAnswer
		if err := xml.Unmarshal(body, &e); status != 401 || err != nil || e.Code != CodeBadKey {
			t.Errorf("%s: %d %s, want error %d", params, status, body, CodeBadKey)
		}
	}
	if got := w.api.Failures(); got != 6 {
		t.Errorf("%d failures counted, want 6", got)
	}
	read := 0
	each := func(pgx.Rows) error { read++; return nil }
	if err := keyed(ctx, w.pool, keyHash("wrong"), `SELECT 1 FROM generate_series(1, 5)`, nil, each); !errors.Is(err, errBadKey) || read != 0 {
		t.Errorf("a wrong key: %v, %d rows read, want %v and none", err, read, errBadKey)
	}
	if err := keyed(ctx, w.pool, keyHash(w.key), `SELECT $1::int FROM generate_series(1, 5)`, []any{7}, each); err != nil || read != 5 {
		t.Errorf("a good key: %v, %d rows read, want 5", err, read)
	}
}
