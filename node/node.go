// Package node assembles a leasehold node from its parts, in the one
// order `leasehold serve` and the tests both use: the fleet's gate first,
// then the catalog and the appliance over it, the fleet over the
// appliance, and the web server over them. Each part is given what it
// calls at its making; nothing runs until Parts.Start.
//
// It names no fleet type: the fleet comes as a gate and a constructor
// (Fleet), so the fleet's own tests assemble their nodes here too.
package node

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/web"
)

// Config is what a node is assembled from.
type Config struct {
	// Appliance is the node's behaviour. Assemble gives it the fleet's
	// gate (Fleet), and the metrics as its Recorder and its store's batch
	// observer when those are unset.
	Appliance appliance.Config
	// Metrics count what the node does; nil makes new ones.
	Metrics *web.Metrics
	// Fleet is the node's part in its fleet; nil runs the node alone.
	Fleet *Fleet
	// Web gives the web server's options and its listener, once the
	// appliance and the fleet are made (the catalog's opening has made
	// the data dir, where an admin token may be kept). Assemble sets the
	// options' Metrics, and Peers and Members in a fleet. Nil assembles a
	// node without HTTP.
	Web func() (web.Options, net.Listener, error)
	// ShutdownTimeout bounds how long Stop lets requests in flight finish.
	ShutdownTimeout time.Duration
}

// Fleet is a node's part in its fleet. Gate, made first from the fleet's
// config, is given to the appliance (appliance.Config.Fleet) and answers
// "not joined" until the fleet New makes over the open appliance has
// joined: fleet.NewGate and fleet.New make the two.
type Fleet struct {
	Gate appliance.Fleet
	New  func(app *appliance.Appliance, db *store.DB) (Peers, error)
}

// Peers is the fleet as the node runs it: a service started after the
// appliance and before the web server, which asks it for the fleet's
// status and removes and approves its members through it.
type Peers interface {
	service.Service
	web.Members
	Peers(ctx context.Context) (leasehold.FleetStatus, error)
	// Collector is the fleet's metrics, served with the node's.
	Collector() prometheus.Collector
}

// Parts are an assembled node: a service (service.Service) that starts
// the fleet, then the web server, and stops them in reverse, then closes
// the catalog, which every part reads and writes through.
type Parts struct {
	App     *appliance.Appliance
	DB      *store.DB    // the catalog, which App owns and closes
	Fleet   Peers        // nil for a node alone
	Web     *web.Serving // nil for a node without HTTP
	Metrics *web.Metrics

	list *service.List
}

// Assemble makes a node's parts from cfg, each given what it works with
// at its making; nothing is started. On an error nothing is left open.
// Errors: the catalog's (invalid config, unavailable, no space), the
// fleet's, cfg.Web's.
func Assemble(cfg Config) (*Parts, error) {
	p := &Parts{Metrics: cfg.Metrics}
	if p.Metrics == nil {
		p.Metrics = web.NewMetrics()
	}
	appCfg := cfg.Appliance
	if appCfg.Recorder == nil {
		appCfg.Recorder = p.Metrics
	}
	if appCfg.Store.BatchFunc == nil {
		appCfg.Store.BatchFunc = p.Metrics.ObserveBatch
	}
	if cfg.Fleet != nil { // a nil gate in the interface would not read as alone
		appCfg.Fleet = cfg.Fleet.Gate
	}
	db, err := appliance.OpenCatalog(appCfg)
	if err != nil {
		return nil, err
	}
	if p.App, err = appliance.New(appCfg, db); err != nil {
		return nil, err
	}
	p.DB = db
	var parts []service.Part
	if cfg.Fleet != nil {
		if p.Fleet, err = cfg.Fleet.New(p.App, db); err != nil {
			p.App.Close()
			return nil, err
		}
		p.Metrics.Register(p.Fleet.Collector())
		parts = append(parts, service.Part{Name: "fleet", Service: p.Fleet})
	}
	if cfg.Web != nil {
		opts, ln, err := cfg.Web()
		if err != nil {
			p.App.Close()
			return nil, err
		}
		opts.Metrics = p.Metrics
		if p.Fleet != nil {
			opts.Peers, opts.Members = p.Fleet.Peers, p.Fleet
		}
		p.Web = web.New(DoorsOf(p.App), opts).On(ln, cfg.ShutdownTimeout)
		parts = append(parts, service.Part{Name: "web", Service: p.Web})
	}
	p.list = service.NewList(parts...)
	return p, nil
}

// DoorsOf are the doors of app that the web server calls through.
func DoorsOf(app *appliance.Appliance) web.Doors {
	return web.Doors{Holders: app.Coordinator, Admin: app.Coordinator, Snapshots: app.Snapshots, Reads: app, Watchman: app.Watchman, Config: app.Config}
}

// Start starts the fleet, then the web server, under ctx. When a part
// refuses to start, those started before it are stopped, and what the
// node holds from its making (the web server's listener, the catalog) is
// let go: the node is done with. Errors: service.ErrStarted, a part's,
// named.
func (p *Parts) Start(ctx context.Context) error {
	err := p.list.Start(ctx)
	if err == nil || err == service.ErrStarted { // the list's own: it runs
		return err
	}
	if p.Web != nil {
		p.Web.Stop() // its listener, when it never served
	}
	p.App.Close()
	return err
}

// Stop stops the web server (requests in flight finish within the
// shutdown timeout), then the fleet, then flushes the writer and closes
// the catalog; the catalog's close error is Closed's. It is safe twice.
func (p *Parts) Stop() {
	p.list.Stop()
	p.App.Close()
}

// Done is closed once a part has ended by itself, or Stop was called.
func (p *Parts) Done() <-chan struct{} { return p.list.Done() }

// Err is the error of the part that ended by itself, named; nil after a
// Stop.
func (p *Parts) Err() error { return p.list.Err() }

// Closed is the catalog's close error, once stopped: a flush that failed.
func (p *Parts) Closed() error { return p.App.Close() }
