package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestMain lets a test run `leasehold worker` as a process of its own (this
// test binary, run again with LEASEHOLD_TEST_WORKER_ARGS), to kill it with
// SIGKILL, and any command as the binary's main runs it
// (LEASEHOLD_TEST_MAIN_ARGS), with a terminal of its own. Otherwise it
// runs the tests recorded (nodetest.RunRecorded): every answer the CLI
// gets from a node is checked against web/openapi.json.
func TestMain(m *testing.M) {
	if args := os.Getenv("LEASEHOLD_TEST_MAIN_ARGS"); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Args = append([]string{"leasehold"}, a...)
		main()
	}
	if args := os.Getenv("LEASEHOLD_TEST_WORKER_ARGS"); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := runWorker(ctx, a, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := nodetest.RunRecorded(m)
	if builtBinary.path != "" {
		os.RemoveAll(filepath.Dir(builtBinary.path)) // leaseholdBinary's build
	}
	os.Exit(code)
}

// midRange is how often a test looks for a worker in the middle of a
// range, to stop it there: a range is read in well under a second, so
// the look is more often than poll.Every.
const midRange = 2 * time.Millisecond

// startWorkerProcess runs `leasehold worker args…` as a child process
// logging to log.
func startWorkerProcess(t *testing.T, log string, args ...string) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(args)
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LEASEHOLD_TEST_WORKER_ARGS="+string(b))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// TestUsenetWorkerKilled indexes a real INN's groups through a real node
// with `leasehold worker --source nntp://…`: nothing is planned by hand
// (the worker reports the water marks), the worker is killed with kill -9
// in the middle of a group and started again, and the file and release
// records it wrote (the last line of each key) and its NZBs equal one
// uninterrupted pass over the same articles; the file missing a part is
// written once, incomplete; a group the server does not carry fails its
// range with the server's answer.
func TestUsenetWorkerKilled(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("lh.worker.t%d", time.Now().UnixNano())
	a, b, missing := prefix+".a", prefix+".b", prefix+".missing"
	if err := s.NewGroups(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 2})
	defer src.Close()
	arts := append(usenettest.Fixed(prefix), usenettest.Generated(a, 60, 10)...)
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}

	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	for _, g := range []string{a, b, missing} {
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "20")
	}
	admin(t, n, "groups", "tail", missing, "10") // the server cannot report it
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	dir := t.TempDir()
	out, nzbs := filepath.Join(dir, "binaries.jsonl"), filepath.Join(dir, "nzb")
	args := []string{"--url", n.URL, "--token", token, "--source", "nntp://" + s.Addr, "--out", out, "--nzb", nzbs,
		"--capacity", "2", "--connections", "2", "--batch", "5", "--snapshot-every", "1ns", "--watermark-every", "200ms", "--log-level", "debug"}
	log := filepath.Join(dir, "worker.log")
	worker := startWorkerProcess(t, log, args...)

	c := client.New(n.URL, n.AdminToken)
	group := func(name string) *leasehold.GroupDetail {
		d, err := c.Group(ctx, name)
		if err != nil {
			t.Fatalf("group %s: %v", name, err)
		}
		return d
	}
	// Kill it with SIGKILL while group a is half done.
	var killedAt map[leasehold.RangeStatus]int64
	deadline, _ := ctx.Deadline()
	if err := poll.Wait(time.Until(deadline), midRange, func() error {
		d := group(a)
		if d.Ranges[leasehold.StatusDone] >= 3 && d.Ranges[leasehold.StatusPlanned]+d.Ranges[leasehold.StatusLeased] > 0 {
			killedAt = d.Ranges
			return nil
		}
		if d.Ranges[leasehold.StatusDone] > 0 && d.Ranges[leasehold.StatusPlanned]+d.Ranges[leasehold.StatusLeased] == 0 {
			t.Fatalf("group %s was done before the worker could be killed in it: %v", a, d.Ranges)
		}
		return fmt.Errorf("ranges %v", d.Ranges)
	}); err != nil {
		logs, _ := os.ReadFile(log)
		t.Fatalf("the worker never got half through %s: %v\n%s", a, err, logs)
	}
	worker.Process.Signal(syscall.SIGKILL)
	worker.Wait()
	t.Logf("killed the worker with %s at ranges %v", a, killedAt)
	startWorkerProcess(t, log, args...)

	wantHigh := map[string]int64{a: 15 + 600, b: 3}
	if err := poll.Wait(time.Until(deadline), poll.Every, func() error {
		for g, high := range wantHigh {
			d := group(g)
			if d.TailEnd != high || d.Ranges[leasehold.StatusDone] == 0 || d.Ranges[leasehold.StatusPlanned]+d.Ranges[leasehold.StatusLeased] > 0 {
				return fmt.Errorf("group %s: tail end %d, ranges %v", g, d.TailEnd, d.Ranges)
			}
		}
		return nil
	}); err != nil {
		logs, _ := os.ReadFile(log)
		t.Fatalf("groups not done: %v\n%s", err, logs)
	}
	for g, high := range wantHigh {
		if d := group(g); d.High == nil || *d.High != high || d.Ranges[leasehold.StatusFailed] != 0 {
			t.Errorf("group %s: high %v, ranges %v; want high %d reported, none failed", g, d.High, d.Ranges, high)
		}
	}

	// What the worker wrote, the last line of each key.
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := binaries.ReadJSONL(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	// Read over a new connection: an nnrpd connection open while the
	// groups were made can go on answering a new group as empty.
	fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer fresh.Close()
	want, wantLines := onePass(t, ctx, fresh, wantHigh)
	for g := range wantHigh {
		var names []string
		for _, f := range want.Files {
			if f.Group == g && f.Complete {
				names = append(names, f.Name+" "+f.Poster)
			}
		}
		slices.Sort(names)
		exp := usenettest.Complete(prefix)[g]
		if g == b && !slices.Equal(names, exp) || g == a && len(names) != len(exp)+60 {
			t.Errorf("uninterrupted pass of %s: complete %q, want %q (and 60 generated in %s)", g, names, exp, a)
		}
	}
	sameRecords(t, got, want)
	// Each NZB is the one an uninterrupted pass makes of its release.
	nzbCount := 0
	for k, r := range got.Releases {
		if r.NZB == nil {
			continue
		}
		nzbCount++
		var files []binaries.File
		for _, f := range want.Files {
			if f.Release == k {
				files = append(files, f)
			}
		}
		if body, err := os.ReadFile(filepath.Join(nzbs, *r.NZB)); err != nil || !bytes.Equal(body, binaries.NZB(want.Releases[k], files)) {
			t.Errorf("the NZB of %s (%s): %v\n%s\nwant\n%s", k, r.Name, err, body, binaries.NZB(want.Releases[k], files))
		}
	}
	onDisk, _ := filepath.Glob(filepath.Join(nzbs, "*", "*.nzb"))
	if nzbCount < len(got.Releases)-1 || len(onDisk) != nzbCount {
		t.Errorf("%d NZBs named by %d releases, %d on disk: want one a release, no other", nzbCount, len(got.Releases), len(onDisk))
	}
	var disc []binaries.File
	for _, f := range got.Files {
		if strings.Contains(f.Name, "Linux ISO") {
			disc = append(disc, f)
		}
	}
	if len(disc) != 1 || disc[0].Complete || disc[0].Parts != 3 || *disc[0].Total != 4 {
		t.Errorf("the file missing a part: %+v; want one record, incomplete, 3 parts of 4", disc)
	}
	lines := bytes.Count(raw, []byte("\n"))
	t.Logf("%d lines written for %d files and %d releases (%d lines in one pass): a takeover may write a record twice", lines, len(got.Files), len(got.Releases), wantLines)

	// The group the server does not carry: failed at once, saying why.
	rs, err := c.AllRanges(ctx, missing, "")
	if err != nil || len(rs) != 1 || rs[0].Status != leasehold.StatusFailed || rs[0].Attempts != 1 || rs[0].LastError == nil || !strings.Contains(*rs[0].LastError, "411") {
		t.Errorf("the missing group's ranges: %+v, %v; want one failed at its first attempt with the server's 411", rs, err)
	}
	if logs, _ := os.ReadFile(log); !bytes.Contains(logs, []byte("takeover=true")) {
		t.Errorf("the restarted worker took no group over:\n%s", logs)
	}
}

