package main

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/synthetic"
	"github.com/leasehold/leasehold/source/binaries"
)

const workerUsage = `Usage:
  leasehold worker [--url U[,U2,...]] [--token T] [--capacity N] [--rate R] [--snapshot-every D]
  leasehold worker --source nntp://[user@]host[:port] --out FILE.jsonl|sqlite:FILE|postgres://… [--source-starttls] [--connections N] [--watermark-every D] [--start low|last:N|days:N]
  leasehold worker --verify [--url U] [--admin-token T | --data DIR]

The first runs the pull loop over the built-in synthetic source until
interrupted, then releases what it holds. The node token is --token or
$LEASEHOLD_TOKEN.

--url (or $LEASEHOLD_URL) may name several nodes of a fleet, separated
by commas: the worker leases at the first it can reach and passes over
one that cannot be reached (refused, reset, timed out, 502/503/504) for
--reprobe, then tries it again. A group is worked only at the node that
granted it; if that node stays unreachable for a lease TTL the group is
given up, and the node that takes it over grants it anew. A node token
registered at any node of a fleet works at every node, so one --token
is enough; nodes that are not one fleet take one token per URL
(--token T1,T2,T3, in the order of --url).

With --source nntp:// (or nntps://, TLS) it indexes a news server: it
reports the water marks of the node's groups (GROUP, every
--watermark-every), so the node plans their tails itself, reads each
range's overviews (OVER) into a window of half-assembled binaries, and
writes file and release records to --out: JSON lines with "type":"file"
or "release" (the last line of a key is its record), or with
sqlite:FILE tables files, segments and releases upserted by key. A
release is one poster's files of one release name and announced file
count, posted within --release-window of its last file. A file
is written when it is complete, or incomplete once the group was read
--incomplete-after articles past its last part or its planned tail ends;
a later part writes it again. With --nzb DIR each release that is
complete or has a file written incomplete gets DIR/<group>/<release
name>.nzb (NZB 1.1, written atomically, named in the release's record).
Overview lines that cannot be used (too few fields, a bad number, no
Message-ID) are counted by reason, logged at most once a minute with an
example, and summed in the log when the worker stops; a subject over
16 KiB is read from its first 16 KiB. docs/USENET.md is the contract of
what is written. A takeover may write a record twice (SQLite keeps one
row a key). With postgres://USER@HOST/DB (password in the URL or
$PGPASSWORD) many workers on many boxes write one index: every row
carries the group and fence of the lease that wrote it, a holder whose
group was taken over is refused and stops the group, and while the
database cannot be reached the worker waits, taking no new groups and
finishing no range whose records are not written. The password of user@ is read from
--source-password-file or $LEASEHOLD_SOURCE_PASSWORD, never from the
command line. --source-starttls upgrades an nntp:// connection with
STARTTLS before logging in; a server that does not offer it, or refuses
it, fails the worker's ranges with the reason (no plaintext fallback).
--source-ca-file adds a CA for nntps:// and STARTTLS. --start says where a
group whose water marks were never reported starts: the server's low mark,
its last N articles, or its articles of the last N days; its first report
carries that start as its low mark. OVER is pipelined, and compressed
(COMPRESS DEFLATE) when the server offers it.

--verify checks, with the admin token, that every group's stored
synthetic window equals the window of one uninterrupted pass over its
planned ids, and exits 1 if one does not.

`

