package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
	"github.com/leasehold/leasehold/web"
)

// TestIndexFaultRun is the fault run of the shared index (scripts/index-fault.sh
// runs it long, and planted): three worker processes, each a box of its
// own (a node registration, a directory for its NZBs and log), index the
// same news server groups into one PostgreSQL through one node. One is
// stopped with SIGSTOP in the middle of a group, kept stopped until the
// group was taken over and read to its end by another, then continued,
// its link to the node held for a moment (as a paused holder's heartbeat
// comes late) so that its first act is a write to the index; one is
// killed with kill -9 in the middle of a group; one is stopped (SIGTERM)
// and started again. Then the tables files, releases and segments must
// equal one uninterrupted pass row for row (the lease columns aside), and
// the continued worker's late writes must have been refused by fence.
//
// LEASEHOLD_INDEXFAULT_ARTICLES sets the articles a group (default 600,
// the suite's short form); LEASEHOLD_INDEXFAULT_PLANT=unfenced runs the
// workers without the fence check (LEASEHOLD_TEST_UNFENCED), and the run
// must then fail.
func TestIndexFaultRun(t *testing.T) {
	s := usenettest.Find(t)
	perGroup := 600
	if v := os.Getenv("LEASEHOLD_INDEXFAULT_ARTICLES"); v != "" {
		perGroup, _ = strconv.Atoi(v)
	}
	planted := os.Getenv("LEASEHOLD_INDEXFAULT_PLANT") == "unfenced"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	_, dsn := privatePostgres(t, ctx)

	// Four groups of multi-file releases from five posters, interleaved,
	// so that a release spans many ranges; every fourth release is
	// cross-posted to the next group.
	prefix := fmt.Sprintf("lh.indexfault.t%d", time.Now().UnixNano())
	groups := []string{prefix + ".a", prefix + ".b", prefix + ".c", prefix + ".d"}
	if err := s.NewGroups(ctx, groups...); err != nil {
		t.Fatal(err)
	}
	var arts []usenettest.Article
	for gi, g := range groups {
		arts = append(arts, faultReleases(g, groups[(gi+1)%len(groups)], perGroup)...)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 2})
	defer src.Close()
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}
	posted := time.Since(began)

	handed := nodetest.NewSignal() // told each group a box is handed a range of
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second, Web: web.Options{WrapFunc: nodetest.RangesHanded(handed)}})
	for _, g := range groups {
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "100")
	}
	c := client.New(n.URL, n.AdminToken)
	root := t.TempDir()
	type box struct {
		name, dir, log, token string
		args                  []string
		cmd                   interface{ Wait() error }
		pid                   int
		link                  *gatedProxy
	}
	var boxes []*box
	for i := 1; i <= 3; i++ {
		b := &box{name: fmt.Sprintf("box%d", i), dir: filepath.Join(root, fmt.Sprintf("box%d", i))}
		os.MkdirAll(b.dir, 0o700)
		b.log = filepath.Join(b.dir, "worker.log")
		b.token = strings.TrimSpace(admin(t, n, "nodes", "register", b.name, "--kinds", "nntp", "-q"))
		b.link = newGatedProxy(t, n.URL)
		b.args = []string{"--url", b.link.URL, "--token", b.token, "--source", "nntp://" + s.Addr, "--out", dsn, "--nzb", filepath.Join(b.dir, "nzb"),
			"--capacity", "1", "--connections", "2", "--batch", "5", "--snapshot-every", "2s", "--watermark-every", "200ms", "--log-level", "debug"}
		boxes = append(boxes, b)
	}
	if planted {
		t.Setenv("LEASEHOLD_TEST_UNFENCED", "1")
	}
	start := func(b *box) {
		cmd := startWorkerProcess(t, b.log, b.args...)
		b.cmd, b.pid = cmd, cmd.Process.Pid
	}
	for _, b := range boxes {
		start(b)
	}
	logs := func() string {
		var all strings.Builder
		for _, b := range boxes {
			raw, _ := os.ReadFile(b.log)
			fmt.Fprintf(&all, "== %s\n%s", b.name, raw)
		}
		return all.String()
	}
	detail := func(g string) *leasehold.GroupDetail {
		d, err := c.Group(ctx, g)
		if err != nil {
			t.Fatalf("group %s: %v", g, err)
		}
		return d
	}
	// midGroup waits for a group b holds with ranges done and at least
	// left ranges to come, and returns it with its fence; "" when none
	// comes within wait (a box whose groups are all read by the time).
	midGroup := func(b *box, wait time.Duration, left int64) (group string, fence int64) {
		t.Helper()
		poll.Wait(wait, midRange, func() error {
			for _, g := range groups {
				d := detail(g)
				if d.Lease != nil && d.Lease.Node == b.name && d.Ranges[leasehold.StatusDone] >= 1 &&
					d.Ranges[leasehold.StatusPlanned]+d.Ranges[leasehold.StatusLeased] >= left {
					group, fence = g, d.Lease.Fence
					return nil
				}
			}
			return errors.New("no group in its middle")
		})
		return group, fence
	}
	deadline := time.Now().Add(4 * time.Minute)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if poll.Wait(time.Until(deadline), poll.Every, func() error {
			if !cond() {
				return errors.New("not yet")
			}
			return nil
		}) != nil {
			t.Fatalf("%s: not in time\n%s", what, logs())
		}
	}

	// Box 2 stopped in the middle of a group.
	stopped := boxes[1]
	g2, oldFence := midGroup(stopped, time.Minute, 3)
	if g2 == "" {
		t.Fatalf("box 2 never held a group in its middle\n%s", logs())
	}
	// A range is leased and finished in a moment; it is read for longer:
	// stopped once handed its next range of the group, the box is reading
	// it. (Three ranges were to come: one handed between the look and
	// the drain still leaves one to hand.)
	g2ID := detail(g2).ID
	handed.Drain()
	for handed.Wait(t, "box 2 handed a range of "+g2) != g2ID {
	}
	syscall.Kill(stopped.pid, syscall.SIGSTOP)
	t.Logf("SIGSTOP %s holding %s at fence %d", stopped.name, g2, oldFence)
	// Box 1 killed, in the middle of a group when it holds one soon.
	killed := boxes[0]
	g1, _ := midGroup(killed, 5*time.Second, 2)
	syscall.Kill(killed.pid, syscall.SIGKILL)
	killed.cmd.Wait()
	t.Logf("kill -9 %s, which held %q", killed.name, g1)

	// Box 3 stopped and started again, in the middle of a group when it
	// holds one soon.
	restarted := boxes[2]
	g3, _ := midGroup(restarted, 5*time.Second, 2)
	syscall.Kill(restarted.pid, syscall.SIGTERM)
	restarted.cmd.Wait()
	start(restarted)
	t.Logf("restarted %s, which held %q", restarted.name, g3)
	// The stopped box's group taken over and read to its end by another
	// (the stopped box can finish none of its ranges).
	waitFor("the stopped box's group read to its end", caughtUp(t, ctx, c, g2, 0))
	stopped.link.Hold()
	syscall.Kill(stopped.pid, syscall.SIGCONT)
	t.Logf("SIGCONT %s, its link to the node held", stopped.name)
	refusedRE := regexp.MustCompile(`rows_refused=(\d+)`)
	refused := func() int {
		raw, _ := os.ReadFile(stopped.log)
		sum := 0
		for _, m := range refusedRE.FindAllSubmatch(raw, -1) {
			k, _ := strconv.Atoi(string(m[1]))
			sum += k
		}
		return sum
	}
	// A fenced worker says so at its first write; an unfenced one (the
	// planted fault) writes on to its range's end: given two seconds.
	poll.Wait(2*time.Second, poll.Every, func() error {
		if refused() == 0 {
			return errors.New("no write refused yet")
		}
		return nil
	})
	stopped.link.Release()

	for _, g := range groups {
		waitFor("group "+g+" read to its end", caughtUp(t, ctx, c, g, 0))
	}
	for _, b := range boxes[1:] {
		syscall.Kill(b.pid, syscall.SIGTERM)
		b.cmd.Wait()
	}
	elapsed := time.Since(began)

	got, want, failed, index := indexAndOnePass(t, ctx, c, s.Addr, dsn, groups)
	var rows [3]int64
	for i, table := range []string{"files", "releases", "segments"} {
		index.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows[i])
	}
	segments := 0
	for _, f := range want.Files {
		segments += len(f.Segments)
	}
	fmt.Printf("index fault run: %d groups, %d articles (posted in %s), 3 workers; kill -9, SIGSTOP past the takeover, restart; %s in all\n",
		len(groups), len(arts), posted.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	fmt.Printf("index fault run: index rows files %d releases %d segments %d; one pass %d, %d, %d; ranges failed %d; late writes refused by fence: %d rows (planted unfenced: %v)\n",
		rows[0], rows[1], rows[2], len(want.Files), len(want.Releases), segments, failed, refused(), planted)
	sameRecords(t, got, want)
	// A pause that lands inside a write's transaction ends with the index
	// ending that session (its idle-in-transaction timeout, 10 s, so that
	// the paused writer holds no rows the taking-over worker must write):
	// the late write then never lands either, and the records above are
	// still one pass's, but the fence was not what refused it.
	raw, _ := os.ReadFile(stopped.log)
	ended := bytes.Contains(raw, []byte("SQLSTATE 25P03"))
	if ended {
		t.Logf("the pause landed inside a transaction: the index ended the session, and the late write never landed")
	}
	if refused() == 0 && !ended {
		t.Errorf("the continued worker's late writes were not refused by fence (planted unfenced: %v)", planted)
	}
	if failed != 0 {
		t.Errorf("%d ranges failed", failed)
	}
	if t.Failed() {
		t.Logf("logs:\n%s", logs())
	}
}