// onePass reads groups (name: high) whole into new windows, as one
// uninterrupted worker does (the tail's end flushed), and returns the
// last record of each key and how many lines it wrote.
func onePass(t *testing.T, ctx context.Context, src *nntp.Client, groups map[string]int64) (binaries.Records, int) {
	t.Helper()
	out := binaries.Records{Files: map[string]binaries.File{}, Releases: map[string]binaries.Release{}}
	lines := 0
	for g, high := range groups {
		hs, _, err := src.Overview(ctx, g, 1, high)
		if err != nil {
			t.Fatal(err)
		}
		w := binaries.NewWindow(g)
		ups := append(w.Add(1, high, hs), w.Due()...)
		ups = append(ups, w.Flush()...)
		for _, u := range ups {
			for _, f := range u.ChangedFiles() {
				out.Files[f.Key] = f
				lines++
			}
			out.Releases[u.Release.Key] = u.Release
			lines++
		}
	}
	return out, lines
}

// sameRecords checks that an output's last records equal want's, NZB
// paths aside (one pass writes none).
func sameRecords(t *testing.T, got, want binaries.Records) {
	t.Helper()
	if len(got.Files) != len(want.Files) || len(got.Releases) != len(want.Releases) {
		t.Errorf("%d files and %d releases written (by key), %d and %d in one uninterrupted pass", len(got.Files), len(got.Releases), len(want.Files), len(want.Releases))
	}
	for k, w := range want.Files {
		if g, ok := got.Files[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("file %s (%s by %s):\n written %+v\n want    %+v", k, w.Name, w.Poster, g, w)
		}
	}
	for k, w := range want.Releases {
		g, ok := got.Releases[k]
		g.NZB = nil
		if !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("release %s (%s by %s):\n written %+v\n want    %+v", k, w.Name, w.Poster, g, w)
		}
	}
}

