package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/fleet"
	"github.com/leasehold/leasehold/node"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/web"
)

// Main is `leasehold serve`: it reads flags and the environment, wires the
// appliance and the web server, and runs them until its context ends.
type Main struct {
	DataDir           string
	Listen            string
	LeaseTTL          time.Duration
	AdminToken        string
	AdminTokenFile    string
	MaxConnections    int
	MaxConnsPerRemote int
	// MaxUnauthenticated is the budget of connections that have shown no
	// token yet (0: half of MaxConnections); UnauthenticatedIdle bounds
	// their every read.
	MaxUnauthenticated  int
	UnauthenticatedIdle time.Duration
	SnapshotMaxExpanded byteSize
	UploadTimeout       time.Duration
	SnapshotMaxBytes    byteSize
	MaxAttempts         int64
	HistoryMinFreeBytes byteSize
	NodeUnseen          time.Duration
	SnapshotMaxAge      time.Duration
	Synchronous         string
	NoGroupCommit       bool
	LogLevel            string
	LogFormat           string
	ShutdownTimeout     time.Duration

	// Name is the node's name in its fleet.
	Name string
	// NATS is "" to decide from the other NATS flags (settleNATS), "off"
	// to run alone, or the URL(s) of an external NATS.
	NATS              string
	NATSListen        string
	NATSClusterListen string
	NATSRoutes        string // comma-separated
	NATSSecretFile    string
	NATSInsecure      bool
	// NATSTLSCert, NATSTLSKey and NATSTLSCA put NATS (the embedded
	// server's client port and routes, and this node's connection) under
	// TLS, every peer verified against the CA.
	NATSTLSCert, NATSTLSKey, NATSTLSCA string
	ClaimTTL                           time.Duration
	StreamMaxAge                       time.Duration
	StreamMaxBytes                     byteSize
	// FleetRoster, if set, lists the fleet's members and their public
	// keys: only they are believed (fleet.Config.Roster).
	FleetRoster string
	// FleetAcceptUnsigned: fleet.Config.AcceptUnsigned, for a rolling
	// upgrade from a release that signs nothing.
	FleetAcceptUnsigned bool

	// NATSClient is the credentials and copies for an external NATS.
	NATSClient natsClientFlags

	// TLSCert and TLSKey make the node serve HTTPS only; TLSClientCA
	// also asks clients for a certificate that CA signed.
	TLSCert, TLSKey, TLSClientCA string
	// TrustedProxies may tell the node, in X-Forwarded-Proto, that a
	// browser came over HTTPS.
	TrustedProxies proxyList

	stdout, stderr io.Writer
	// adminTokenValue is the admin token given, once read.
	adminTokenValue string
	// adminTokenInArgs: the admin token came from --admin-token on the
	// command line, which ps shows every user (not from its variable).
	adminTokenInArgs bool

	// certEvery is how often the TLS files are looked at for a change.
	certEvery time.Duration

	// wrapHTTP, when set, wraps the HTTP handler: the tests record the
	// API's answers through it (nodetest.Recording).
	wrapHTTP func(http.Handler) http.Handler

	// natsAuth says where the NATS credentials come from, for the log.
	natsAuth string
	// fleetKey is this node's public key in the fleet, for the log (a
	// roster lists it).
	fleetKey string
	// hup delivers SIGHUP while Run runs.
	hup chan os.Signal
	// natsSecretAlso are the secrets --nats-secret-file names after the
	// first: accepted too while the fleet's secret rolls.
	natsSecretAlso []string

	mu    sync.Mutex
	addr  net.Addr
	ready chan struct{}
}

// NewMain returns a Main with the defaults.
func NewMain(stdout, stderr io.Writer) *Main {
	return &Main{
		DataDir: "./data", Listen: "127.0.0.1:8080", LeaseTTL: appliance.DefaultLeaseTTL,
		SnapshotMaxBytes: appliance.DefaultSnapshotMaxBytes, MaxAttempts: appliance.DefaultMaxAttempts,
		MaxConnections: web.DefaultMaxConnections(), MaxConnsPerRemote: web.DefaultMaxConnectionsPerRemote,
		UnauthenticatedIdle: web.DefaultUnauthenticatedIdle,
		SnapshotMaxExpanded: appliance.DefaultSnapshotMaxExpandedBytes, UploadTimeout: web.DefaultSnapshotUploadTimeout,
		HistoryMinFreeBytes: 1 << 30, Synchronous: "FULL", LogLevel: "info", LogFormat: "text", ShutdownTimeout: 30 * time.Second,
		Name: hostNodeName(), ClaimTTL: 30 * time.Second,
		StreamMaxAge: 24 * time.Hour, StreamMaxBytes: 1 << 30,
		stdout: stdout, stderr: stderr, ready: make(chan struct{}), certEvery: 2 * time.Second,
	}
}

