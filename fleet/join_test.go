package fleet

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/store"
)

// openApp opens a node's catalog and its appliance over it, as
// cmd/leasehold does, and returns both: the fleet's tests read and write
// the catalog as the fleet does.
func openApp(cfg appliance.Config) (*appliance.Appliance, *store.DB, error) {
	db, err := appliance.OpenCatalog(cfg)
	if err != nil {
		return nil, nil, err
	}
	app, err := appliance.New(cfg, db)
	return app, db, err
}

// joinNode opens a node's appliance under its fleet's gate, starts its
// fleet and waits until it has joined, as cmd/leasehold does.
func joinNode(ctx context.Context, appCfg appliance.Config, cfg Config) (*appliance.Appliance, *store.DB, *Fleet, error) {
	gate, err := NewGate(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	appCfg.Fleet = gate
	app, db, err := openApp(appCfg)
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := New(gate, Node{DB: db, Coordinator: app.Coordinator, Snapshots: app.Snapshots, MaxAttempts: app.Config.MaxAttempts})
	if err == nil {
		err = f.Start(ctx)
	}
	if err == nil {
		select {
		case <-f.Joined():
			return app, db, f, nil
		case <-f.Done():
			err = cmp.Or(f.Err(), errors.New("the fleet ended before it joined"))
		}
	}
	if f != nil {
		f.Stop()
	}
	app.Close()
	return nil, nil, nil, err
}

// ownFleet is the appliance.Fleet of a node whose claims a test wires by
// hand: its Ownership, once made. Before that it holds no claim and lets
// admin writes through, so a test can set up each node's catalog as its
// own first.
type ownFleet struct{ own atomic.Pointer[Ownership] }

func (f *ownFleet) Holds(group string) (uint64, bool) {
	if o := f.own.Load(); o != nil {
		return o.Holds(group)
	}
	return 0, false
}

func (f *ownFleet) Want(group string) {
	if o := f.own.Load(); o != nil {
		o.Want(group)
	}
}

func (f *ownFleet) ClaimNow(ctx context.Context, groups []string) bool {
	o := f.own.Load()
	return o != nil && o.ClaimNow(ctx, groups)
}

func (f *ownFleet) Ensure(ctx context.Context, group string) error {
	if o := f.own.Load(); o != nil {
		return o.Ensure(ctx, group)
	}
	return nil
}

func (f *ownFleet) Idle() {
	if o := f.own.Load(); o != nil {
		o.Idle()
	}
}

func (f *ownFleet) Forward(context.Context, string, appliance.AdminOp) (appliance.AdminResult, error) {
	return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "no admin forwarding in this test")
}

func (f *ownFleet) Ready() error { return nil }
