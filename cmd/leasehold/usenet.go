package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// runUsenetWorker is `leasehold worker --source nntp://…`: the pull loop
// over a news server, the binaries window, the water-mark reporter.
func runUsenetWorker(ctx context.Context, f workerFlags, log *slog.Logger) (err error) {
	cfg, err := nntp.ParseURL(f.source)
	if err != nil {
		return usageError(fmt.Errorf("worker: --source: %v", err))
	}
	if f.out == "" {
		return usageError(errors.New("worker: --out (or $LEASEHOLD_OUT) is required with a news server: FILE.jsonl, sqlite:FILE or postgres://…"))
	}
	if f.connections < 1 {
		return usageError(errors.New("worker: --connections must be 1 or more"))
	}
	if f.capacity < 0 {
		return usageError(errors.New("worker: --capacity must be 0 or more"))
	}
	if cfg.User != "" {
		if cfg.Password, err = sourcePassword(f.passwordFile); err != nil {
			return err
		}
	}
	if f.startTLS {
		if cfg.TLS {
			return usageError(errors.New("worker: --source-starttls is for nntp:// sources; nntps:// speaks TLS from the first byte"))
		}
		cfg.StartTLS = true
	}
	if f.caFile != "" {
		if !cfg.TLS && !cfg.StartTLS {
			return usageError(errors.New("worker: --source-ca-file is for nntps:// sources or --source-starttls"))
		}
		if cfg.TLSConfig, err = sourceTLS(f.caFile); err != nil {
			return err
		}
	}
	start, err := nntp.ParseStart(f.start)
	if err != nil {
		return usageError(fmt.Errorf("worker: --start: %v", err))
	}
	if f.incompleteAfter < 0 {
		return usageError(errors.New("worker: --incomplete-after must be 0 or more"))
	}
	if f.releaseWindow < time.Second {
		return usageError(errors.New("worker: --release-window must be 1s or more"))
	}
	if f.retryMissing < 0 || f.retryMissing > 100 {
		return usageError(errors.New("worker: --retry-missing must be 0 to 100"))
	}
	// A worker that refuses to start leaves nothing behind: what it
	// creates below is removed again unless a group was leased.
	var made startFiles
	var leased atomic.Bool
	defer func() {
		if err != nil && !leased.Load() {
			made.remove()
		}
	}()
	made.note(f.out, f.nzb)
	// The NZB directory is proved writable before anything is leased.
	var nzbs *binaries.NZBWriter
	if f.nzb != "" {
		if nzbs, err = binaries.NewNZBWriter(f.nzb); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	cfg.Connections = f.connections
	cfg.NoCompress = !f.compress
	cfg.Logger = log
	src := nntp.New(cfg)
	defer src.Close()
	sink, err := binaries.OpenSink(f.out)
	if err != nil {
		return indexError("worker: --out", err)
	}
	defer sink.Close()
	// The shared index fences each write to its lease and is waited for
	// while down: no new groups are taken meanwhile.
	index, _ := sink.(*binaries.Postgres)
	if index != nil {
		index.Logger = log
		index.NoFence = os.Getenv("LEASEHOLD_TEST_UNFENCED") == "1" // the fault run's planted fault only
		defer func() { log.Info("index writes refused for an older fence", "refused_total", index.Refused()) }()
	}

	c := f.client(f.tokens[0])
	if err := checkNNTPKind(ctx, c); err != nil {
		return err
	}
	skips := &binaries.Skips{Log: log}
	ix := &binaries.Indexer{Source: src, Sink: sink, NZB: nzbs, Batch: f.batch, RetryMissing: f.retryMissing, Skips: skips,
		TailEnd: func(ctx context.Context, group string) (int64, error) {
			gi, err := src.Group(ctx, group)
			if err != nil {
				return 0, err
			}
			return gi.High, nil
		}}
	if f.snapshotEvery > 0 {
		// NZBs changed by a range are rewritten as often as the window
		// goes up, not once a range: the window's Save writes them first.
		ix.NZBEvery = f.snapshotEvery
	}
	w := &client.Worker{
		Client: c,
		CapacityFunc: func() int {
			if index != nil && !index.Reachable() {
				return 0
			}
			return f.capacity
		},
		NewWindowFunc: func(g leasehold.Group) client.Window {
			leased.Store(true)
			w := binaries.NewWindow(g.Name)
			w.IncompleteAfter = f.incompleteAfter
			w.ReleaseWindow = f.releaseWindow
			if nzbs == nil {
				return w
			}
			// A new lease: what an earlier one left to write is the
			// window's to say again.
			nzbs.Reset(g.Name)
			return &nzbWindow{Window: w, nzbs: nzbs}
		},
		IndexFunc: func(ctx context.Context, g *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
			// The node's per-group rules, as of this lease: a change at
			// the node takes effect at the next one.
			rules, err := rulesOf(g.Rules)
			if err != nil {
				return client.Permanent(err)
			}
			bw, ok := win.(*binaries.Window)
			if !ok {
				bw = win.(*nzbWindow).Window
			}
			bw.Rules = rules
			ctx = binaries.WithLease(ctx, binaries.Lease{Group: g.Group.Name, Fence: g.Fence})
			err = ix.Index(ctx, bw, r.Next, r.End, progress)
			if err != nil && nntp.Permanent(err) {
				// A refused login or a group the server does not carry:
				// the range fails at once, with the server's answer.
				return client.Permanent(err)
			}
			return err
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
	f.metrics.watch(w, ix.TailEnd)
	f.metrics.watchUsenet(src, skips, index)
	log.Info("worker started", "url", f.url, "source", cfg.Addr, "tls", cfg.TLS, "starttls", cfg.StartTLS, "user", cfg.User,
		"connections", cfg.Connections, "capacity", f.capacity, "out", f.out, "nzb", f.nzb, "start", start, "compress", f.compress)
	var wg sync.WaitGroup
	markCtx, stopMarks := context.WithCancel(ctx)
	wg.Go(func() { reportMarks(markCtx, c, src, f.markEvery, f.markGroups, start, log) })
	err = w.Run(ctx)
	stopMarks()
	wg.Wait()
	if nzbs != nil {
		// Every window that went up waited for its NZBs; what is left
		// (a group lost or given up without an upload) is written too.
		if cerr := nzbs.Close(); cerr != nil {
			log.Warn("NZBs not written", "err", cerr)
		}
	}
	logSummary(log, skips, nzbs)
	if err != nil {
		return err
	}
	log.Info("worker stopped; everything released")
	return nil
}

// startFiles are the output file and NZB directories a worker's start
// creates (they did not exist before it), to be removed when it refuses
// to start.
type startFiles struct {
	files []string // the output and, for SQLite, its journal files
	dirs  []string // the --nzb directory and its missing parents, deepest first
}

// note records which of out's files and of nzb's directories do not exist
// yet. A PostgreSQL index is no file.
func (m *startFiles) note(out, nzb string) {
	if out != "" && !binaries.IsPostgres(out) {
		path, sqlite := strings.CutPrefix(out, "sqlite:")
		names := []string{path}
		if sqlite {
			names = append(names, path+"-wal", path+"-shm", path+"-journal")
		}
		for _, name := range names {
			if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
				m.files = append(m.files, name)
			}
		}
	}
	for dir := filepath.Clean(nzb); nzb != ""; {
		if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		m.dirs = append(m.dirs, dir)
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
}

// remove removes what note found missing. Directories go only when empty:
// nothing is written into them before a lease.
func (m *startFiles) remove() {
	for _, name := range m.files {
		os.Remove(name)
	}
	for _, dir := range m.dirs {
		os.Remove(dir)
	}
}

// usenetRules caches the Usenet rules of the last rules version read.
var usenetRules struct {
	sync.Mutex
	version int64
	rules   *binaries.Rules
	err     error
	read    bool
}

// rulesOf reads the Usenet section of a lease's rules, once a version.
func rulesOf(rs leasehold.RuleSet) (*binaries.Rules, error) {
	usenetRules.Lock()
	defer usenetRules.Unlock()
	if !usenetRules.read || usenetRules.version != rs.Version {
		usenetRules.rules, usenetRules.err = binaries.ParseRules(rs.Body)
		if usenetRules.err != nil {
			usenetRules.err = fmt.Errorf("worker: the node's rules version %d: %w (mend them with `leasehold admin rules put`)", rs.Version, usenetRules.err)
		}
		usenetRules.version, usenetRules.read = rs.Version, true
	}
	return usenetRules.rules, usenetRules.err
}

// nzbWindow is a group's window whose Save first writes the NZBs its
// ranges changed (the Indexer defers them, NZBEvery): a window that goes
// up never runs ahead of the NZBs, so a takeover from it makes the same
// ones.
type nzbWindow struct {
	*binaries.Window
	nzbs *binaries.NZBWriter
}

func (w *nzbWindow) Save(out io.Writer) error {
	if err := w.nzbs.Flush(w.Group); err != nil {
		return fmt.Errorf("writing the NZBs before the window: %w", err)
	}
	return w.Window.Save(out)
}

// logSummary logs what the worker skipped, by reason, as the counter
// leasehold_usenet_skipped_total{reason} (docs/USENET.md "Bad input"),
// and the bytes of NZBs it wrote.
func logSummary(log *slog.Logger, skips *binaries.Skips, nzbs *binaries.NZBWriter) {
	var args []any
	counts := skips.Counts()
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		args = append(args, fmt.Sprintf("leasehold_usenet_skipped_total{reason=%q}", reason), counts[reason])
	}
	if nzbs != nil {
		bytes, files := nzbs.Written()
		args = append(args, "nzb_bytes_written", bytes, "nzb_writes", files)
	}
	log.Info("usenet summary", args...)
}

// checkNNTPKind refuses to start a Usenet worker whose node does not read
// nntp groups (rule 12): such a worker would never be handed a group, and
// nothing would say why. The node's answer to GET /watermarks names the
// caller's kinds.
func checkNNTPKind(ctx context.Context, c *client.Client) error {
	kinds, err := c.Kinds(ctx)
	if err != nil {
		return fmt.Errorf("worker: asking the node which kinds this worker's node reads: %w", err)
	}
	if !leasehold.HasSourceKind(kinds, leasehold.SourceKindNNTP) {
		return usageError(fmt.Errorf("worker: this token's node reads kinds %s, not nntp, so it is never handed a Usenet group: "+
			"register the worker's node with `leasehold admin nodes register NAME --kinds nntp`, or add the kind to it with "+
			"`leasehold admin nodes kinds ID nntp`", strings.Join(kinds, ",")))
	}
	return nil
}

// sourceTLS trusts the CAs in file (PEM) besides the system's.
func sourceTLS(file string) (*tls.Config, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError(fmt.Errorf("worker: --source-ca-file: %v", err))
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageError(fmt.Errorf("worker: --source-ca-file %s: no PEM certificate in it", file))
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// sourcePassword reads the news server's password from file's first line,
// or else from $LEASEHOLD_SOURCE_PASSWORD.
func sourcePassword(file string) (string, error) {
	if file == "" {
		if pw := os.Getenv("LEASEHOLD_SOURCE_PASSWORD"); pw != "" {
			return pw, nil
		}
		return "", usageError(errors.New("worker: the source names a user but no password: give --source-password-file or set LEASEHOLD_SOURCE_PASSWORD"))
	}
	fh, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("worker: --source-password-file: %w", err)
	}
	defer fh.Close()
	line, err := bufio.NewReader(fh).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("worker: --source-password-file %s: no password on its first line", file)
	}
	return line, nil
}

// reportMarks reads the water marks of the node's groups whose marks are
// oldest, up to groups at a time, every interval, and reports them, so
// the node plans their tails (rule 11). A group's first report carries
// where start says it begins as its low mark, which the node starts a
// group created without a start at. It runs until ctx ends.
func reportMarks(ctx context.Context, c *client.Client, src *nntp.Client, every time.Duration, groups int, start nntp.Start, log *slog.Logger) {
	if every <= 0 || groups <= 0 {
		return
	}
	// unreachable is since when the news server could not be reached for
	// water marks: past one interval, each group asked about is reported
	// to the node as unreadable (rule 13), not only logged here.
	var unreachable time.Time
	for {
		ws, err := c.Watermarks(ctx, groups)
		if err != nil && ctx.Err() == nil {
			log.Warn("listing groups for their water marks failed", "err", err)
		}
		for _, g := range ws {
			gi, err := src.Group(ctx, g.Name)
			if err != nil {
				if ctx.Err() != nil {
					continue
				}
				log.Warn("reading a group's water marks failed", "group", g.Name, "err", err)
				// A group the server does not carry (411) or a refused
				// login is said at once; a server down, once it has been
				// down for longer than an interval.
				permanent := nntp.Permanent(err)
				if !permanent && unreachable.IsZero() {
					unreachable = time.Now()
				}
				if permanent || time.Since(unreachable) >= every {
					if rerr := c.ReportSourceError(ctx, g.Name, err.Error()); rerr != nil && ctx.Err() == nil {
						log.Warn("reporting a source error failed", "group", g.Name, "err", rerr)
					}
				}
				continue
			}
			unreachable = time.Time{}
			low, high := gi.Low, gi.High
			if gi.Count == 0 && high < low {
				low = high + 1
			}
			if g.Low == nil && start != (nntp.Start{}) {
				if low, err = src.StartOf(ctx, gi, start, time.Now()); err != nil {
					if ctx.Err() == nil {
						log.Warn("finding where a new group starts failed", "group", g.Name, "start", start, "err", err)
					}
					continue
				}
				log.Info("a new group starts", "group", g.Name, "start", start, "article", low, "low", gi.Low, "high", high)
			}
			n, err := c.ReportWatermarks(ctx, g.Name, low, high)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("reporting water marks failed", "group", g.Name, "low", low, "high", high, "err", err)
			case err == nil && n > 0:
				log.Info("water marks planned the tail", "group", g.Name, "low", low, "high", high, "ranges", n)
			}
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