// flagSet is serve's flags, bound to m's fields.
func (m *Main) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("leasehold serve", flag.ContinueOnError)
	fs.SetOutput(m.stderr)
	fs.Usage = func() { serveUsage(m.stderr, fs) }
	fs.StringVar(&m.DataDir, "data", m.DataDir, "data directory: catalog, snapshots, admin token")
	fs.StringVar(&m.Listen, "listen", m.Listen, "address to serve HTTP on")
	fs.DurationVar(&m.LeaseTTL, "lease-ttl", m.LeaseTTL, "how long a holder may be quiet before its group is taken over")
	fs.StringVar(&m.AdminToken, "admin-token", m.AdminToken, "admin token (default: generated into <data>/admin.token); every user on the host sees it in ps: prefer --admin-token-file")
	fs.StringVar(&m.AdminTokenFile, "admin-token-file", m.AdminTokenFile, "a file holding the admin token (its first line, at least 16 bytes); rotation replaces it; its directory must be the node's user's or root's, not writable by others")
	fs.IntVar(&m.MaxConnections, "max-connections", m.MaxConnections, "most HTTP connections open at once; more are closed as soon as accepted (default: half the open-file limit, at most 4096)")
	fs.IntVar(&m.MaxConnsPerRemote, "max-connections-per-remote", m.MaxConnsPerRemote, "most HTTP connections open at once from one IP address")
	fs.IntVar(&m.MaxUnauthenticated, "max-unauthenticated-connections", m.MaxUnauthenticated, "most HTTP connections open at once that have shown no token or session yet; past it the oldest of them is closed to make room (default: half of --max-connections)")
	fs.DurationVar(&m.UnauthenticatedIdle, "unauthenticated-idle-timeout", m.UnauthenticatedIdle, "how long a connection that has shown no token or session yet may send nothing before it is closed")
	fs.Var(&m.SnapshotMaxExpanded, "snapshot-max-expanded-bytes", "most a gzip snapshot upload may expand to (bytes, or with KiB/MiB/GiB/TiB)")
	fs.DurationVar(&m.UploadTimeout, "snapshot-upload-timeout", m.UploadTimeout, "how long a whole snapshot upload may take, however steadily it trickles in")
	fs.Var(&m.SnapshotMaxBytes, "snapshot-max-bytes", "largest snapshot accepted (bytes, or with KiB/MiB/GiB/TiB)")
	fs.Int64Var(&m.MaxAttempts, "max-attempts", m.MaxAttempts, "a range leased this many times without finishing is failed")
	fs.Var(&m.HistoryMinFreeBytes, "history-min-free-bytes", "below this much free space on the data disk only tail work is leased (0: off)")
	fs.DurationVar(&m.NodeUnseen, "node-unseen", m.NodeUnseen, "a node not seen for this long is a finding (default 10 lease TTLs)")
	fs.DurationVar(&m.SnapshotMaxAge, "snapshot-max-age", m.SnapshotMaxAge, "a held group's snapshot older than this is a finding (0: off)")
	fs.StringVar(&m.Synchronous, "synchronous", m.Synchronous, "SQLite synchronous mode, FULL or NORMAL (NORMAL can lose acknowledged writes on power loss)")
	fs.BoolVar(&m.NoGroupCommit, "no-group-commit", m.NoGroupCommit, "one transaction per write (to measure what group commit buys)")
	fs.StringVar(&m.LogLevel, "log-level", m.LogLevel, "debug, info, warn or error")
	fs.StringVar(&m.LogFormat, "log-format", m.LogFormat, "text (key=value lines) or json (one object a line, for a log shipper)")
	fs.DurationVar(&m.ShutdownTimeout, "shutdown-timeout", m.ShutdownTimeout, "how long to let requests in flight finish on SIGTERM")
	fs.StringVar(&m.Name, "name", m.Name, "this node's name in its fleet, unique in it (default: the host name)")
	fs.StringVar(&m.NATS, "nats", m.NATS, `peer sync: "" runs the embedded NATS server when another --nats-* flag (listen, cluster, routes, secret, TLS) asks for a fleet and runs the node alone otherwise, "off" runs it alone always, else nats:// URL(s) of an external NATS, comma-separated`)
	fs.StringVar(&m.NATSListen, "nats-listen", m.NATSListen, "run the embedded NATS server with this client address (port 0 picks a free one; default with other fleet flags: "+defaultNATSListen+")")
	fs.StringVar(&m.NATSClusterListen, "nats-cluster-listen", m.NATSClusterListen, "the embedded NATS server's route address, to cluster with other nodes (empty: standalone)")
	fs.StringVar(&m.NATSRoutes, "nats-routes", m.NATSRoutes, "other nodes' route URLs, nats://host:port, comma-separated (needs --nats-cluster-listen)")
	fs.StringVar(&m.NATSSecretFile, "nats-secret-file", m.NATSSecretFile, "a file holding the fleet's shared secret: the embedded NATS server asks it of clients and routes, and this node presents it to NATS; lines after the first are secrets accepted too while the secret rolls; read again on SIGHUP and when it changes (empty: the embedded server asks clients for the node's own token, made into <data>/nats.secret)")
	fs.BoolVar(&m.NATSInsecure, "nats-insecure", m.NATSInsecure, "run peer sync without --nats-secret-file where NATS can be reached beyond this host (routes, a non-loopback --nats-listen, an external NATS): the routes and an external NATS are then open, and anyone who reaches them can join the fleet and rewrite its catalog (the client port still asks for <data>/nats.secret)")
	fs.StringVar(&m.NATSTLSCert, "nats-tls-cert", m.NATSTLSCert, "this node's NATS certificate (PEM): the embedded server's client port and routes speak TLS only, and this node presents it to NATS (with --nats-tls-key and --nats-tls-ca); read again on SIGHUP and when it changes")
	fs.StringVar(&m.NATSTLSKey, "nats-tls-key", m.NATSTLSKey, "the private key of --nats-tls-cert (PEM)")
	fs.StringVar(&m.NATSTLSCA, "nats-tls-ca", m.NATSTLSCA, "the fleet's CA (PEM): every NATS peer, client or route, must show a certificate it signed, and NATS servers are verified against it (alone, without --nats-tls-cert and --nats-tls-key, for an external NATS that asks no client certificate)")
	m.NATSClient.register(fs)
	fs.BoolVar(&m.FleetAcceptUnsigned, "fleet-accept-unsigned", m.FleetAcceptUnsigned, "during a rolling upgrade from a release that signs nothing: believe an unsigned message or value as the node it names (never with --fleet-roster; restart without it once every node is upgraded)")
	fs.StringVar(&m.FleetRoster, "fleet-roster", m.FleetRoster, "a file of the fleet's members, one \"NAME PUBKEY\" line each (a node's key is printed in its start log and kept in <data>/fleet.nkey): only they are believed, read again when it changes (empty: a name's key is pinned the first time it is seen)")
	fs.DurationVar(&m.ClaimTTL, "claim-ttl", m.ClaimTTL, "how long this node's ownership claims stand once it stops renewing its life in the fleet; another node may take its groups then")
	fs.DurationVar(&m.StreamMaxAge, "stream-max-age", m.StreamMaxAge, "how long the fleet's event stream keeps events (a node away longer rebuilds its peers from their dumps)")
	fs.Var(&m.StreamMaxBytes, "stream-max-bytes", "how large the fleet's event stream may grow (bytes, or with KiB/MiB/GiB/TiB)")
	fs.StringVar(&m.TLSCert, "tls-cert", m.TLSCert, "serve HTTPS only, with this certificate (PEM, the chain after it); read again on SIGHUP and when it changes on disk")
	fs.StringVar(&m.TLSKey, "tls-key", m.TLSKey, "the private key (PEM) of --tls-cert")
	fs.StringVar(&m.TLSClientCA, "tls-client-ca", m.TLSClientCA, "ask every client for a certificate signed by a CA in this file (PEM), and refuse those without one")
	fs.Var(&m.TrustedProxies, "trusted-proxy", "a reverse proxy's address or CIDR whose X-Forwarded-Proto: https is believed (the dashboard cookie is then Secure, with HSTS); repeat it or separate with commas")
	return fs
}

