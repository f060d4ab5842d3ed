// Package nodetest starts a real leasehold node for tests: real SQLite in
// a temporary directory, the real echo server on a loopback port.
package nodetest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/node"
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
	// UploadStoring is told when a snapshot upload's body begins to be
	// stored (appliance.Config.UploadStoring).
	UploadStoring func(groupID int64)
	// Fleet, if set, is the node's fleet as its appliance sees it (the
	// claims it holds, whether it joined): a test's stand-in for a fleet
	// it does not run (appliance.Config.Fleet).
	Fleet appliance.Fleet
	// Web is the web server's options (its slow-client timeouts, say, or
	// a WrapFunc through which a test sees the calls the node answers);
	// the admin token, the metrics and the logger are the node's.
	Web web.Options
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
	// Handler is the HTTP handler the node serves at URL (its routes),
	// unwrapped by the API's recording.
	Handler http.Handler

	parts    *node.Parts
	rec      *recorder // nil unless RecordEnv is set
	stopOnce sync.Once
}

// Start starts a node, assembled as `leasehold serve` assembles one
// (node.Assemble), and stops it when the test ends.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	dir := o.DataDir
	if dir == "" {
		dir = t.TempDir()
	}
	log := o.Logger
	if log == nil {
		log = testLogger()
	}
	n := &Node{DataDir: dir}
	cfg := node.Config{
		Appliance: appliance.Config{
			DataDir: dir, LeaseTTL: o.LeaseTTL, MaxAttempts: int64(o.MaxAttempts), NowFunc: o.Clock,
			SnapshotMaxBytes: o.SnapshotMaxBytes, SnapshotMaxExpandedBytes: o.SnapshotMaxExpandedBytes, Store: o.Store, Logger: log,
			UploadStoring: o.UploadStoring, Fleet: o.Fleet,
		},
		ShutdownTimeout: time.Second, // open connections are cut after a second
		Web:             func() (web.Options, net.Listener, error) { return n.web(log, o) },
	}
	parts, err := node.Assemble(cfg)
	if err != nil {
		t.Fatalf("nodetest: assembling the node: %v", err)
	}
	n.parts, n.App, n.DB, n.Metrics, n.Handler = parts, parts.App, parts.DB, parts.Metrics, parts.Web.Handler()
	if err := parts.Start(context.Background()); err != nil {
		n.closeRecorder()
		t.Fatalf("nodetest: starting the node: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

// testLogger discards the node's logs unless LEASEHOLD_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("LEASEHOLD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// web is the node's web options and listener: the admin token made in
// its data dir, a loopback port, and the API's answers recorded when
// RecordEnv is set.
func (n *Node) web(log *slog.Logger, o Options) (web.Options, net.Listener, error) {
	token, err := appliance.AdminToken(n.DataDir, "")
	if err != nil {
		return web.Options{}, nil, fmt.Errorf("admin token: %w", err)
	}
	wo := o.Web
	wo.AdminToken, wo.AdminTokenFile, wo.Logger = token, filepath.Join(n.DataDir, "admin.token"), log
	if o.SnapshotUploadTimeout != 0 {
		wo.SnapshotUploadTimeout = o.SnapshotUploadTimeout
	}
	if d := os.Getenv(RecordEnv); d != "" {
		if n.rec, err = newRecorder(d); err != nil {
			return web.Options{}, nil, fmt.Errorf("recording the API: %w", err)
		}
		wo.WrapFunc = n.rec.wrap
		if inner := o.Web.WrapFunc; inner != nil { // the test's, inside the recording
			wo.WrapFunc = func(h http.Handler) http.Handler { return n.rec.wrap(inner(h)) }
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.closeRecorder()
		return web.Options{}, nil, fmt.Errorf("listen: %w", err)
	}
	n.URL, n.AdminToken = "http://"+ln.Addr().String(), token
	return wo, ln, nil
}

// Stop shuts the server down (cutting open connections after a second)
// and closes the catalog. It is safe to call more than once.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.parts.Stop()
		n.closeRecorder()
	})
}

// closeRecorder ends the API's recording, if it runs.
func (n *Node) closeRecorder() {
	if n.rec != nil {
		n.rec.close()
	}
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
