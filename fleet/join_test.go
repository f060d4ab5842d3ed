package fleet

import (
	"context"
	"sync/atomic"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

// joinNode opens a node's appliance under its fleet part and joins it, as
// cmd/leasehold does.
func joinNode(ctx context.Context, appCfg appliance.Config, cfg Config) (*appliance.Appliance, *Fleet, error) {
	f, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	appCfg.Fleet = f
	app, err := appliance.Open(appCfg)
	if err != nil {
		return nil, nil, err
	}
	if err := f.Join(ctx, app); err != nil {
		f.Close()
		app.Close()
		return nil, nil, err
	}
	return app, f, nil
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

func (f *ownFleet) Idle(node int64) {
	if o := f.own.Load(); o != nil {
		o.Idle(node)
	}
}

func (f *ownFleet) Forward(context.Context, string, appliance.AdminOp) (appliance.AdminResult, error) {
	return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "no admin forwarding in this test")
}

func (f *ownFleet) Ready() error { return nil }