// ParseFlags reads LEASEHOLD_<FLAG> from the environment, then the flags,
// which win. A bad value is a usage error.
func (m *Main) ParseFlags(args []string) error {
	fs := m.flagSet()
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := "LEASEHOLD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", env, v, err)
			}
		}
	})
	m.TrustedProxies.fromEnv = len(m.TrustedProxies.list) > 0
	if envErr != nil {
		return usageError(envErr)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("serve takes no arguments, got %q", fs.Args()))
	}
	m.adminTokenInArgs = m.AdminToken != "" && setInArgs(args, "admin-token")
	switch {
	case m.LeaseTTL <= 0:
		return usageError(fmt.Errorf("--lease-ttl must be positive"))
	case m.MaxAttempts < 1:
		return usageError(fmt.Errorf("--max-attempts must be at least 1"))
	case m.SnapshotMaxBytes < 1:
		return usageError(fmt.Errorf("--snapshot-max-bytes must be positive"))
	case m.SnapshotMaxExpanded < 1:
		return usageError(fmt.Errorf("--snapshot-max-expanded-bytes must be positive"))
	case m.UploadTimeout <= 0:
		return usageError(fmt.Errorf("--snapshot-upload-timeout must be positive"))
	case m.MaxConnections < 1 || m.MaxConnsPerRemote < 1:
		return usageError(fmt.Errorf("--max-connections and --max-connections-per-remote must be at least 1"))
	case m.MaxUnauthenticated < 0 || m.MaxUnauthenticated > m.MaxConnections:
		return usageError(fmt.Errorf("--max-unauthenticated-connections %d: want 1 to --max-connections (%d), or 0 for half of it", m.MaxUnauthenticated, m.MaxConnections))
	case m.UnauthenticatedIdle <= 0:
		return usageError(fmt.Errorf("--unauthenticated-idle-timeout must be positive"))
	case m.AdminToken != "" && m.AdminTokenFile != "":
		return usageError(fmt.Errorf("give the admin token by --admin-token or --admin-token-file, not both"))
	case m.Synchronous != "FULL" && m.Synchronous != "NORMAL":
		return usageError(fmt.Errorf("--synchronous must be FULL or NORMAL"))
	case m.LogFormat != "text" && m.LogFormat != "json":
		return usageError(fmt.Errorf("--log-format %q: use text or json", m.LogFormat))
	case m.DataDir == "":
		return usageError(fmt.Errorf("--data must name a directory"))
	}
	if _, err := parseLevel(m.LogLevel); err != nil {
		return usageError(err)
	}
	if err := m.checkTLSFlags(); err != nil {
		return usageError(err)
	}
	m.settleNATS()
	return usageError(m.checkFleetFlags())
}

