// Command benchload is the load generator and machine-limit probe behind
// scripts/bench.sh. It is not part of the node: it seeds a catalog through
// the store's bulk path, drives lease cycles over HTTP against a running
// `leasehold serve`, measures raw SQLite commits on the same disk, and runs
// the same load against echo answering a fixed JSON body, so the node's
// figures can be read as fractions of what this machine can do at all.
//
//	benchload seed   -data DIR -groups N [-prefix bench.]
//	benchload cycle  -url URL -admin-token T -workers 32 -duration 10s [-ca-file CA]
//	benchload poll   -url URL -admin-token T [-dashboards 10] -duration 5s
//	benchload sqlite -dir DIR -duration 3s
//	benchload echo   -workers 32 -duration 10s
//	benchload snapfile|snapshot|fileserve ...  (snapshot.go)
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/proccpu"
	"github.com/leasehold/leasehold/store"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchload seed|cycle|poll|sqlite|echo|snapfile|snapshot|fileserve [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var err error
	switch os.Args[1] {
	case "seed":
		data := fs.String("data", "", "the node's data directory (node stopped)")
		groups := fs.Int64("groups", 1000, "groups to create")
		ranges := fs.Int64("ranges", 0, "ranges of 100 ids each group gets (default: 40,000 in all, at least 2 a group)")
		prefix := fs.String("prefix", "bench.", "the groups' name prefix (each node of a fleet seeds its own)")
		fs.Parse(os.Args[2:])
		if *ranges <= 0 {
			*ranges = max(2, 40000 / *groups)
		}
		err = seed(*data, *prefix, *groups, *ranges)
	case "cycle":
		url := fs.String("url", "", "the node's base URL")
		admin := fs.String("admin-token", "", "the node's admin token")
		workers := fs.Int("workers", 32, "concurrent workers, each a registered node")
		dur := fs.Duration("duration", 10*time.Second, "how long to load")
		prefix := fs.String("prefix", "bench", "worker node name prefix")
		fs.StringVar(&caFile, "ca-file", "", "the CA (PEM) of an https node's certificate")
		pattern := fs.String("pattern", "four", "four: lease, next, finish, release a cycle; steady: lease, then "+
			"next and ten rounds of next with finished (ten ranges), then release, as client's worker does")
		fs.Parse(os.Args[2:])
		err = cycle(*url, *admin, *workers, *dur, *prefix, *pattern)
	case "poll":
		url := fs.String("url", "", "the node's base URL")
		admin := fs.String("admin-token", "", "the node's admin token")
		dashboards := fs.Int("dashboards", 0, "0: each polled read back to back; N: N open dashboards refreshing every 3 s")
		dur := fs.Duration("duration", 5*time.Second, "how long each read (or the dashboards) runs")
		fs.Parse(os.Args[2:])
		err = poll(*url, *admin, *dashboards, *dur)
	case "sqlite":
		dir := fs.String("dir", os.TempDir(), "directory on the disk to measure")
		dur := fs.Duration("duration", 3*time.Second, "how long each mode runs")
		fs.Parse(os.Args[2:])
		err = sqliteLimits(*dir, *dur)
	case "echo":
		workers := fs.Int("workers", 32, "concurrent clients")
		dur := fs.Duration("duration", 10*time.Second, "how long to load")
		fs.Parse(os.Args[2:])
		err = echoLimit(*workers, *dur)
	case "snapfile":
		out := fs.String("out", "", "the file to write")
		mib := fs.Int64("mib", 1024, "its size in MiB (before gzip's few bytes of framing)")
		fs.Parse(os.Args[2:])
		err = snapFile(*out, *mib)
	case "snapshot":
		url := fs.String("url", "", "the node's base URL")
		token := fs.String("token", "", "the holder's node token")
		group := fs.Int64("group", 0, "the held group's id")
		fence := fs.Int64("fence", 0, "the lease's fence")
		next := fs.Int64("next", 1, "the id the uploaded window covers up to")
		file := fs.String("file", "", "the gzip file to upload (op put)")
		op := fs.String("op", "put", "put (upload file) or get (download the stored snapshot)")
		digest := fs.Bool("digest", true, "name the upload's sha-256 in Repr-Digest")
		fs.Parse(os.Args[2:])
		err = snapshotTransfer(*url, *token, *group, *fence, *next, *file, *op, *digest)
	case "fileserve":
		file := fs.String("file", "", "the file to serve")
		listen := fs.String("listen", "127.0.0.1:0", "the address to serve on (printed)")
		fs.Parse(os.Args[2:])
		err = fileServe(*file, *listen)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchload:", err)
		os.Exit(1)
	}
}

