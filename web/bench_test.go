package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/store"
)

// BenchmarkHTTPLeaseCycle: 32 workers, each its own node, doing lease →
// next → finish → release over HTTP against a real node (echo, SQLite with
// synchronous=FULL, group commit) with 1,000 groups. One op is one cycle.
//
//	go test -run '^$' -bench HTTPLeaseCycle -benchtime 20000x ./web
func BenchmarkHTTPLeaseCycle(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts store.Options
	}{{"group-commit", store.Options{}}, {"commit-per-write", store.Options{NoGroupCommit: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			const workers, groups = 32, 1000
			n := nodetest.Start(b, nodetest.Options{Store: mode.opts})
			ctx := context.Background()
			if err := n.DB.BulkGroups(ctx, "bench.", groups, 100, 200); err != nil {
				b.Fatal(err)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers * 2}}
			call := func(method, path, token, body string) (int, map[string]any, time.Duration) {
				start := time.Now()
				req, _ := http.NewRequest(method, n.URL+"/api/v1"+path, bytes.NewBufferString(body))
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var m map[string]any
				json.Unmarshal(raw, &m)
				return resp.StatusCode, m, time.Since(start)
			}
			var tokens []string
			for i := range workers {
				_, m, _ := call("POST", "/nodes", n.AdminToken, fmt.Sprintf(`{"name":"w%d","capacity":1}`, i))
				tokens = append(tokens, m["token"].(string))
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var mu sync.Mutex
			var leaseLat []time.Duration
			before := n.DB.Stats()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, tok := range tokens {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var lat []time.Duration
					for left.Add(-1) >= 0 {
						st, l, d := call("POST", "/leases", tok, "")
						lat = append(lat, d)
						if st != 200 {
							b.Errorf("lease: %d", st)
							return
						}
						g := int64(l["group"].(map[string]any)["id"].(float64))
						f := int64(l["fence"].(float64))
						fence := fmt.Sprintf(`{"fence":%d}`, f)
						st, r, _ := call("POST", fmt.Sprintf("/leases/%d/next", g), tok, fence)
						if st != 200 {
							b.Errorf("next: %d", st)
							return
						}
						rid := int64(r["range"].(map[string]any)["id"].(float64))
						if st, _, _ := call("POST", fmt.Sprintf("/ranges/%d/finish", rid), tok, fmt.Sprintf(`{"fence":%d,"headers":100}`, f)); st != 200 {
							b.Errorf("finish: %d", st)
							return
						}
						if st, _, _ := call("POST", fmt.Sprintf("/leases/%d/release", g), tok, fence); st != 200 {
							b.Errorf("release: %d", st)
							return
						}
					}
					mu.Lock()
					leaseLat = append(leaseLat, lat...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			after := n.DB.Stats()
			slices.Sort(leaseLat)
			pct := func(p float64) float64 {
				if len(leaseLat) == 0 {
					return 0
				}
				return float64(leaseLat[int(float64(len(leaseLat)-1)*p)].Microseconds()) / 1000
			}
			commits := after.Commits - before.Commits
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
			b.ReportMetric(float64(commits)/elapsed.Seconds(), "commits/s")
			b.ReportMetric(float64(after.Writes-before.Writes)/float64(max(commits, 1)), "writes/commit")
			b.ReportMetric(pct(0.5), "lease-p50-ms")
			b.ReportMetric(pct(0.99), "lease-p99-ms")
		})
	}
}