// defaultNATSListen is the embedded NATS server's client address when a
// fleet is asked for without --nats-listen.
const defaultNATSListen = "127.0.0.1:4222"

// settleNATS decides whether the node runs peer sync: alone (as --nats
// off) unless a flag asks for a fleet: --nats URLs of an external NATS, or
// for the embedded server --nats-listen, --nats-cluster-listen,
// --nats-routes, --nats-secret-file or the NATS TLS files. Alone, the
// node runs no NATS, writes no outbox and keeps no peer sync index, so a
// range costs it about half the CPU; restarted with a fleet's flags it
// joins, and its peers rebuild its part from its dump.
func (m *Main) settleNATS() {
	if m.NATS != "" {
		return
	}
	if m.NATSListen == "" && m.NATSClusterListen == "" && len(m.routes()) == 0 && m.NATSSecretFile == "" && m.natsTLS() == nil {
		m.NATS = "off"
		return
	}
	if m.NATSListen == "" {
		m.NATSListen = defaultNATSListen
	}
}

// checkFleetFlags refuses fleet flags that cannot work together, before
// anything starts.
func (m *Main) checkFleetFlags() error {
	if !leasehold.ValidNodeName(m.Name) {
		return fmt.Errorf("--name %q: a node name is 1–128 of A-Za-z0-9._+- starting with a letter or digit", m.Name)
	}
	if m.StreamMaxAge <= 0 || m.StreamMaxBytes <= 0 {
		return fmt.Errorf("--stream-max-age and --stream-max-bytes must be positive")
	}
	if m.ClaimTTL < time.Second {
		return fmt.Errorf("--claim-ttl must be at least 1s (renewals run at a fraction of it)")
	}
	if t := m.natsTLS(); t != nil && m.NATS != "off" {
		// Read now: a wrong path is one line at start, not a fleet that
		// never joins.
		check := t.Check
		if m.NATS != "" {
			check = t.CheckClient // an external NATS may ask no certificate
		}
		if err := check(); err != nil {
			return err
		}
	}
	if err := m.NATSClient.check(m); err != nil {
		return err
	}
	switch m.NATS {
	case "off":
		if m.NATSSecretFile != "" {
			return fmt.Errorf("--nats-secret-file authenticates to NATS; with --nats off the node uses none")
		}
		if m.natsTLS() != nil {
			return fmt.Errorf("--nats-tls-cert, --nats-tls-key and --nats-tls-ca secure NATS; with --nats off the node uses none")
		}
		return nil
	case "":
	default:
		for _, u := range strings.Split(m.NATS, ",") {
			if !strings.HasPrefix(strings.TrimSpace(u), "nats://") && !strings.HasPrefix(strings.TrimSpace(u), "tls://") {
				return fmt.Errorf("--nats %q: want \"\", \"off\" or nats:// URLs, comma-separated", m.NATS)
			}
		}
		if m.NATSClusterListen != "" || m.NATSRoutes != "" {
			return fmt.Errorf("--nats-cluster-listen and --nats-routes cluster the embedded NATS server; with --nats %s the external NATS does the clustering", m.NATS)
		}
		return m.checkSecret("an external NATS (--nats; or its credentials: --nats-user with --nats-password-file, --nats-nkey-file, --nats-creds-file)")
	}
	if _, _, err := net.SplitHostPort(m.NATSListen); err != nil {
		return fmt.Errorf("--nats-listen %q is not host:port", m.NATSListen)
	}
	if m.NATSClusterListen != "" {
		if _, _, err := net.SplitHostPort(m.NATSClusterListen); err != nil {
			return fmt.Errorf("--nats-cluster-listen %q is not host:port", m.NATSClusterListen)
		}
	}
	routes := m.routes()
	if len(routes) > 0 && m.NATSClusterListen == "" {
		return fmt.Errorf("--nats-routes needs --nats-cluster-listen: this node's server must listen for routes to cluster")
	}
	if _, err := fleet.ParseRoutes(routes); err != nil {
		return err
	}
	switch {
	case m.NATSClusterListen != "" || len(routes) > 0:
		return m.checkSecret("a clustered NATS server (--nats-cluster-listen, --nats-routes)")
	case !loopback(m.NATSListen):
		return m.checkSecret(fmt.Sprintf("a NATS server listening beyond this host (--nats-listen %s)", m.NATSListen))
	}
	return nil
}