func seed(data, prefix string, groups, ranges int64) error {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	db, err := store.Open(filepath.Join(data, "catalog.db"), store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	start := time.Now()
	if err := db.BulkGroups(context.Background(), prefix, groups, 100, ranges); err != nil {
		return err
	}
	fmt.Printf("seeded %d groups (%d ranges) in %s\n", groups, groups*ranges, time.Since(start).Round(time.Millisecond))
	return nil
}

// result is one load run's figures; JSON for the script's table.
type result struct {
	Cycles     int64              `json:"cycles"`
	Seconds    float64            `json:"seconds"`
	PerSecond  float64            `json:"cycles_per_s"`
	P50        map[string]float64 `json:"p50_ms"`
	P99        map[string]float64 `json:"p99_ms"`
	Commits    float64            `json:"commits_per_s,omitempty"`
	BatchMean  float64            `json:"batch_mean,omitempty"`
	Errors     int64              `json:"errors"`
	FirstError string             `json:"first_error,omitempty"`
	// CPUPerCycle is the load generator's own CPU (user and system) a
	// cycle, in µs, so that its share of the machine can be told apart.
	CPUPerCycle float64 `json:"loadgen_cpu_us_per_cycle"`
	// Ranges is how many ranges were finished (a cycle finishes one in
	// the four-call pattern, up to ten in the steady one).
	Ranges          int64   `json:"ranges"`
	RangesPerSecond float64 `json:"ranges_per_s"`
}

type caller struct {
	client *http.Client
	base   string
}

func (c *caller) do(method, path, token, body string) (int, []byte, time.Duration, error) {
	start := time.Now()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, raw, time.Since(start), err
}

// load runs workers goroutines doing one cycle function until dur ends and
// gathers latencies per call name.
func load(workers int, dur time.Duration, cycleFunc func(w int, lat func(string, time.Duration)) error) result {
	var cycles, errs atomic.Int64
	var first atomic.Value
	var mu sync.Mutex
	all := map[string][]time.Duration{}
	deadline := time.Now().Add(dur)
	start := time.Now()
	cpu0 := proccpu.Used()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			mine := map[string][]time.Duration{}
			lat := func(name string, d time.Duration) { mine[name] = append(mine[name], d) }
			for time.Now().Before(deadline) {
				if err := cycleFunc(w, lat); err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				cycles.Add(1)
			}
			mu.Lock()
			for k, v := range mine {
				all[k] = append(all[k], v...)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	r := result{Cycles: cycles.Load(), Seconds: el, PerSecond: float64(cycles.Load()) / el,
		P50: map[string]float64{}, P99: map[string]float64{}, Errors: errs.Load(),
		CPUPerCycle: float64((proccpu.Used() - cpu0).Microseconds()) / float64(max(cycles.Load(), 1))}
	if s, ok := first.Load().(string); ok {
		r.FirstError = s
	}
	for k, v := range all {
		slices.Sort(v)
		r.P50[k] = ms(v[len(v)/2])
		r.P99[k] = ms(v[int(float64(len(v)-1)*0.99)])
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// caFile, when set, is the CA of an https node's certificate (cycle
// -ca-file): to measure what TLS costs.
var caFile string

func newCaller(base string, workers int) *caller {
	tr := &http.Transport{MaxIdleConnsPerHost: workers * 2, MaxIdleConns: workers * 2}
	if caFile != "" {
		cfg, err := client.LoadTLS(caFile, "", "")
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchload:", err)
			os.Exit(2)
		}
		tr.TLSClientConfig = cfg
	}
	return &caller{base: base, client: &http.Client{Timeout: 30 * time.Second, Transport: tr}}
}

func cycle(url, admin string, workers int, dur time.Duration, prefix, pattern string) error {
	if pattern != "four" && pattern != "steady" {
		return fmt.Errorf("pattern %q: four or steady", pattern)
	}
	c := newCaller(strings.TrimRight(url, "/")+"/api/v1", workers)
	tokens := make([]string, workers)
	for i := range tokens {
		st, raw, _, err := c.do("POST", "/nodes", admin, fmt.Sprintf(`{"name":"%s-%d","capacity":1}`, prefix, i))
		if err != nil || st != 201 && st != 200 {
			return fmt.Errorf("registering a worker: %d %s %v", st, raw, err)
		}
		var n struct{ Token string }
		json.Unmarshal(raw, &n)
		tokens[i] = n.Token
	}
	before, err := commitStats(url)
	if err != nil {
		return err
	}
	var ranges atomic.Int64
	r := load(workers, dur, func(w int, lat func(string, time.Duration)) error {
		tok := tokens[w]
		if pattern == "steady" {
			return steady(c, tok, lat, &ranges)
		}
		st, raw, d, err := c.do("POST", "/leases", tok, "")
		if err != nil || st != 200 {
			return fmt.Errorf("lease: %d %s %v", st, raw, err)
		}
		lat("lease", d)
		var g struct {
			Group struct{ ID int64 }
			Fence int64
		}
		json.Unmarshal(raw, &g)
		fence := fmt.Sprintf(`{"fence":%d}`, g.Fence)
		st, raw, d, err = c.do("POST", fmt.Sprintf("/leases/%d/next", g.Group.ID), tok, fence)
		if err != nil || st != 200 {
			return fmt.Errorf("next: %d %s %v", st, raw, err)
		}
		lat("next", d)
		var rg struct{ Range struct{ ID int64 } }
		json.Unmarshal(raw, &rg)
		st, raw, d, err = c.do("POST", fmt.Sprintf("/ranges/%d/finish", rg.Range.ID), tok, fmt.Sprintf(`{"fence":%d,"headers":100}`, g.Fence))
		if err != nil || st != 200 {
			return fmt.Errorf("finish: %d %s %v", st, raw, err)
		}
		lat("finish", d)
		ranges.Add(1)
		st, raw, d, err = c.do("POST", fmt.Sprintf("/leases/%d/release", g.Group.ID), tok, fence)
		if err != nil || st != 200 {
			return fmt.Errorf("release: %d %s %v", st, raw, err)
		}
		lat("release", d)
		return nil
	})
	after, err := commitStats(url)
	if err != nil {
		return err
	}
	r.Ranges = ranges.Load()
	r.RangesPerSecond = float64(r.Ranges) / r.Seconds
	r.Commits = (after[1] - before[1]) / r.Seconds
	r.BatchMean = (after[0] - before[0]) / max(after[1]-before[1], 1)
	return json.NewEncoder(os.Stdout).Encode(r)
}

// steadyRounds is how many ranges a steady cycle finishes at most.
const steadyRounds = 10

// steady is one cycle of a worker's steady pattern: lease, next, then next
// with the range just finished until ten are finished or the group is
// caught up, then release.
func steady(c *caller, tok string, lat func(string, time.Duration), ranges *atomic.Int64) error {
	st, raw, d, err := c.do("POST", "/leases", tok, "")
	if err != nil || st != 200 {
		return fmt.Errorf("lease: %d %s %v", st, raw, err)
	}
	lat("lease", d)
	var g struct {
		Group struct{ ID int64 }
		Fence int64
	}
	json.Unmarshal(raw, &g)
	body := fmt.Sprintf(`{"fence":%d}`, g.Fence)
	for round := 0; ; round++ {
		st, raw, d, err = c.do("POST", fmt.Sprintf("/leases/%d/next", g.Group.ID), tok, body)
		if err != nil || st != 200 && st != 204 {
			return fmt.Errorf("next: %d %s %v", st, raw, err)
		}
		if round == 0 {
			lat("next", d)
		} else {
			lat("finish", d) // next with finished
			ranges.Add(1)
		}
		if st == 204 || round == steadyRounds {
			break
		}
		var rg struct{ Range struct{ ID int64 } }
		json.Unmarshal(raw, &rg)
		body = fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":100}}`, g.Fence, rg.Range.ID)
	}
	st, raw, d, err = c.do("POST", fmt.Sprintf("/leases/%d/release", g.Group.ID), tok, fmt.Sprintf(`{"fence":%d}`, g.Fence))
	if err != nil || st != 200 {
		return fmt.Errorf("release: %d %s %v", st, raw, err)
	}
	lat("release", d)
	return nil
}

// commitStats reads the group-commit histogram's sum (writes) and count
// (commits) from the node's /metrics.
func commitStats(url string) ([2]float64, error) {
	var out [2]float64
	resp, err := newCaller(url, 1).client.Get(strings.TrimRight(url, "/") + "/metrics")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "leasehold_commit_batch_writes_sum":
			out[0] = v
		case "leasehold_commit_batch_writes_count":
			out[1] = v
		}
	}
	return out, sc.Err()
}

// sqliteLimits: UPDATE of one row per transaction and 64 per transaction,
// FULL and NORMAL, on the same disk and with the same SQLite as the node.
func sqliteLimits(dir string, dur time.Duration) error {
	tmp, err := os.MkdirTemp(dir, "benchload-sqlite-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	type mode struct {
		Sync      string  `json:"synchronous"`
		PerTx     int     `json:"updates_per_tx"`
		CommitsPS float64 `json:"commits_per_s"`
		UpdatesPS float64 `json:"updates_per_s"`
	}
	var out []mode
	for _, sync := range []string{"FULL", "NORMAL"} {
		for _, per := range []int{1, 64} {
			path := filepath.Join(tmp, fmt.Sprintf("%s-%d.db", sync, per))
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+sync+")")
			if err != nil {
				return err
			}
			db.SetMaxOpenConns(1)
			if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL) STRICT;
				WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 10000) INSERT INTO t SELECT i, 0 FROM c`); err != nil {
				return err
			}
			st, err := db.Prepare(`UPDATE t SET v = v + 1 WHERE id = ?`)
			if err != nil {
				return err
			}
			var commits, i int64
			start := time.Now()
			for time.Since(start) < dur {
				tx, err := db.Begin()
				if err != nil {
					return err
				}
				for range per {
					i++
					if _, err := tx.Stmt(st).Exec(i%10000 + 1); err != nil {
						return err
					}
				}
				if err := tx.Commit(); err != nil {
					return err
				}
				commits++
			}
			el := time.Since(start).Seconds()
			out = append(out, mode{sync, per, float64(commits) / el, float64(commits*int64(per)) / el})
			db.Close()
		}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// echoLimit: echo answering a fixed JSON body, four requests a cycle like
// the lease cycle, under the same load generator.
func echoLimit(workers int, dur time.Duration) error {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	body := []byte(`{"group":{"id":1,"name":"bench.1"},"fence":7,"takeover":false}`)
	e.POST("/api/v1/*", func(c echo.Context) error { return c.JSONBlob(http.StatusOK, body) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: e}
	go srv.Serve(ln)
	defer srv.Close()
	c := newCaller("http://"+ln.Addr().String()+"/api/v1", workers)
	r := load(workers, dur, func(w int, lat func(string, time.Duration)) error {
		for _, name := range []string{"lease", "next", "finish", "release"} {
			st, _, d, err := c.do("POST", "/"+name, "x", `{"fence":7}`)
			if err != nil || st != 200 {
				return fmt.Errorf("%s: %d %v", name, st, err)
			}
			lat(name, d)
		}
		return nil
	})
	return json.NewEncoder(os.Stdout).Encode(r)
}
