package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/service"
)

// adminTimeout bounds a carried admin write: the owner answers once its
// write is durable.
const adminTimeout = 30 * time.Second

// adminAnswer is an owner's answer to a carried admin write.
type adminAnswer struct {
	Result appliance.AdminResult `json:"result"`
	Kind   leasehold.ErrorKind   `json:"kind,omitempty"`
	Error  string                `json:"error,omitempty"`
}

// Admin answers admin writes other nodes carry here (AdminSubjectPrefix +
// node), on groups this node owns, and carries this node's writes on
// peers' groups to their owners.
type Admin struct {
	nc    *nats.Conn
	coord AdminApplier
	node  string
	// lifeFunc is this node's life now, named on the writes it carries.
	lifeFunc func() string
	log      *slog.Logger
	// yielder, if not nil, answers a peer's ask to hand a group over
	// (Ownership.Yield); without it the ask is refused.
	yielder Yielder
	// id signs the writes carried from here; ring checks those carried
	// here: a write not signed by a node the fleet knows is refused, and
	// the sender it names is its signer.
	id   *Identity
	ring *Keyring

	mu  sync.Mutex
	sub *nats.Subscription

	// The service's context is the answers' lifetime; Stop waits for
	// the answers in flight and refuses those that come after.
	service.Base
}

// AdminApplier applies the admin writes peers carry here, on groups this
// node owns: *appliance.Coordinator is one.
type AdminApplier interface {
	ApplyAdmin(ctx context.Context, op appliance.AdminOp) (appliance.AdminResult, error)
}

// Headers a carried admin write names its sender by, for the owner's log.
// The node is its signer's (the write is refused otherwise); the life is
// what the sender says of itself.
const (
	adminNodeHeader = "Leasehold-Node"
	adminLifeHeader = "Leasehold-Life"
)

// NewAdmin is node's admin forwarder: once started it answers carried
// admin writes for node; its Forward carries this node's own writes on
// peers' groups (the fleet's Forward), started or not, naming node and
// its life (lifeFunc, nil for none).
func NewAdmin(nc *nats.Conn, coord AdminApplier, yielder Yielder, node string, lifeFunc func() string, log *slog.Logger) *Admin {
	if lifeFunc == nil {
		lifeFunc = func() string { return "" }
	}
	return &Admin{nc: nc, coord: coord, yielder: yielder, node: node, lifeFunc: lifeFunc, log: log, id: ephemeralIdentity(node), ring: memoryKeyring(log)}
}

// Yielder answers a peer's ask to hand a group over: *Ownership is one.
type Yielder interface {
	Yield(ctx context.Context, group, to string) error
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
	signer, serr := a.ring.VerifyMsg(m.Subject, m.Header, m.Data, m.Header.Get(adminNodeHeader))
	if serr == nil && m.Header.Get(adminNodeHeader) != signer {
		serr = refused(refusedWrongOrigin, signer, "node %q's write names node %q as its sender", signer, m.Header.Get(adminNodeHeader))
	}
	if serr == nil && json.Unmarshal(m.Data, &op) == nil && op.Op == opYield && op.Node != signer {
		serr = refused(refusedWrongOrigin, signer, "node %q asks for group %q for node %q", signer, op.Group, op.Node)
	}
	if serr != nil {
		a.ring.refuse("admin", m.Subject, serr)
		b, _ := json.Marshal(adminAnswer{Kind: leasehold.KindForbidden, Error: "refused: not signed by a node of the fleet: " + serr.Error()})
		m.Respond(b)
		return
	}
	if err := json.Unmarshal(m.Data, &op); err != nil {
		ans.Kind, ans.Error = leasehold.KindInvalid, "admin write is not JSON: "+err.Error()
	} else if op.Op == opYield {
		// Not an operator's write: asked about once a second per group an
		// idle worker waits for, so only a handover is logged (by Yield).
		err := leasehold.Errorf(leasehold.KindInvalid, "node %s hands no group over", a.node)
		if a.yielder != nil {
			ctx, cancel := context.WithTimeout(ctx, adminTimeout)
			err = a.yielder.Yield(ctx, op.Group, op.Node)
			cancel()
		}
		if err != nil {
			ans.Kind, ans.Error = leasehold.KindOf(err), leasehold.ErrorMessage(err)
			a.log.Debug("ownership: a group kept from a peer that asked for it", "group", op.Group, "peer", op.Node, "why", ans.Error)
		}
		b, _ := json.Marshal(ans)
		if err := m.Respond(b); err != nil {
			a.log.Warn("peers: answering an ask for a group", "group", op.Group, "err", err)
		}
		return
	} else {
		ctx, cancel := context.WithTimeout(ctx, adminTimeout)
		res, err := a.coord.ApplyAdmin(ctx, op)
		cancel()
		ans.Result = res
		if err != nil {
			ans.Kind, ans.Error = leasehold.KindOf(err), leasehold.ErrorMessage(err)
		}
	}
	a.audit(m, op, ans)
	b, _ := json.Marshal(ans)
	if err := m.Respond(b); err != nil {
		a.log.Warn("peers: answering a carried admin write", "op", op.Op, "group", op.Group, "err", err)
	}
}

