package peers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/service"
)

// adminTimeout bounds a carried admin write: the owner answers once its
// write is durable.
const adminTimeout = 30 * time.Second

// adminAnswer is an owner's answer to a carried admin write.
type adminAnswer struct {
	Result appliance.AdminResult `json:"result"`
	Kind   leasehold.Kind        `json:"kind,omitempty"`
	Error  string                `json:"error,omitempty"`
}

// Admin answers admin writes other nodes carry here (AdminSubjectPrefix +
// node), on groups this node owns, and carries this node's writes on
// peers' groups to their owners.
type Admin struct {
	nc    *nats.Conn
	coord *appliance.Coordinator
	node  string
	log   *slog.Logger

	mu  sync.Mutex
	sub *nats.Subscription

	// The service's context is the answers' lifetime; Stop waits for
	// the answers in flight and refuses those that come after.
	service.Base
}

// NewAdmin is node's admin forwarder: once started it answers carried
// admin writes for node; its Forward carries this node's own writes on
// peers' groups (the fleet's Forward), started or not.
func NewAdmin(nc *nats.Conn, coord *appliance.Coordinator, node string, log *slog.Logger) *Admin {
	return &Admin{nc: nc, coord: coord, node: node, log: log}
}

// Start answers carried admin writes until ctx ends or Stop; the writes
// being applied then are cancelled. Errors: conflict when started
// already, unavailable when the subscription cannot be made.
func (a *Admin) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.Begin(ctx); err != nil {
		return leasehold.Errorf(leasehold.KindConflict, "the admin forwarder of %q is started already", a.node)
	}
	sub, err := a.nc.Subscribe(AdminSubjectPrefix+a.node, a.receive)
	if err != nil {
		a.Base.Stop()
		return leasehold.Wrap(leasehold.KindUnavailable, err, "answering admin writes: %v", err)
	}
	a.sub = sub
	return nil
}

// Stop stops answering: writes being applied are cancelled (and answered
// so) and waited for.
func (a *Admin) Stop() {
	a.mu.Lock()
	sub := a.sub
	a.sub = nil
	a.mu.Unlock()
	if sub != nil {
		sub.Unsubscribe()
	}
	a.Base.Stop()
}

// receive answers m in the background: the subscription's callbacks run
// one at a time, and a write waits on the catalog's writer.
func (a *Admin) receive(m *nats.Msg) {
	if !a.Go(func(ctx context.Context) error { a.answer(ctx, m); return nil }) {
		// Stop came between the message and its callback.
		b, _ := json.Marshal(adminAnswer{Kind: leasehold.KindUnavailable, Error: "node " + a.node + " is leaving the fleet"})
		m.Respond(b)
	}
}

func (a *Admin) answer(ctx context.Context, m *nats.Msg) {
	var op appliance.AdminOp
	var ans adminAnswer
	if err := json.Unmarshal(m.Data, &op); err != nil {
		ans.Kind, ans.Error = leasehold.KindInvalid, "admin write is not JSON: "+err.Error()
	} else {
		ctx, cancel := context.WithTimeout(ctx, adminTimeout)
		res, err := a.coord.ApplyAdmin(ctx, op)
		cancel()
		ans.Result = res
		if err != nil {
			ans.Kind, ans.Error = leasehold.ErrorKind(err), leasehold.ErrorMessage(err)
		}
	}
	b, _ := json.Marshal(ans)
	if err := m.Respond(b); err != nil {
		a.log.Warn("peers: answering a carried admin write", "op", op.Op, "group", op.Group, "err", err)
	}
}

// Forward carries op to origin and answers with origin's answer, its error
// kind kept, so the caller here sees what a caller there would.
func (a *Admin) Forward(ctx context.Context, origin string, op appliance.AdminOp) (appliance.AdminResult, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return appliance.AdminResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	m, err := a.nc.RequestWithContext(ctx, AdminSubjectPrefix+origin, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "group %q is owned by node %q, which cannot be reached now", op.Group, origin)
		}
		return appliance.AdminResult{}, leasehold.Wrap(leasehold.KindUnavailable, err, "carrying the write on group %q to its owner %q: %v", op.Group, origin, err)
	}
	var ans adminAnswer
	if err := json.Unmarshal(m.Data, &ans); err != nil {
		return appliance.AdminResult{}, leasehold.Wrap(leasehold.KindUnavailable, err, "owner %q answered garbage: %v", origin, err)
	}
	if ans.Kind != "" {
		return ans.Result, leasehold.Errorf(ans.Kind, "%s", ans.Error)
	}
	return ans.Result, nil
}