// checkSecret is the fleet's secret rule: NATS that can be reached
// beyond this host is never run open by default, since whoever reaches it
// can join the fleet, claim its groups and rewrite its catalog. The
// operator may opt out with --nats-insecure.
func (m *Main) checkSecret(what string) error {
	if m.NATSSecretFile != "" || m.NATSInsecure || m.NATSClient.set() {
		return nil
	}
	return fmt.Errorf("%s needs --nats-secret-file FILE, the fleet's shared secret (make one: head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE), or --nats-insecure to run it open", what)
}

// loopback reports whether addr (host:port) listens on this host only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// routes are the --nats-routes URLs.
func (m *Main) routes() []string {
	var out []string
	for _, r := range strings.Split(m.NATSRoutes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// hostNodeName is the host name as a node name: a host name is nearly
// always one already; anything else becomes '-', so the default never
// refuses to start.
func hostNodeName() string {
	h, _ := os.Hostname()
	b := []byte(h)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '+' || c == '-') {
			b[i] = '-'
		}
	}
	name := strings.TrimLeft(string(b), "._+-")
	if len(name) > 128 {
		name = name[:128]
	}
	if !leasehold.ValidNodeName(name) {
		return "leasehold"
	}
	return name
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
	}
	return l, nil
}

// logHandler writes the node's log to stderr in --log-format.
func (m *Main) logHandler(level slog.Level) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if m.LogFormat == "json" {
		opts.ReplaceAttr = durationsAsText
		return slog.NewJSONHandler(m.stderr, opts)
	}
	return slog.NewTextHandler(m.stderr, opts)
}

// Addr is the address the node listens on, once it does.
func (m *Main) Addr() net.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Ready is closed once the node serves.
func (m *Main) Ready() <-chan struct{} { return m.ready }