// workerFlags are the worker's settings.
type workerFlags struct {
	url, token, adminToken, data, logLevel string
	urls                                   []string // url read as a list
	tokens                                 []string // token read as a list, one per url
	reprobe                                time.Duration
	capacity                               int
	rate                                   float64
	snapshotEvery, stopTimeout             time.Duration
	verify                                 bool

	source, passwordFile, caFile, out string
	startTLS, compress                bool
	start                             string
	node                              clientTLS // how the node is reached over https
	nodeTLS                           *tls.Config
	connections, markGroups           int
	batch                             int64
	markEvery                         time.Duration
	// The Usenet worker's records (USENET.md).
	nzb             string
	incompleteAfter int64
	releaseWindow   time.Duration
	retryMissing    int
	// metricsListen is where Prometheus scrapes metrics, served by metrics.
	metricsListen string
	metrics       *workerMetrics
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f workerFlags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, workerUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.url, "url", envOr("LEASEHOLD_URL", client.DefaultURL), "node URL, or several nodes of a fleet separated by commas, tried in order ($LEASEHOLD_URL)")
	fs.DurationVar(&f.reprobe, "reprobe", client.DefaultReprobe, "how long a node that could not be reached is passed over before it is tried again")
	fs.StringVar(&f.token, "token", "", "node token, or one per --url node separated by commas (default $LEASEHOLD_TOKEN)")
	fs.IntVar(&f.capacity, "capacity", 1, "groups held at once")
	fs.Float64Var(&f.rate, "rate", 0, "ids a second each group's synthetic source gives (0: as fast as it goes)")
	fs.DurationVar(&f.snapshotEvery, "snapshot-every", 10*time.Second, "upload a window between ranges this often (what a successor redoes after a crash)")
	fs.DurationVar(&f.stopTimeout, "stop-timeout", 30*time.Second, "how long uploads and releases may take when stopping")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&f.verify, "verify", false, "check the stored windows against uninterrupted passes, then exit")
	fs.StringVar(&f.adminToken, "admin-token", "", "admin token for --verify (default $LEASEHOLD_ADMIN_TOKEN or <data>/admin.token)")
	fs.StringVar(&f.data, "data", "./data", "the node's data directory, for admin.token (--verify)")
	fs.StringVar(&f.source, "source", "synthetic", "what to index: synthetic, or a news server nntp://[user@]host[:port] or nntps://…")
	fs.StringVar(&f.passwordFile, "source-password-file", "", "a file whose first line is the news server's password (else $LEASEHOLD_SOURCE_PASSWORD)")
	fs.StringVar(&f.caFile, "source-ca-file", "", "PEM certificates of CAs to trust for nntps:// or --source-starttls, besides the system's (a news server with a CA of its own)")
	fs.BoolVar(&f.startTLS, "source-starttls", false, "upgrade the nntp:// connection with STARTTLS before anything else, the login above all; a server that will not is an error, never plain text")
	fs.IntVar(&f.connections, "connections", 4, "most connections to the news server at once")
	fs.StringVar(&f.start, "start", "low", "where a group never read before starts: low (the server's low mark), last:N (its last N articles) or days:N (articles posted in the last N days, found by the articles' dates)")
	fs.BoolVar(&f.compress, "source-compress", true, "ask the news server for COMPRESS DEFLATE (RFC 8054) when it offers it; a refusal reads uncompressed")
	fs.DurationVar(&f.markEvery, "watermark-every", 60*time.Second, "how often to read groups' water marks from the news server and report them")
	fs.IntVar(&f.markGroups, "watermark-groups", 16, "groups whose water marks are read each time, oldest first")
	fs.Int64Var(&f.batch, "batch", 1000, "article numbers an OVER asks for at once (progress is reported after each)")
	fs.StringVar(&f.out, "out", os.Getenv("LEASEHOLD_OUT"), "where file and release records go: FILE.jsonl, sqlite:FILE, or postgres://… the index shared by many workers, fenced ($LEASEHOLD_OUT; news server sources)")
	fs.StringVar(&f.nzb, "nzb", "", "write an NZB of each release under this directory, DIR/<group>/<release name>.nzb (news server sources)")
	fs.Int64Var(&f.incompleteAfter, "incomplete-after", binaries.DefaultIncompleteAfter, "write a file incomplete once the group was read this many articles past its last part (0: only at the end of the tail)")
	fs.DurationVar(&f.releaseWindow, "release-window", binaries.DefaultReleaseWindow, "a file posted within this long of a release's last file joins it; one posted later under the same identity starts a new release")
	fs.IntVar(&f.retryMissing, "retry-missing", 3, "ask an article a server's OVER skipped again this many times, over later ranges, before its part counts as lost (0: never)")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464 (none when empty)")
	f.node.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("worker: unexpected arguments %q", fs.Args()))
	}
	var err error
	if f.urls, err = client.ParseURLs(f.url); err != nil {
		return usageError(fmt.Errorf("worker: --url: %v", err))
	}
	if f.reprobe <= 0 {
		return usageError(errors.New("worker: --reprobe must be more than 0"))
	}
	if f.nodeTLS, err = f.node.config(); err != nil {
		return err
	}
	if f.verify {
		token, err := adminToken(f.adminToken, f.data)
		if err != nil {
			return err
		}
		return verifyWindows(ctx, f.client(token), stdout)
	}
	if f.token == "" {
		f.token = os.Getenv("LEASEHOLD_TOKEN")
	}
	if f.token == "" {
		return usageError(errors.New("worker: no node token: give --token or set LEASEHOLD_TOKEN (leasehold admin nodes register NAME prints one)"))
	}
	if f.tokens, err = nodeTokens(f.token, len(f.urls)); err != nil {
		return usageError(fmt.Errorf("worker: --token: %v", err))
	}
	if f.capacity < 0 {
		return usageError(errors.New("worker: --capacity must be 0 or more"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usageError(fmt.Errorf("worker: --log-level: %v", err))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if f.metrics, err = serveWorkerMetrics(f.metricsListen, log); err != nil {
		return err
	}
	defer f.metrics.close()

	if f.source != "synthetic" {
		return runUsenetWorker(ctx, f, log)
	}
	var capacity atomic.Int64
	capacity.Store(int64(f.capacity))
	src := synthetic.Source{Rate: f.rate}
	w := &client.Worker{
		Client:       f.client(f.tokens[0]),
		CapacityFunc: func() int { return int(capacity.Load()) },
		NewWindowFunc: func(g leasehold.Group) client.Window {
			return synthetic.NewWindow(g.Name)
		},
		IndexFunc: func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
			return src.Index(ctx, win.(*synthetic.Window), r, progress)
		},
		Logger:           log,
		SnapshotInterval: f.snapshotEvery,
		StopTimeout:      f.stopTimeout,
		Failover:         f.failover(),
		Reprobe:          f.reprobe,
	}
	if f.snapshotEvery <= 0 {
		w.SnapshotInterval = -1
	}
	f.metrics.watch(w, nil)
	log.Info("worker started", "url", f.url, "capacity", f.capacity, "rate", f.rate)
	if err := w.Run(ctx); err != nil {
		return err
	}
	log.Info("worker stopped; everything released")
	return nil
}

// verifyWindows compares every group's stored window with the window of
// one uninterrupted pass over the ids the group has planned. In a fleet a
// group's window is stored at its owner only, so the groups of peers are
// named and left to a verify at their owner.
func verifyWindows(ctx context.Context, c *client.Client, stdout io.Writer) error {
	groups, err := c.AllGroups(ctx)
	if err != nil {
		return err
	}
	var bad []string
	checked, atPeers := 0, 0
	for _, g := range groups {
		if g.TailEnd < g.HistoryFloor {
			continue // nothing planned
		}
		problem, owner, err := verifyGroup(ctx, c, g)
		if err != nil {
			return err
		}
		if owner != "" {
			atPeers++
			fmt.Fprintf(stdout, "verify: %s: owned by %s: verify it there\n", g.Name, owner)
			continue
		}
		checked++
		if problem != "" {
			bad = append(bad, g.Name+": "+problem)
			fmt.Fprintf(stdout, "verify: %s: MISMATCH: %s\n", g.Name, problem)
			continue
		}
		fmt.Fprintf(stdout, "verify: %s: ids %d..%d match\n", g.Name, g.HistoryFloor, g.TailEnd)
	}
	if len(bad) > 0 {
		return fmt.Errorf("verify: %d of %d groups differ from an uninterrupted pass: %s", len(bad), checked, strings.Join(bad, "; "))
	}
	if atPeers > 0 {
		fmt.Fprintf(stdout, "verify: %d groups owned by fleet peers left to them\n", atPeers)
	}
	fmt.Fprintf(stdout, "verify: %d groups, windows match\n", checked)
	return nil
}

// verifyGroup returns what is wrong with the group's stored window, or "";
// or, for a group a fleet peer owns, the owner's name instead.
func verifyGroup(ctx context.Context, c *client.Client, g leasehold.Group) (problem, owner string, err error) {
	d, err := c.Group(ctx, g.Name)
	if err != nil {
		return "", "", err
	}
	if d.Peer != nil {
		return "", d.Peer.Owner, nil
	}
	problem, err = verifyWindow(ctx, c, d)
	return problem, "", err
}

// verifyWindow returns what is wrong with the stored window of a group
// this node owns, or "".
func verifyWindow(ctx context.Context, c *client.Client, d *leasehold.GroupDetail) (string, error) {
	g := d.Group
	if n := d.Ranges[leasehold.StatusPlanned] + d.Ranges[leasehold.StatusLeased]; n > 0 {
		return fmt.Sprintf("%d ranges not done yet", n), nil
	}
	if n := d.Ranges[leasehold.StatusFailed]; n > 0 {
		return fmt.Sprintf("%d ranges failed", n), nil
	}
	sr, err := c.GetGroupSnapshot(ctx, g.Name, 0)
	if err != nil {
		return "", err
	}
	if sr == nil {
		return "no snapshot stored", nil
	}
	defer sr.Close()
	got := synthetic.NewWindow(g.Name)
	gz, err := gzip.NewReader(sr)
	if err != nil {
		return "", fmt.Errorf("verify %s: %w", g.Name, err)
	}
	window := &client.WindowLimit{R: gz, Max: client.DefaultMaxWindowBytes}
	if err := got.Load(window); err != nil {
		return "", fmt.Errorf("verify %s: %w", g.Name, err)
	}
	// Read to the end: the download checks its sha-256 there.
	if _, err := io.Copy(io.Discard, window); err != nil {
		return "", fmt.Errorf("verify %s: %w", g.Name, err)
	}
	want := synthetic.Uninterrupted(g.Name, d.HistoryFloor, d.TailEnd)
	if !got.Equal(want) {
		return fmt.Sprintf("stored window (next %d) %v; uninterrupted %v", sr.Next, got, want), nil
	}
	return "", nil
}

// client is a client of the first node of --url with token, speaking
// https as --ca-file, --client-cert and --client-key say.
func (f *workerFlags) client(token string) *client.Client {
	c := client.New(f.urls[0], token)
	c.TLSConfig = f.nodeTLS
	program := "leasehold-worker"
	if strings.HasPrefix(f.source, "nntp") {
		program = "leasehold-usenet"
	}
	c.UserAgent = leasehold.Build().UserAgent(program) + " " + c.UserAgent
	return c
}

// nodeTokens reads --token: one token for every node, or one per node of
// --url, in its order.
func nodeTokens(list string, nodes int) ([]string, error) {
	parts := strings.Split(list, ",")
	if len(parts) == 1 {
		return slices.Repeat(parts, nodes), nil
	}
	if len(parts) != nodes {
		return nil, fmt.Errorf("%d tokens for %d node URLs: give one token, or one per URL", len(parts), nodes)
	}
	for i, p := range parts {
		if p = strings.TrimSpace(p); p == "" {
			return nil, fmt.Errorf("token %d of %d is empty", i+1, nodes)
		}
		parts[i] = p
	}
	return parts, nil
}

// failover are clients of the other nodes of --url, in order, each with
// its token.
func (f *workerFlags) failover() []*client.Client {
	var out []*client.Client
	for i, u := range f.urls[1:] {
		c := client.New(u, f.tokens[i+1])
		c.TLSConfig = f.nodeTLS
		out = append(out, c)
	}
	return out
}
