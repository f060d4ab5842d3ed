package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
	"github.com/leasehold/leasehold/internal/usenettest"
)

// workerMetricName tells a worker's metric (--metrics-listen) from a
// node's in contrib's files: the node's TestContribMetricsExist leaves
// these to TestWorkerContribMetricsExist.
var workerMetricName = regexp.MustCompile(`^leasehold_(?:worker|nntp|usenet)_`)

// scrape is one reading of a worker's /metrics: every series' value by
// its line's name and labels, and the metric names served.
type scrape struct {
	series map[string]float64
	names  map[string]bool
}

func scrapeMetrics(t *testing.T, addr string) scrape {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	s := scrape{series: map[string]float64{}, names: map[string]bool{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("a metrics line without a value: %q", line)
		}
		s.series[line[:i]] = v
		s.names[line[:strings.IndexAny(line, "{ ")]] = true
	}
	return s
}

// lagSeries are the lag series of a scrape, by group.
func (s scrape) lagSeries() map[string]float64 {
	out := map[string]float64{}
	for k, v := range s.series {
		if g, ok := strings.CutPrefix(k, `leasehold_worker_lag_items{group="`); ok {
			out[strings.TrimSuffix(g, `"}`)] = v
		}
	}
	return out
}

// startMetricsWorker runs `leasehold worker args… --metrics-listen
// 127.0.0.1:0` in this process until the test ends, and returns the
// address it serves metrics on (from its log) and its log.
func startMetricsWorker(t *testing.T, args ...string) (string, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		ended <- runWorker(ctx, append(args, "--metrics-listen", "127.0.0.1:0"), logs, logs)
	}()
	t.Cleanup(func() {
		stop()
		<-ended
	})
	served := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)
	var addr string
	poll.Until(t, 30*time.Second, "the worker serving metrics", func() error {
		select {
		case err := <-ended:
			ended <- err
			t.Fatalf("the worker ended: %v\n%s", err, logs.String())
		default:
		}
		if m := served.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
			return nil
		}
		return fmt.Errorf("no address in the log yet")
	})
	return addr, logs
}

// TestWorkerMetricsLag runs the plain worker with --metrics-listen over a
// group it reads slowly (--rate): while it holds the group the lag to
// the group's end is served for that group alone, and once the group is
// let go its series is gone (labels bounded by the groups held); the
// ranges and ids it read are counted. An address that cannot be bound
// is one line and exit 2, before anything else.
func TestWorkerMetricsLag(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	const g = "metrics.lag"
	admin(t, n, "groups", "create", g, "--range-size", "100", "--start", "1")
	admin(t, n, "groups", "tail", g, "400")
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q"))
	addr, logs := startMetricsWorker(t, "--url", n.URL, "--token", token, "--capacity", "1", "--rate", "400")

	poll.Until(t, time.Minute, "the held group's lag", func() error {
		s := scrapeMetrics(t, addr)
		lag := s.lagSeries()
		if len(lag) != 1 || lag[g] <= 0 || lag[g] > 400 || s.series["leasehold_worker_groups_held"] != 1 {
			return fmt.Errorf("lag %v, held %v", lag, s.series["leasehold_worker_groups_held"])
		}
		return nil
	})
	c := client.New(n.URL, n.AdminToken)
	poll.Until(t, time.Minute, "the group read and let go", func() error {
		d, err := c.Group(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		s := scrapeMetrics(t, addr)
		if d.Ranges["done"] != 4 || s.series["leasehold_worker_groups_held"] != 0 || len(s.lagSeries()) != 0 {
			return fmt.Errorf("ranges %v, held %v, lag %v", d.Ranges, s.series["leasehold_worker_groups_held"], s.lagSeries())
		}
		return nil
	})
	rs, err := c.AllRanges(context.Background(), g, "")
	if err != nil {
		t.Fatal(err)
	}
	var headers int64
	for _, r := range rs {
		headers += r.Headers
	}
	s := scrapeMetrics(t, addr)
	if s.series["leasehold_worker_ranges_finished_total"] != 4 || s.series["leasehold_worker_headers_read_total"] != float64(headers) || headers == 0 ||
		s.series["leasehold_worker_ranges_failed_total"] != 0 {
		t.Errorf("finished %v, headers %v, failed %v; want 4 ranges, the %d headers the node was told of, none failed\n%s", s.series["leasehold_worker_ranges_finished_total"],
			s.series["leasehold_worker_headers_read_total"], s.series["leasehold_worker_ranges_failed_total"], headers, logs.String())
	}

	// The address is taken now: one line, exit 2, nothing leased.
	var stderr bytes.Buffer
	err = runWorker(context.Background(), []string{"--url", n.URL, "--token", token, "--metrics-listen", addr}, &stderr, &stderr)
	code := exitCode(err, &stderr)
	if out := strings.TrimSpace(stderr.String()); code != 2 || strings.Count(out, "\n") != 0 || !strings.Contains(out, "--metrics-listen "+addr) {
		t.Errorf("a --metrics-listen taken: exit %d, %q; want exit 2 and one line naming the flag", code, out)
	}
}

// newsGate is a TCP relay to a news server that holds every connection
// until opened, and can cut the connections it relays: a real server
// slowed and broken at the moments a test chooses.
type newsGate struct {
	ln     net.Listener
	open   chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startNewsGate(t *testing.T, server string) *newsGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &newsGate{ln: ln, open: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		g.cut(true)
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				select {
				case <-g.open:
				case <-done:
					c.Close()
					return
				}
				up, err := net.Dial("tcp", server)
				if err != nil {
					c.Close()
					return
				}
				if !g.track(c, up) {
					return
				}
				go func() {
					io.Copy(up, c)
					up.Close()
				}()
				io.Copy(c, up)
				c.Close()
			}()
		}
	}()
	return g
}

