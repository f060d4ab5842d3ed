package client_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/synthetic"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestParseURLs: a list of node URLs is read in order; a bad one is named.
func TestParseURLs(t *testing.T) {
	t.Parallel()
	got, err := client.ParseURLs(" http://a:8080/, https://b:8443 ,http://c")
	if err != nil || strings.Join(got, " ") != "http://a:8080 https://b:8443 http://c" {
		t.Fatalf("ParseURLs = %q, %v", got, err)
	}
	for in, want := range map[string]string{
		"http://a,":                     "URL 2 of 2 is empty",
		"http://a,,http://b":            "URL 2 of 3 is empty",
		"http://a,127.0.0.1:8080":       `"127.0.0.1:8080" is not a URL`,
		"http://a,ftp://b":              `"ftp://b" has no http:// or https:// scheme`,
		"http://a,http:///x":            "names no host",
		"http://a,http://a/":            `"http://a" is given twice`,
		strings.Repeat("http://a,", 40): "at most 32",
	} {
		if _, err := client.ParseURLs(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURLs(%q) = %v; want an error with %q", in, err, want)
		}
	}
}

// TestWorkerFailover: a worker given two nodes works at the first; when
// the first cannot be reached it gives up the group held there (after a
// TTL without answers) and works at the second; once the first answers
// again it comes back to it after the reprobe time, and the group it held
// there is taken over and finished. Every window ends equal to one
// uninterrupted pass: nothing was worked twice at once.
func TestWorkerFailover(t *testing.T) {
	t.Parallel()
	a := start(t, nodetest.Options{LeaseTTL: 2 * time.Second})
	b := start(t, nodetest.Options{LeaseTTL: 2 * time.Second})
	a.group("alt.at-a", 100, 1, 1, 4000)
	b.group("alt.at-b", 100, 1, 1, 1000)
	trA := &transport{}
	ca, _ := a.workerClient("w", 1, trA)
	cb, _ := b.workerClient("w", 1, nil)
	w := newWorker(t, ca, 1)
	w.IndexFunc = syntheticIndex(synthetic.Source{Rate: 2000}) // about 2 s for alt.at-a
	w.Failover = []*client.Client{cb}
	w.Reprobe = 300 * time.Millisecond
	log, buf := testLogger(t)
	w.Logger = log
	run(t, w)

	held := func(e *env, name string) bool {
		d, err := e.admin.Group(bg, name)
		return err == nil && d.Lease != nil
	}
	waitFor(t, "the worker holding alt.at-a at the first node", func() bool { return held(a, "alt.at-a") })
	if held(b, "alt.at-b") {
		t.Fatal("the worker leased at the second node while the first had work")
	}
	trA.killed.Store(true)
	cut := time.Now()
	waitFor(t, "alt.at-b done at the second node", func() bool { return b.settled("alt.at-b") })
	t.Logf("second node's group done %v after the first was cut off", time.Since(cut).Round(time.Millisecond))
	if a.settled("alt.at-a") {
		t.Fatal("alt.at-a done while its node was cut off")
	}
	trA.killed.Store(false)
	back := time.Now()
	waitFor(t, "alt.at-a done at the first node", func() bool { return a.settled("alt.at-a") })
	t.Logf("first node's group done %v after it answered again", time.Since(back).Round(time.Millisecond))
	a.checkWindow("alt.at-a")
	b.checkWindow("alt.at-b")
	for _, want := range []string{"leasing at the next node of the fleet", "node reachable again; leasing there"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("worker log lacks %q", want)
		}
	}
	if n := strings.Count(buf.String(), "leasing at the next node of the fleet"); n != 1 {
		t.Errorf("the move to the next node was logged %d times; want once per outage", n)
	}
}

// TestWorkerPassesRefusingNode: a node of the list that refuses the
// worker's token (in a fleet, one that has not yet folded the node it was
// registered at) is passed over like an unreachable one, and the worker
// works at the next, its log naming that node as the one that granted
// the group; the token is refused only when every node refuses it.
func TestWorkerPassesRefusingNode(t *testing.T) {
	t.Parallel()
	a := start(t, nodetest.Options{})
	b := start(t, nodetest.Options{})
	a.group("alt.at-a", 100, 1, 1, 300)
	ca, n := a.workerClient("w", 1, nil)
	cb := client.New(b.node.URL, n.Token)
	cb.Retry = fastRetry
	w := newWorker(t, cb, 1)
	w.Failover = []*client.Client{ca}
	w.Reprobe = 300 * time.Millisecond
	log, buf := testLogger(t)
	w.Logger = log
	run(t, w)
	waitFor(t, "alt.at-a done at the second node", func() bool { return a.settled("alt.at-a") })
	if !strings.Contains(buf.String(), "node refuses the token; leasing at the next node of the fleet") {
		t.Errorf("the worker did not say the first node refuses its token:\n%s", buf.String())
	}
	// The lease line names the node that granted the group.
	if !lineHas(buf.String(), "leased group", "group=alt.at-a", "node="+a.node.URL+" ") {
		t.Errorf("the leased group line does not name the granting node %s:\n%s", a.node.URL, buf.String())
	}
}

// lineHas reports whether some line of log holds each of words.
func lineHas(log string, words ...string) bool {
	for line := range strings.Lines(log) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// TestWorkerIdleSaidOnce: a worker with nothing to lease says so once,
// not at every poll.
func TestWorkerIdleSaidOnce(t *testing.T) {
	t.Parallel()
	e := start(t, nodetest.Options{})
	c, _ := e.workerClient("w", 1, nil)
	tr := &transport{}
	c.HTTPClient = &http.Client{Transport: tr}
	w := newWorker(t, c, 1)
	log, buf := testLogger(t)
	w.Logger = log
	run(t, w)
	waitFor(t, "ten idle polls", func() bool { return len(tr.leaseCalls()) >= 10 })
	if n := strings.Count(buf.String(), "idle: the node has nothing to lease"); n != 1 {
		t.Fatalf("idle said %d times over %d polls; want once", n, len(tr.leaseCalls()))
	}
	e.group("alt.later", 100, 1, 1, 300)
	waitFor(t, "the group done", func() bool { return e.settled("alt.later") })
	waitFor(t, "idle said again after the work", func() bool {
		return strings.Count(buf.String(), "idle: the node has nothing to lease") == 2
	})
}
