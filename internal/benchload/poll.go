package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// pollReads are the reads an operator's tools poll, as they ask for them:
// the findings (scripts, alerting), the dashboard's overview and a prefix
// search matching every group (live pages refetch themselves every 3 s),
// and the Prometheus scrape.
var pollReads = []struct{ name, path string }{
	{"findings", "/api/v1/findings"},
	{"overview", "/"},
	{"search", "/groups?q=bench."},
	{"metrics", "/metrics"},
}

// pollResult is one read's latencies over a poll run.
type pollResult struct {
	Read  string  `json:"read"`
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Error string  `json:"error,omitempty"`
}

// poll measures the polled reads against a running node. With dashboards
// 0 it asks each read back to back, one at a time, for dur each, and
// prints each read's latencies (JSON lines). With dashboards N it runs N
// open dashboards for dur, each asking for its overview page every 3 s as
// live.js does, and prints how many pages were served and their latencies:
// the caller measures the node's CPU around it.
func poll(base, admin string, dashboards int, dur time.Duration) error {
	dash, err := signedIn(base, admin)
	if err != nil {
		return err
	}
	get := func(path string) (time.Duration, error) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			return 0, err
		}
		c := http.DefaultClient
		if strings.HasPrefix(path, "/api/") || path == "/metrics" {
			req.Header.Set("Authorization", "Bearer "+admin)
		} else {
			req.Header.Set("X-Live", "1")
			c = dash
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return took, err
	}
	enc := json.NewEncoder(os.Stdout)
	if dashboards == 0 {
		for _, r := range pollReads {
			var lat []time.Duration
			var firstErr error
			for end := time.Now().Add(dur); time.Now().Before(end) || len(lat) < 5; {
				d, err := get(r.path)
				if err != nil {
					firstErr = err
					break
				}
				lat = append(lat, d)
			}
			res := latencies(r.name, lat)
			if firstErr != nil {
				res.Error = firstErr.Error()
			}
			enc.Encode(res)
		}
		return nil
	}
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	end := time.Now().Add(dur)
	for i := range dashboards {
		wg.Go(func() {
			// Opened one after another over the first refresh, as people do.
			time.Sleep(time.Duration(i) * 3 * time.Second / time.Duration(dashboards))
			for time.Now().Before(end) {
				d, err := get("/")
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, d)
				mu.Unlock()
				time.Sleep(3 * time.Second)
			}
		})
	}
	wg.Wait()
	res := latencies(fmt.Sprintf("%d dashboards", dashboards), lat)
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	return enc.Encode(res)
}

// signedIn is a client holding a dashboard session, signed in with the
// admin token as a person would.
func signedIn(base, admin string) (*http.Client, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodPost, base+"/signin", strings.NewReader(url.Values{"token": {admin}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("signing in to the dashboard: %s", resp.Status)
	}
	return c, nil
}

func latencies(name string, lat []time.Duration) pollResult {
	r := pollResult{Read: name, N: len(lat)}
	if len(lat) == 0 {
		return r
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return ms(lat[min(len(lat)-1, int(q*float64(len(lat))))]) }
	r.P50, r.P99, r.Max = at(0.5), at(0.99), ms(lat[len(lat)-1])
	return r
}