// faultReleases is about n articles for group: releases of six files of
// four parts from five posters, the posters' posts interleaved; every
// fourth release is cross-posted to other as well.
func faultReleases(group, other string, n int) []usenettest.Article {
	posters := []string{usenettest.Alice, usenettest.Bob, usenettest.Erin, usenettest.Frank, usenettest.Grace}
	const files, parts = 6, 4
	per := files * parts
	var streams [][]usenettest.Article
	for r := 0; r*per < n; r++ {
		newsgroups := group
		if r%4 == 3 {
			newsgroups = group + "," + other
		}
		name := fmt.Sprintf("%s.rel%03d", group[strings.LastIndexByte(group, '.')+1:], r)
		from := posters[r%len(posters)]
		var s []usenettest.Article
		for f := 1; f <= files; f++ {
			for p := 1; p <= parts; p++ {
				s = append(s, usenettest.Article{Group: newsgroups, From: from,
					Subject: fmt.Sprintf("%s [%d/%d] - \"%s.part%d.rar\" yEnc (%d/%d)", name, f, files, name, f, p, parts), Body: "=ybegin"})
			}
		}
		streams = append(streams, s)
	}
	// Five releases at a time, one article of each in turn.
	var out []usenettest.Article
	for lo := 0; lo < len(streams); lo += len(posters) {
		hi := min(lo+len(posters), len(streams))
		for i := 0; i < per; i++ {
			for _, s := range streams[lo:hi] {
				out = append(out, s[i])
			}
		}
	}
	return out
}

// gatedProxy forwards TCP to a node; Hold stalls what goes through it
// (a late heartbeat) until Release.
type gatedProxy struct {
	URL  string
	mu   sync.Mutex
	open *sync.Cond
	held bool
}

func newGatedProxy(t *testing.T, target string) *gatedProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &gatedProxy{URL: "http://" + ln.Addr().String()}
	p.open = sync.NewCond(&p.mu)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", u.Host)
			if err != nil {
				in.Close()
				continue
			}
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	return p
}

func (p *gatedProxy) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held {
				p.open.Wait()
			}
			p.mu.Unlock()
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Hold stalls everything sent through the proxy from now on.
func (p *gatedProxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release lets it through again.
func (p *gatedProxy) Release() {
	p.mu.Lock()
	p.held = false
	p.open.Broadcast()
	p.mu.Unlock()
}