// Run serves until ctx ends, then stops taking requests, lets those in
// flight finish, leaves the fleet, flushes the writer and closes the
// catalog: the node's parts are one list, started in order and stopped in
// reverse. A part that stops by itself (peer sync) stops the node with its
// error. An unusable data dir or a fleet that cannot be joined is a usage
// error.
func (m *Main) Run(ctx context.Context) error {
	// SIGHUP never stops a node (its default action would, with no log
	// line): it reloads the TLS files, or says there is nothing to reload.
	// Caught first, so a HUP during start waits for the node to serve.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	m.hup = hup
	level, _ := parseLevel(m.LogLevel)
	// The logger is handed to every part (fleet, appliance, web); none
	// falls back to slog's default, which is left alone. It feeds the
	// dashboard's timeline the lines the fleet marks for it.
	log := slog.New(web.NewTimelineFeed(m.logHandler(level)))

	// Certificates are read first: a wrong path is refused before anything
	// is opened or changed.
	certs, err := m.loadCertificates(log)
	if err != nil {
		return usageError(err)
	}
	// A token given and refused stops the node before anything is made.
	if err := m.givenAdminToken(log); err != nil {
		return usageError(err)
	}
	// One process a data dir (rule 14): the lock comes before the fleet's
	// store, the catalog or the token file is opened.
	lock, err := appliance.LockDataDir(m.DataDir)
	if err != nil {
		return usageError(err)
	}
	defer lock.Release()

	n, err := m.assemble(ctx, log, certs)
	if err != nil {
		return err
	}
	defer n.stopCerts()
	// The parts end by Stop, in reverse, not by the signal: SIGTERM ends
	// the requests first, and peer sync and the catalog only after them.
	if err := n.Start(context.WithoutCancel(ctx)); err != nil {
		return usageError(err)
	}
	close(m.ready)
	defer m.watchSecret(ctx, log, n.peers)()
	select {
	case <-n.Done():
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight")
	n.Stop()
	return m.ended(n, log)
}

// ended is Run's answer once the node's parts have stopped: the error of
// a part that stopped by itself (a fleet that could not join is a usage
// error), else the catalog's close, else the web server's graceful end.
func (m *Main) ended(n *nodeParts, log *slog.Logger) error {
	var joinErr *fleet.JoinError
	switch err := n.Err(); {
	case errors.As(err, &joinErr):
		return usageError(joinErr)
	case err != nil:
		log.Error("the node stopped", "err", err)
		return err
	}
	if err := n.Closed(); err != nil {
		return err
	}
	log.Info("stopped; catalog flushed and closed")
	return n.Web.Err()
}

// nodeParts are a running node's parts (node.Parts), with what serve
// keeps beside them: the watch of the certificate files and the fleet
// for the secret's reload.
type nodeParts struct {
	*node.Parts
	stopCerts func()
	peers     *fleet.Fleet // nil for a node alone
}

// assemble makes the node's parts (node.Assemble) from the flags, and
// says the node is serving. Nothing is started.
func (m *Main) assemble(ctx context.Context, log *slog.Logger, certs *web.Certificates) (*nodeParts, error) {
	metrics := web.NewMetrics()
	metrics.SetBuild(leasehold.Build())
	gate, err := m.newGate(log)
	if err != nil {
		return nil, usageError(err)
	}
	n := &nodeParts{stopCerts: func() {}}
	cfg := node.Config{Appliance: m.applianceConfig(log), Metrics: metrics, ShutdownTimeout: m.ShutdownTimeout,
		Web: func() (web.Options, net.Listener, error) { return m.newWeb(ctx, log, certs, metrics, gate != nil, n) }}
	if gate != nil { // nil runs the node alone
		cfg.Fleet = fleetPart(gate)
	}
	if n.Parts, err = node.Assemble(cfg); err != nil {
		return nil, usageError(err)
	}
	n.peers, _ = n.Fleet.(*fleet.Fleet)
	return n, nil
}

// fleetPart is the node's part in the fleet of gate.
func fleetPart(gate *fleet.Gate) *node.Fleet {
	return &node.Fleet{Gate: gate, New: func(app *appliance.Appliance, db *store.DB) (node.Peers, error) {
		f, err := fleet.New(gate, fleet.Local{DB: db, Coordinator: app.Coordinator, Snapshots: app.Snapshots, MaxAttempts: app.Config.MaxAttempts})
		if err != nil {
			return nil, err // not a nil *Fleet in the interface
		}
		return f, nil
	}}
}

// applianceConfig is the appliance's part of the flags.
func (m *Main) applianceConfig(log *slog.Logger) appliance.Config {
	return appliance.Config{
		DataDir: m.DataDir, LeaseTTL: m.LeaseTTL, MaxAttempts: m.MaxAttempts,
		SnapshotMaxBytes: int64(m.SnapshotMaxBytes), SnapshotMaxExpandedBytes: int64(m.SnapshotMaxExpanded), HistoryMinFreeBytes: int64(m.HistoryMinFreeBytes),
		NodeUnseen: m.NodeUnseen, SnapshotMaxAge: m.SnapshotMaxAge,
		Store:  store.Options{Synchronous: m.Synchronous, NoGroupCommit: m.NoGroupCommit, NoOutbox: m.NATS == "off"},
		Logger: log,
	}
}

// newWeb is the web server's options and its listener (--listen,
// connections limited, TLS when on), and says the node is serving;
// n.stopCerts stops watching the certificate files.
func (m *Main) newWeb(ctx context.Context, log *slog.Logger, certs *web.Certificates, metrics *web.Metrics, peerSync bool, n *nodeParts) (web.Options, net.Listener, error) {
	token, tokenFile, err := m.adminToken()
	if err != nil {
		return web.Options{}, nil, err
	}
	ln, err := net.Listen("tcp", m.Listen)
	if err != nil {
		return web.Options{}, nil, fmt.Errorf("--listen %s: %v", m.Listen, err)
	}
	ln = m.limitConnections(ln, metrics)
	ln, n.stopCerts = m.serveTLS(ctx, log, ln, certs)
	m.mu.Lock()
	m.addr = ln.Addr()
	m.mu.Unlock()
	m.logServing(log, ln.Addr(), tokenFile, peerSync)
	return web.Options{AdminToken: token, AdminTokenFile: tokenFile, Logger: log, WrapFunc: m.wrapHTTP,
		SnapshotUploadTimeout: m.UploadTimeout, TrustedProxies: m.TrustedProxies.list}, ln, nil
}

// logServing says the node serves, and how.
func (m *Main) logServing(log *slog.Logger, addr net.Addr, tokenFile string, peerSync bool) {
	tokenFrom := "--admin-token"
	if tokenFile != "" {
		tokenFrom, _ = filepath.Abs(tokenFile)
	}
	natsURL := "off"
	if peerSync {
		natsURL = "joining"
	}
	serving := []any{"version", leasehold.Build().Version, "revision", leasehold.Build().Short(), "url", m.url(addr), "data", m.DataDir,
		"admin_token", tokenFrom, "lease_ttl", m.LeaseTTL, "synchronous", m.Synchronous, "group_commit", !m.NoGroupCommit,
		"name", m.Name, "nats", natsURL}
	if m.natsAuth != "" {
		serving = append(serving, "nats_auth", m.natsAuth)
	}
	if m.fleetKey != "" {
		serving = append(serving, "fleet_key", m.fleetKey)
	}
	log.Info("leasehold serving", serving...)
	m.warnInClear(log, addr, peerSync)
}

// warnInClear says once at start, as a WARN, what this node serves in
// clear beyond this host: plain HTTP on a non-loopback address (tokens,
// the dashboard's session and backups cross the network readable), and
// NATS routes or client port without TLS (the route handshake carries
// the fleet's secret, and every peer message crosses readable).
func (m *Main) warnInClear(log *slog.Logger, addr net.Addr, peerSync bool) {
	if m.TLSCert == "" && !loopback(addr.String()) {
		log.Warn("serving plain HTTP on a non-loopback address: tokens, the dashboard's session and backups cross the network in clear; give --tls-cert and --tls-key, or serve on 127.0.0.1 behind a reverse proxy that ends TLS",
			"listen", addr.String())
	}
	if !peerSync || m.natsTLS() != nil {
		return
	}
	var clear []string
	if m.NATSClusterListen != "" && !loopback(m.NATSClusterListen) {
		clear = append(clear, "--nats-cluster-listen "+m.NATSClusterListen)
	}
	for _, r := range m.routes() {
		if u, err := url.Parse(r); err == nil && !loopback(u.Host) {
			clear = append(clear, "--nats-routes "+r)
		}
	}
	if m.NATS == "" && m.NATSListen != "" && !loopback(m.NATSListen) {
		clear = append(clear, "--nats-listen "+m.NATSListen)
	}
	if len(clear) > 0 {
		log.Warn("fleet NATS in clear on a non-loopback address: the routes' handshake carries the fleet's secret and every peer message crosses the network readable; give --nats-tls-cert, --nats-tls-key and --nats-tls-ca",
			"in_clear", strings.Join(clear, ", "))
	}
}

// natsTLS is the node's NATS TLS files, nil without any of the flags.
func (m *Main) natsTLS() *fleet.TLS {
	if m.NATSTLSCert == "" && m.NATSTLSKey == "" && m.NATSTLSCA == "" {
		return nil
	}
	return &fleet.TLS{CertFile: m.NATSTLSCert, KeyFile: m.NATSTLSKey, CAFile: m.NATSTLSCA}
}

// adminTokenMin is the shortest admin token taken: a guessable one
// protects nothing.
const adminTokenMin = 16

// givenAdminToken reads the admin token given by --admin-token (or its
// variable) or --admin-token-file, and refuses one under adminTokenMin
// bytes; "" when none is given (the data dir's admin.token is used).
func (m *Main) givenAdminToken(log *slog.Logger) error {
	switch {
	case m.AdminToken != "":
		m.adminTokenValue = m.AdminToken
	case m.AdminTokenFile != "":
		b, err := os.ReadFile(m.AdminTokenFile)
		if err != nil {
			return fmt.Errorf("--admin-token-file: %w", err)
		}
		// Its directory is checked at the start, not only at a rotation:
		// a token file another user could have replaced is not taken.
		if err := appliance.CheckTokenDir(m.AdminTokenFile); err != nil {
			return fmt.Errorf("--admin-token-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		m.adminTokenValue = strings.TrimSpace(line)
		if fi, err := os.Stat(m.AdminTokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the admin token file can be read by other users: chmod 600 it", "file", m.AdminTokenFile, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
		}
	default:
		return nil
	}
	if err := checkAdminToken(m.adminTokenValue); err != nil {
		return err
	}
	// Taken, but every user of the host has read it in ps.
	if m.adminTokenInArgs {
		log.Warn("the admin token was given on the command line, where ps shows it to every user on this host: give it by --admin-token-file (0600), or LEASEHOLD_ADMIN_TOKEN in the environment",
			"flag", "--admin-token")
	}
	return nil
}

// setInArgs reports whether args, as serve's flags parse them, set the
// flag name: ParseFlags has read the environment into the same flags
// first, so their own record does not tell the two apart. Called once
// args have parsed.
func setInArgs(args []string, name string) bool {
	fs := NewMain(io.Discard, io.Discard).flagSet()
	fs.SetOutput(io.Discard)
	if fs.Parse(args) != nil {
		return false
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func checkAdminToken(token string) error {
	if len(token) < adminTokenMin {
		return fmt.Errorf("the admin token is %d bytes, want at least %d (for example: head -c 32 /dev/urandom | base64 > admin.token, then --admin-token-file admin.token)",
			len(token), adminTokenMin)
	}
	return nil
}

// adminToken is the node's admin token and the file it is kept in ("" when
// given by --admin-token or its variable): the one givenAdminToken read,
// or <data>/admin.token, made there on first start.
func (m *Main) adminToken() (token, file string, err error) {
	switch {
	case m.AdminToken != "":
		return m.adminTokenValue, "", nil
	case m.AdminTokenFile != "":
		return m.adminTokenValue, m.AdminTokenFile, nil
	}
	file = filepath.Join(m.DataDir, "admin.token")
	if token, err = appliance.AdminToken(m.DataDir, ""); err != nil {
		return "", "", err
	}
	return token, file, checkAdminToken(token)
}

// limitConnections caps the HTTP listener's connections, at once, per
// remote address and those that have shown no token yet
// (--max-connections, --max-connections-per-remote,
// --max-unauthenticated-connections). It wraps the plain TCP listener:
// TLS, when on, goes around it.
func (m *Main) limitConnections(ln net.Listener, metrics *web.Metrics) net.Listener {
	unauth := m.MaxUnauthenticated
	if unauth == 0 {
		unauth = web.DefaultMaxUnauthenticated(m.MaxConnections)
	}
	return web.LimitConnectionsBudget(ln, web.ConnectionLimits{Total: m.MaxConnections, PerRemote: m.MaxConnsPerRemote,
		Unauthenticated: unauth, UnauthenticatedIdle: m.UnauthenticatedIdle}, metrics)
}

// natsSecretMin is the shortest fleet secret taken: a guessable one
// protects nothing.
const natsSecretMin = 16

// natsSecret reads the fleet's secret from --nats-secret-file: its first
// line, without surrounding spaces ("" without the flag); the lines after
// it, secrets accepted too while the secret rolls, go to natsSecretAlso.
func (m *Main) natsSecret(log *slog.Logger) (string, error) {
	if m.NATSSecretFile == "" {
		return "", nil
	}
	secret, also, err := readSecretFile(m.NATSSecretFile)
	if err != nil {
		return "", err
	}
	m.natsSecretAlso = also
	if fi, err := os.Stat(m.NATSSecretFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the NATS secret file can be read by other users: chmod 600 it", "file", m.NATSSecretFile, "mode", fi.Mode().Perm().String())
	}
	return secret, nil
}

// newGate is the gate of the node's fleet, not joined yet; nil with
// --nats off.
func (m *Main) newGate(log *slog.Logger) (*fleet.Gate, error) {
	if m.NATS == "off" {
		return nil, nil
	}
	secret, err := m.natsSecret(log)
	if err != nil {
		return nil, err
	}
	// The embedded server never takes clients unauthenticated: without the
	// fleet's secret it asks for the node's own token (the node is its
	// only client), made on the first start as admin.token is.
	var token string
	switch {
	case secret != "":
		m.natsAuth = "--nats-secret-file " + m.NATSSecretFile
	case m.NATSClient.set():
	case m.NATS == "":
		if token, err = fleet.LocalSecret(m.DataDir); err != nil {
			return nil, err
		}
		m.natsAuth, _ = filepath.Abs(filepath.Join(m.DataDir, fleet.LocalSecretFile))
		if m.NATSClusterListen != "" {
			m.natsAuth += ", routes open (--nats-insecure)"
		}
	default:
		m.natsAuth = "none (--nats-insecure)"
	}
	auth, from, err := m.NATSClient.auth(log)
	if err != nil {
		return nil, err
	}
	if from != "" {
		m.natsAuth = from
	}
	if m.natsTLS() != nil {
		m.natsAuth += ", TLS"
	}
	if m.ClaimTTL < fleet.ClaimTTLFloor {
		log.Warn("a claim TTL this short lets a leader election in the fleet's streams and buckets (4-9 s, when a node dies or is cut off) cost this node its claims; it wins them back after", "claim_ttl", m.ClaimTTL, "floor", fleet.ClaimTTLFloor)
	}
	gate, err := fleet.NewGate(fleet.Config{
		Name: m.Name, NATS: m.NATS, Listen: m.NATSListen, ClusterListen: m.NATSClusterListen, Secret: secret, SecretAlso: m.natsSecretAlso,
		ClientToken: token, Auth: auth, Replicas: m.NATSClient.Replicas, TLS: m.natsTLS(), Routes: m.routes(), Dir: filepath.Join(m.DataDir, "nats"), ClaimTTL: m.ClaimTTL,
		StreamMaxAge: m.StreamMaxAge, StreamMaxBytes: int64(m.StreamMaxBytes), Logger: log, DataDir: m.DataDir, Roster: m.FleetRoster, AcceptUnsigned: m.FleetAcceptUnsigned,
	})
	if err != nil {
		return nil, err
	}
	m.fleetKey = gate.PublicKey()
	return gate, nil
}

// byteSize is a flag of bytes: a plain number or one with a unit.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
}

func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size in bytes (like 1048576, 512MiB or 64GiB)", s)
	}
	return v * mult, nil
}