// track keeps c and up to cut, or closes them when the gate is closed.
func (g *newsGate) track(c, up net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		c.Close()
		up.Close()
		return false
	}
	g.conns = append(g.conns, c, up)
	return true
}

// cut closes every connection relayed so far (and, at the end, every
// one to come).
func (g *newsGate) cut(forGood bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns, g.closed = nil, forGood
}

// workerPanelNames are the worker's metric names contrib's alert rules
// and Grafana board use.
func workerPanelNames(t *testing.T) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for _, file := range contribFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metricName.FindAllString(string(b), -1) {
			if workerMetricName.MatchString(name) {
				used[name] = true
			}
		}
	}
	if len(used) < 8 {
		t.Fatalf("contrib names only %d worker metrics: %v", len(used), used)
	}
	return used
}

// TestWorkerContribMetricsExist runs a real Usenet worker indexing the
// test INN through a relay and scrapes its /metrics as it goes: every
// worker metric contrib's board and rules use must be served. The relay
// holds the news server back while the worker holds its group, so the
// lag is served, then cuts the connections once, so the connection
// errors and the redials count; bytes, headers and ranges count what
// was read, and the lag's series is gone once the group is let go.
func TestWorkerContribMetricsExist(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("lh.metrics.t%d", time.Now().UnixNano())
	good, other := prefix+".good", prefix+".other"
	n, token, c := goodAndRefused(t, ctx, s, good, other)
	// Planned by hand as well: the group is leased before the held-back
	// server reports a water mark.
	admin(t, n, "groups", "tail", good, "18")
	gate := startNewsGate(t, s.Addr)
	addr, logs := startMetricsWorker(t, "--url", n.URL, "--token", token, "--source", "nntp://"+gate.ln.Addr().String(),
		"--out", t.TempDir()+"/out.jsonl", "--capacity", "1", "--watermark-every", "200ms")

	seen := map[string]bool{}
	read := func() scrape {
		s := scrapeMetrics(t, addr)
		for name := range s.names {
			seen[name] = true
		}
		return s
	}
	poll.Until(t, time.Minute, "a held group's lag while the server is held back", func() error {
		if lag := read().lagSeries(); len(lag) != 1 || (lag[good] <= 0 && lag[other] <= 0) {
			return fmt.Errorf("lag %v", lag)
		}
		return nil
	})
	close(gate.open)
	poll.Until(t, time.Minute, "the good group read", func() error {
		if caughtUp(t, ctx, c, good, 18)() && read().series["leasehold_worker_headers_read_total"] >= 18 {
			return nil
		}
		return fmt.Errorf("not yet")
	})
	gate.cut(false)
	poll.Until(t, time.Minute, "a connection error and a redial", func() error {
		s := read()
		if s.series["leasehold_nntp_connection_errors_total"] < 1 || s.series["leasehold_nntp_redials_total"] < 1 {
			return fmt.Errorf("errors %v, redials %v", s.series["leasehold_nntp_connection_errors_total"], s.series["leasehold_nntp_redials_total"])
		}
		return nil
	})
	poll.Until(t, time.Minute, "the groups let go", func() error {
		if s := read(); s.series["leasehold_worker_groups_held"] != 0 || len(s.lagSeries()) != 0 {
			return fmt.Errorf("held %v, lag %v", s.series["leasehold_worker_groups_held"], s.lagSeries())
		}
		return nil
	})
	last := read()
	for _, name := range []string{"leasehold_worker_ranges_finished_total", "leasehold_nntp_dials_total", "leasehold_nntp_read_bytes_total",
		"leasehold_nntp_text_bytes_total", "leasehold_nntp_compression_ratio"} {
		if last.series[name] <= 0 {
			t.Errorf("%s = %v; want above 0", name, last.series[name])
		}
	}
	if v := last.series[`leasehold_usenet_skipped_total{reason="no_message_id"}`]; v != 0 {
		t.Errorf("skipped no_message_id = %v; want served at 0", v)
	}
	if strings.Contains(logs.String(), `compress_deflate="206`) && last.series["leasehold_nntp_compression_ratio"] <= 1 {
		t.Errorf("compression ratio %v with COMPRESS DEFLATE on; want above 1", last.series["leasehold_nntp_compression_ratio"])
	}
	t.Logf("compression ratio %.2f over %v bytes read", last.series["leasehold_nntp_compression_ratio"], last.series["leasehold_nntp_read_bytes_total"])

	var missing []string
	for name := range workerPanelNames(t) {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("worker metrics contrib uses that a Usenet worker does not serve:\n%s\nlog:\n%s", strings.Join(missing, "\n"), logs.String())
	}
}
