package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// contribFiles are the shipped alert rules and Grafana dashboard, whose
// metric names must be ones a node serves.
var contribFiles = []string{
	"../../contrib/prometheus/leasehold-rules.yml",
	"../../contrib/grafana/leasehold.json",
}

// metricName finds the node's metric names in rules and panels; other
// names there (up, Prometheus' own) are not the node's to serve.
var metricName = regexp.MustCompile(`\b(?:leasehold|process|go)_[a-z0-9_]+`)

// TestContribMetricsExist runs a real node in a fleet (the embedded NATS
// server, so the peer metrics are served), logging JSON as
// LEASEHOLD_LOG_FORMAT asks, drives a lease cycle through it and scrapes
// /metrics: every metric name contrib's alert rules and Grafana dashboard
// use must be among the names served, so neither can drift from the
// node. (A name misspelled in a rule fails it.)
func TestContribMetricsExist(t *testing.T) {
	t.Setenv("LEASEHOLD_LOG_FORMAT", "json")
	dir := t.TempDir()
	n, _ := serveNATS(t, "--data", dir, "--name", "node-a")
	url, stderr := n.url, n.log
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(token))
	call := func(method, path, tok, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, url+"/api/v1"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, out)
		}
		return out
	}
	call("PUT", "/groups/alt.test", admin, `{"range_size":100}`)
	call("POST", "/groups/alt.test/tail", admin, `{"high":500}`)
	worker := call("POST", "/nodes", admin, `{"name":"w1"}`)["token"].(string)
	lease := call("POST", "/leases", worker, "")
	gid, fence := int64(lease["group"].(map[string]any)["id"].(float64)), int64(lease["fence"].(float64))
	next := call("POST", "/leases/"+itoa(gid)+"/next", worker, `{"fence":`+itoa(fence)+`}`)
	rid := int64(next["range"].(map[string]any)["id"].(float64))
	call("POST", "/ranges/"+itoa(rid)+"/finish", worker, `{"fence":`+itoa(fence)+`,"headers":100}`)

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		served[line[:strings.IndexAny(line, "{ ")]] = true
	}
	resp.Body.Close()

	var missing []string
	for _, file := range contribFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, name := range metricName.FindAllString(string(b), -1) {
			if !workerMetricName.MatchString(name) { // a worker's: TestWorkerContribMetricsExist
				used[name] = true
			}
		}
		if len(used) < 10 {
			t.Fatalf("%s names only %d metrics: is it the file it should be?", file, len(used))
		}
		for name := range used {
			if !served[name] {
				missing = append(missing, file+": "+name)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("metrics contrib uses that the node does not serve:\n%s", strings.Join(missing, "\n"))
	}

	// The log is JSON, as LEASEHOLD_LOG_FORMAT asked: every line parses.
	lines := 0
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(stderr.String())), []byte("\n")) {
		var v map[string]any
		if err := json.Unmarshal(line, &v); err != nil || v["msg"] == nil {
			t.Fatalf("a log line that is not JSON with LEASEHOLD_LOG_FORMAT=json: %q", line)
		}
		lines++
	}
	if lines < 3 {
		t.Fatalf("only %d log lines", lines)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