// audit logs a carried admin write as the web logs one made over HTTP
// ("admin write"): what it asked, how it was answered, and the peer that
// says it sent it. The op's name and the group are the sender's words,
// logged as values (quoted by the handler), never as keys.
func (a *Admin) audit(m *nats.Msg, op appliance.AdminOp, ans adminAnswer) {
	peer, life := "", ""
	if m.Header != nil {
		peer, life = m.Header.Get(adminNodeHeader), m.Header.Get(adminLifeHeader)
	}
	args := []any{"via", "nats", "subject", m.Subject, "op", op.Op, "group", op.Group,
		"peer", cmp.Or(peer, "unnamed"), "life", life}
	if op.High != 0 {
		args = append(args, "high", op.High)
	}
	if op.Low != 0 {
		args = append(args, "low", op.Low)
	}
	if op.Start != 0 {
		args = append(args, "start", op.Start)
	}
	if ans.Kind != "" {
		args = append(args, "kind", ans.Kind, "err", ans.Error)
		a.log.Warn("admin write", args...)
		return
	}
	a.log.Info("admin write", args...)
}

// Forward carries op to origin and answers with origin's answer, its error
// kind kept, so the caller here sees what a caller there would.
func (a *Admin) Forward(ctx context.Context, origin string, op appliance.AdminOp) (appliance.AdminResult, error) {
	return a.carrier().Forward(ctx, origin, op)
}

// carrier is the admin forwarder's carrying side alone: what asks a
// peer, needing nothing of what answers here, so ownership can ask with
// it while the forwarder answers with ownership.
func (a *Admin) carrier() Carrier {
	return Carrier{nc: a.nc, node: a.node, lifeFunc: a.lifeFunc, id: a.id}
}

// Carrier carries this node's writes on peers' groups to their owners,
// naming node and its life.
type Carrier struct {
	nc       *nats.Conn
	node     string
	lifeFunc func() string
	id       *Identity // signs each write carried
}

// NewCarrier is node's carrier on nc; lifeFunc (nil for none) is its life now.
func NewCarrier(nc *nats.Conn, node string, lifeFunc func() string) Carrier {
	if lifeFunc == nil {
		lifeFunc = func() string { return "" }
	}
	return Carrier{nc: nc, node: node, lifeFunc: lifeFunc, id: ephemeralIdentity(node)}
}

// Forward carries op to origin, the owner of op's group. Errors: origin's,
// unavailable.
func (a Carrier) Forward(ctx context.Context, origin string, op appliance.AdminOp) (appliance.AdminResult, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return appliance.AdminResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	req := nats.NewMsg(AdminSubjectPrefix + origin)
	req.Data = b
	req.Header.Set(adminNodeHeader, a.node)
	req.Header.Set(adminLifeHeader, a.lifeFunc())
	a.id.SignMsg(req)
	m, err := a.nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) && op.Group == "" {
			// A write on a worker node (carried to its home) names no group.
			return appliance.AdminResult{}, leasehold.Errorf(leasehold.KindUnavailable, "node %q cannot be reached now", origin)
		}
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
