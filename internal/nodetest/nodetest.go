// Package nodetest starts a real leasehold node for tests: real SQLite in
// a temporary directory, the real echo server on a loopback port.
package nodetest

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/web"
)

// Options tune the node. Zero values take the node's defaults.
type Options struct {
	LeaseTTL    time.Duration
	MaxAttempts int
	// Clock, if set, is the node's clock instead of real time.
	Clock func() time.Time
	// DataDir reuses a data directory (to restart a node on its catalog);
	// empty means a new t.TempDir().
	DataDir          string
	SnapshotMaxBytes int64
	// SnapshotMaxExpandedBytes bounds what a gzip upload may expand to.
	SnapshotMaxExpandedBytes int64
	// SnapshotUploadTimeout bounds how long a whole upload may take.
	SnapshotUploadTimeout time.Duration
	// Store tunes the catalog (synchronous mode, group commit).
	Store store.Options
	// Logger receives the node's logs; nil discards them unless
	// LEASEHOLD_TEST_LOG is set.
	Logger *slog.Logger
}

// Node is a running node.
type Node struct {
	URL        string // http://127.0.0.1:port
	AdminToken string
	DataDir    string
	App        *appliance.Appliance
	// DB is the node's catalog, for tests that set it up or read it
	// directly (the appliance keeps its own unexported).
	DB      *store.DB
	Metrics *web.Metrics

	srv      *web.Server
	rec      *recorder // nil unless RecordEnv is set
	stopOnce sync.Once
}

// Start starts a node and stops it when the test ends.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	dir := o.DataDir
	if dir == "" {
		dir = t.TempDir()
	}
	log := o.Logger
	if log == nil {
		if os.Getenv("LEASEHOLD_TEST_LOG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		} else {
			log = slog.New(slog.DiscardHandler)
		}
	}
	metrics := web.NewMetrics()
	st := o.Store
	st.BatchFunc = metrics.ObserveBatch
	cfg := appliance.Config{
		DataDir: dir, LeaseTTL: o.LeaseTTL, MaxAttempts: int64(o.MaxAttempts), NowFunc: o.Clock,
		SnapshotMaxBytes: o.SnapshotMaxBytes, SnapshotMaxExpandedBytes: o.SnapshotMaxExpandedBytes, Store: st, Recorder: metrics, Logger: log,
	}
	db, err := appliance.OpenCatalog(cfg)
	if err != nil {
		t.Fatalf("nodetest: opening the catalog: %v", err)
	}
	app, err := appliance.New(cfg, db)
	if err != nil {
		t.Fatalf("nodetest: opening the appliance: %v", err)
	}
	token, err := appliance.AdminToken(dir, "")
	if err != nil {
		app.Close()
		t.Fatalf("nodetest: admin token: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		app.Close()
		t.Fatalf("nodetest: listen: %v", err)
	}
	wo := web.Options{AdminToken: token, AdminTokenFile: filepath.Join(dir, "admin.token"), Metrics: metrics, Logger: log, SnapshotUploadTimeout: o.SnapshotUploadTimeout}
	var rec *recorder
	if d := os.Getenv(RecordEnv); d != "" {
		if rec, err = newRecorder(d); err != nil {
			ln.Close()
			app.Close()
			t.Fatalf("nodetest: recording the API: %v", err)
		}
		wo.WrapFunc = rec.wrap
	}
	srv := web.New(web.DoorsOf(app), wo)
	go srv.Serve(ln)
	n := &Node{URL: "http://" + ln.Addr().String(), AdminToken: token, DataDir: dir, App: app, DB: db, Metrics: metrics, srv: srv, rec: rec}
	t.Cleanup(n.Stop)
	return n
}

// Stop shuts the server down (cutting open connections after a second)
// and closes the catalog. It is safe to call more than once.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.srv.Shutdown(ctx)
		n.App.Close()
		if n.rec != nil {
			n.rec.close()
		}
	})
}

// Clock is a test clock that moves only when told.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