// TestUsenetWorkerLogin: `leasehold worker` logs in to a news server that
// asks for a login, with the password from --source-password-file or
// $LEASEHOLD_SOURCE_PASSWORD (the URL may not carry one); a refused login
// fails the range at its first attempt with the server's 481; and the
// password is in neither the worker's log nor the range's error.
func TestUsenetWorkerLogin(t *testing.T) {
	s := usenettest.Find(t)
	pw, err := s.Password()
	if err != nil || s.User == "" {
		t.Fatalf("the test login: %q, %v (scripts/inn.sh start makes it)", s.User, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("lh.login.t%d", time.Now().UnixNano())
	good, refused := prefix+".good", prefix+".refused"
	n, token, c := goodAndRefused(t, ctx, s, good, refused)
	source := "nntp://" + s.User + "@" + s.Addr

	work := func(name string, done func() bool, extra ...string) string {
		t.Helper()
		args := append([]string{"--url", n.URL, "--token", token, "--source", source, "--out", filepath.Join(t.TempDir(), "out.jsonl"),
			"--capacity", "1", "--watermark-every", "200ms"}, extra...)
		return workUntil(t, ctx, name, done, args...)
	}
	ranges := func(g string) []leasehold.Range {
		rs, err := c.AllRanges(ctx, g, "")
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}

	const wrong = "not-the-password-0123456789"
	t.Setenv("LEASEHOLD_SOURCE_PASSWORD", wrong)
	logs := work("a wrong password", func() bool {
		rs := ranges(refused)
		return len(rs) == 1 && rs[0].Status == leasehold.StatusFailed
	})
	rs := ranges(refused)
	if rs[0].Attempts != 1 || rs[0].LastError == nil || !strings.Contains(*rs[0].LastError, "481") || strings.Contains(*rs[0].LastError, wrong) {
		t.Errorf("the range of a refused login: %+v; want failed at its first attempt with the server's 481, no password", rs[0])
	}
	if strings.Contains(logs, wrong) {
		t.Errorf("the worker logged the password:\n%s", logs)
	}

	t.Setenv("LEASEHOLD_SOURCE_PASSWORD", "")
	file := filepath.Join(t.TempDir(), "news.password")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs = work("the password from a file", caughtUp(t, ctx, c, good, 0), "--source-password-file", file)
	if strings.Contains(logs, pw) {
		t.Errorf("the worker logged the password:\n%s", logs)
	}
}

// workUntil runs `leasehold worker args…` in this process until done says
// its work is over (failing the test when ctx ends first or the worker
// ends by itself), and returns what it logged.
func workUntil(t *testing.T, ctx context.Context, name string, done func() bool, args ...string) string {
	t.Helper()
	var logs bytes.Buffer
	wctx, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { ended <- runWorker(wctx, args, &logs, &logs) }()
	deadline, _ := ctx.Deadline()
	// Every 50 ms, not poll.Every: done asks the node over HTTP.
	err := poll.Wait(time.Until(deadline), 50*time.Millisecond, func() error {
		select {
		case err := <-ended:
			stop()
			t.Fatalf("%s: the worker ended early: %v\n%s", name, err, logs.String())
		default:
		}
		if !done() {
			return errors.New("not done")
		}
		return nil
	})
	stop()
	<-ended
	if err != nil {
		t.Fatalf("%s: not done in time\n%s", name, logs.String())
	}
	return logs.String()
}

// TestUsenetWorkerTLS: `leasehold worker --source nntps://…` indexes INN
// over TLS with a login, trusting the server's CA from --source-ca-file;
// the CA file is refused for a plain nntp:// source, and one with no
// certificate in it is refused before anything is leased.
func TestUsenetWorkerTLS(t *testing.T) {
	s := usenettest.Find(t)
	pw, err := s.Password()
	if err != nil || s.User == "" || s.TLSAddr == "" || s.CAFile == "" {
		t.Fatalf("the test login and nntps server: %+v, %v (scripts/inn.sh start makes them)", s, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := fmt.Sprintf("lh.tls.t%d", time.Now().UnixNano())
	if err := s.NewGroups(ctx, g); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	if err := usenettest.Post(ctx, src, usenettest.Generated(g, 6, 3)); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "10")
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	c := client.New(n.URL, n.AdminToken)
	t.Setenv("LEASEHOLD_SOURCE_PASSWORD", pw)
	base := []string{"--url", n.URL, "--token", token, "--out", filepath.Join(t.TempDir(), "out.jsonl"), "--capacity", "1", "--watermark-every", "200ms"}

	var stderr bytes.Buffer
	if err := runWorker(ctx, append(base, "--source", "nntp://"+s.User+"@"+s.Addr, "--source-ca-file", s.CAFile), &stderr, &stderr); err == nil || !strings.Contains(err.Error(), "nntps") {
		t.Errorf("--source-ca-file with nntp://: %v; want a usage error naming nntps", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o600)
	if err := runWorker(ctx, append(base, "--source", "nntps://"+s.User+"@"+s.TLSAddr, "--source-ca-file", empty), &stderr, &stderr); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("--source-ca-file with no certificate: %v; want it refused", err)
	}

	logs := workUntil(t, ctx, "nntps with the server's CA", caughtUp(t, ctx, c, g, 0), append(base, "--source", "nntps://"+s.User+"@"+s.TLSAddr, "--source-ca-file", s.CAFile)...)
	if !strings.Contains(logs, "tls=true") || strings.Contains(logs, pw) {
		t.Errorf("the worker's log: want tls=true and no password:\n%s", logs)
	}
}

// TestUsenetWorkerStartTLS: `leasehold worker --source nntp://user@…
// --source-starttls` upgrades INN's plain port with STARTTLS, logs in
// over TLS and indexes a group, trusting the server's CA from
// --source-ca-file; without that CA the certificate does not verify and
// the range fails at its first attempt saying so (no plaintext
// fallback); --source-starttls with nntps:// is refused.
func TestUsenetWorkerStartTLS(t *testing.T) {
	s := usenettest.Find(t)
	pw, err := s.Password()
	if err != nil || s.User == "" || s.CAFile == "" {
		t.Fatalf("the test login and CA: %+v, %v (scripts/inn.sh start makes them)", s, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("lh.starttls.t%d", time.Now().UnixNano())
	good, untrusted := prefix+".good", prefix+".untrusted"
	n, token, c := goodAndRefused(t, ctx, s, good, untrusted)
	t.Setenv("LEASEHOLD_SOURCE_PASSWORD", pw)
	source := "nntp://" + s.User + "@" + s.Addr
	base := []string{"--url", n.URL, "--token", token, "--out", filepath.Join(t.TempDir(), "out.jsonl"), "--capacity", "1",
		"--watermark-every", "200ms", "--source-starttls"}

	var stderr bytes.Buffer
	if err := runWorker(ctx, append(base, "--source", "nntps://"+s.User+"@"+s.TLSAddr), &stderr, &stderr); err == nil || !strings.Contains(err.Error(), "--source-starttls") {
		t.Errorf("--source-starttls with nntps://: %v; want a usage error", err)
	}

	logs := workUntil(t, ctx, "STARTTLS without the server's CA", func() bool {
		rs, err := c.AllRanges(ctx, untrusted, "")
		if err != nil {
			t.Fatal(err)
		}
		return len(rs) == 1 && rs[0].Status == leasehold.StatusFailed
	}, append(base, "--source", source)...)
	rs, err := c.AllRanges(ctx, untrusted, "")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Attempts != 1 || rs[0].LastError == nil || !strings.Contains(*rs[0].LastError, "certificate") {
		t.Errorf("the range read from an unverified server: %+v; want failed at its first attempt, naming the certificate", rs[0])
	}
	if strings.Contains(logs, pw) {
		t.Errorf("the worker logged the password:\n%s", logs)
	}

	logs = workUntil(t, ctx, "STARTTLS with the server's CA", caughtUp(t, ctx, c, good, 0), append(base, "--source", source, "--source-ca-file", s.CAFile)...)
	if !strings.Contains(logs, "starttls=true") || strings.Contains(logs, pw) {
		t.Errorf("the worker's log: want starttls=true and no password:\n%s", logs)
	}
}

// TestUsenetWorkerStartsAtLowMark: a group whose oldest articles have
// expired at the news server (INN: cancelled, then expireover, so GROUP
// answers a low mark above 1) is planned from that low mark when the
// operator gave no --start: its first range starts there and everything
// planned is done. A group given --start 1 is planned from 1, the
// expired articles' ranges finishing empty.
func TestUsenetWorkerStartsAtLowMark(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("lh.low.t%d", time.Now().UnixNano())
	fromLow, fromOne := prefix+".a", prefix+".b"
	if err := s.NewGroups(ctx, fromLow, fromOne); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	const expired = 12
	for _, g := range []string{fromLow, fromOne} {
		if err := usenettest.Post(ctx, src, usenettest.Generated(g, 10, 3)); err != nil {
			t.Fatal(err)
		}
		if err := s.ExpireFirst(ctx, g, expired); err != nil {
			t.Fatal(err)
		}
	}
	gi, err := src.Group(ctx, fromLow)
	if err != nil || gi.Low != expired+1 || gi.High != 30 {
		t.Fatalf("GROUP %s: %+v, %v; want low %d, high 30", fromLow, gi, err, expired+1)
	}
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	admin(t, n, "groups", "create", fromLow, "--kind", "nntp", "--range-size", "5")
	admin(t, n, "groups", "create", fromOne, "--kind", "nntp", "--range-size", "5", "--start", "1")
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	c := client.New(n.URL, n.AdminToken)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	a, b := caughtUp(t, ctx, c, fromLow, 30), caughtUp(t, ctx, c, fromOne, 30)
	workUntil(t, ctx, "groups with expired articles", func() bool { return a() && b() },
		"--url", n.URL, "--token", token, "--source", "nntp://"+s.Addr, "--out", out, "--capacity", "2", "--watermark-every", "200ms")

	for _, want := range []struct {
		group             string
		start, firstRange int64
		ranges            int
	}{
		{fromLow, expired + 1, expired + 1, 4}, // 13..17, 18..22, 23..27, 28..30
		{fromOne, 1, 1, 6},
	} {
		d, err := c.Group(ctx, want.group)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := c.AllRanges(ctx, want.group, "")
		if err != nil {
			t.Fatal(err)
		}
		if d.Start != want.start || d.HistoryFloor != want.start || len(rs) != want.ranges || rs[0].Start != want.firstRange {
			t.Errorf("%s: start %d, floor %d, %d ranges from %d; want start and floor %d, %d ranges from %d",
				want.group, d.Start, d.HistoryFloor, len(rs), rs[0].Start, want.start, want.ranges, want.firstRange)
		}
	}
}

// goodAndRefused makes groups good and refused in the INN and a node
// with both: good with 6 generated files posted to it, refused with its
// tail planned to 10 by hand (a worker the server refuses reports no
// water marks). It returns the node, a worker node's token and an admin
// client.
func goodAndRefused(t *testing.T, ctx context.Context, s *usenettest.Server, good, refused string) (*nodetest.Node, string, *client.Client) {
	t.Helper()
	if err := s.NewGroups(ctx, good, refused); err != nil {
		t.Fatal(err)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	if err := usenettest.Post(ctx, src, usenettest.Generated(good, 6, 3)); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	for _, g := range []string{good, refused} {
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "10")
	}
	admin(t, n, "groups", "tail", refused, "10")
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	return n, token, client.New(n.URL, n.AdminToken)
}

// caughtUp says whether group g has its tail planned up to the high mark
// reported (high, when above 0; any above 0 otherwise) and every range
// done.
func caughtUp(t *testing.T, ctx context.Context, c *client.Client, g string, high int64) func() bool {
	return func() bool {
		d, err := c.Group(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		return d.High != nil && *d.High > 0 && (high == 0 || *d.High == high) && d.TailEnd == *d.High && d.Ranges[leasehold.StatusDone] > 0 &&
			d.Ranges[leasehold.StatusPlanned]+d.Ranges[leasehold.StatusLeased]+d.Ranges[leasehold.StatusFailed] == 0
	}
}
