package peers

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"leasehold"
	"leasehold/appliance"
)

// Config is how a node joins its fleet.
type Config struct {
	// Name is this node's fleet name, unique in the fleet.
	Name string
	// NATS is empty for the embedded server, or the URL(s) of an external
	// NATS, comma-separated.
	NATS string
	// Listen is the embedded server's client address (host:port; port 0
	// picks one).
	Listen string
	// ClusterListen and Routes cluster the embedded servers of several
	// nodes; empty runs it standalone.
	ClusterListen string
	Routes        []string
	// Dir is where the embedded server keeps JetStream (<data>/nats).
	Dir string
	// ClaimTTL is how long an ownership claim lasts unrenewed.
	ClaimTTL time.Duration
	Logger   *slog.Logger
}

// Fleet is this node's part in a fleet: the embedded server if any, the
// connection, the publisher, the fold, the claims and the snapshots.
type Fleet struct {
	cfg Config
	app *appliance.Appliance
	log *slog.Logger
}

// Join starts the embedded server (or connects to the external NATS) and
// sets up the stream, buckets and claims. Errors: invalid config,
// unavailable NATS.
func Join(ctx context.Context, app *appliance.Appliance, cfg Config) (*Fleet, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Fleet{cfg: cfg, app: app, log: cfg.Logger}, nil
}

// Run publishes, folds and keeps claims until ctx ends.
func (f *Fleet) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Close stops everything Join started.
func (f *Fleet) Close() error { return nil }

// ClientURL is where NATS clients of this node connect.
func (f *Fleet) ClientURL() string { return "" }

// Peers lists the other nodes of the fleet.
func (f *Fleet) Peers(ctx context.Context) (leasehold.FleetStatus, error) {
	return leasehold.FleetStatus{Name: f.cfg.Name, Enabled: true}, nil
}

// Collectors are the fleet's metrics.
func (f *Fleet) Collectors() []prometheus.Collector { return nil }
