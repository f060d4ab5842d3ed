package fleet

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/store"
)

// Ownership puts this node's claims in charge of what its workers lease. A
// group is leased here only while Claims holds its claim (asked from
// memory at every lease, so a node cut off from NATS stops on time); a
// group chosen without a claim is disowned in the catalog and its claim
// tried in the background: won, the group is owned again and leased at the
// next lease; taken by another node, it stays disowned. A lost claim
// disowns its group at once, ending a lease held here.
//
// Claims are made lazily, for the groups workers here actually reach, and
// cost nothing to keep (the node's life stands for all of them); idle
// ones are let go (Keep) so peers whose workers want them can claim them.
type Ownership struct {
	owner    Owner
	db       *store.DB
	claims   *Claims
	keeper   *Keeper
	adoption Adoption
	every    time.Duration
	log      *slog.Logger

	wanted chan string   // groups to claim, from leases
	idle   chan struct{} // a lease found nothing

	// The service's context bounds the disowning of lost groups, which
	// runs in a goroutine of its own, not in whoever lost them.
	service.Base

	mu sync.Mutex
	// lost are the groups whose claims were lost, to disown; disowning is
	// set while a goroutine does.
	lost      []string
	disowning bool
	// idleNodes are the worker nodes whose leases found nothing since the
	// last offer; asked the groups in their bands peers leave unleased.
	idleNodes map[int64]bool
	// asked is when each group was last asked of its owner.
	asked map[string]time.Time

	// asker, if not nil, asks the owner of a group to hand it over
	// (Carrier.AskYield).
	asker Asker
	// orphans, if not nil, names the groups of members found down, taken
	// over at once (takeover.go); behind are those won but not adoptable
	// yet, tried again at the next pass.
	orphans Orphans
	behind  map[string]bool
}

// Asker asks a group's owner to hand it over to this node: a Carrier is
// one.
type Asker interface {
	AskYield(ctx context.Context, owner, group string) error
}

// Owner makes groups this node's in the catalog as their claims are won,
// and not as they are lost: *appliance.Coordinator is one.
type Owner interface {
	// Own owns group under its claim's revision, if the claim is still
	// held at it.
	Own(ctx context.Context, group string, claimRev uint64) error
	// Disown stops this node leasing groups, passing over those unless
	// answers true for.
	Disown(ctx context.Context, groups []string, unless func(group string) bool) error
}

// Adoption is what is done with a group whose claim was won before it is
// owned here, and whether an idle group's claim may be let go: the fleet
// brings in the newest replicated snapshot of a peer's group, and lets a
// claim go only once everything of its group has left this node.
type Adoption interface {
	// Adopt is called with a won group before it is owned. ErrBehind lets
	// the claim go, to be tried again later; another error is logged and
	// the group owned all the same (adoption plans the window's ranges
	// again).
	Adopt(ctx context.Context, group string) error
	// Settled says whether everything of group has left this node (events
	// published, newest snapshot replicated).
	Settled(ctx context.Context, group string) bool
}

// OwnershipConfig is what ownership works with, given at NewOwnership.
type OwnershipConfig struct {
	Owner  Owner
	DB     *store.DB
	Claims *Claims
	// Keeper is the claims' Keeper: ownership tells it of claims won.
	Keeper *Keeper
	// Adoption, if set, adopts won groups (nil adopts nothing).
	Adoption Adoption
	// Asker, if set, asks peers to hand over groups idle workers here
	// could lease (see spread); nil asks nothing.
	Asker Asker
	// Orphans, if set, names the groups of members found down, which are
	// taken over at once (see takeover.go); nil leaves them to idle
	// workers' offers.
	Orphans Orphans
	// Every is how often, at most, an idle node offers disowned groups'
	// claims.
	Every  time.Duration
	Logger *slog.Logger
}

// ErrBehind is adopt's answer when this node has not yet folded all the
// group's last owner published (owning it now would publish an older state
// over a newer one), or cannot read its replicated window now (owning it
// without would lose the window's ids). The claim is released and tried
// again later.
var ErrBehind = errors.New("not caught up with the group's owner yet")

// ownershipWanted bounds the groups waiting for a claim; more are dropped
// and offered again by the periodic pass over disowned groups.
const ownershipWanted = 1024

// LogGroupTakenOver is the message of the log line a node writes when it
// takes a group over from a peer: the operator's record of an ownership
// change, and the fault harness reads ownership changes that grant no
// lease from it.
const LogGroupTakenOver = "ownership: group taken over from a peer"

// NewOwnership is ownership over cfg's claims; give the same Keeper to
// the claims (ClaimsConfig.Keeper). It takes the claims' losses (Losses)
// once started.
func NewOwnership(cfg OwnershipConfig) *Ownership {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Keeper == nil {
		cfg.Keeper = NewKeeper(cfg.DB, cfg.Every, nil)
	}
	return &Ownership{owner: cfg.Owner, db: cfg.DB, claims: cfg.Claims, keeper: cfg.Keeper, adoption: cfg.Adoption, asker: cfg.Asker, orphans: cfg.Orphans, every: cfg.Every,
		log: cfg.Logger, wanted: make(chan string, ownershipWanted), idle: make(chan struct{}, 1)}
}

// Holds is the fleet's answer to a holder call and a lease, from memory:
// the claim this node holds on group and its revision.
func (o *Ownership) Holds(group string) (uint64, bool) { return o.claims.Holds(group) }

// Want queues group, which a lease chose without a claim, to be claimed;
// it never blocks (a full queue drops it: the periodic pass over disowned
// groups offers it again).
func (o *Ownership) Want(group string) {
	select {
	case o.wanted <- group:
	default:
	}
}

// Idle is told that a lease of worker node found nothing: Start offers
// disowned groups' claims again, and asks peers for groups in that
// worker's band (see spread), at most every o.every.
func (o *Ownership) Idle(node int64) {
	o.mu.Lock()
	addBounded(&o.idleNodes, node, spreadIdleNodes)
	o.mu.Unlock()
	select {
	case o.idle <- struct{}{}:
	default:
	}
}

// ClaimNow is the fleet's ClaimNow: a lease found nothing but
// groups it holds no claim on. Those of this node's own (not a peer's
// state, whose adoption brings a snapshot and runs in the background) are
// claimed at once, all together, so the lease waits for about one claim
// and one catalog commit (the writer commits the owning writes as one);
// it reports whether any was won and owned.
func (o *Ownership) ClaimNow(ctx context.Context, groups []string) bool {
	var won atomic.Bool
	var wg sync.WaitGroup
	for _, g := range groups {
		grp, err := o.db.GroupByName(ctx, g)
		if err != nil {
			continue
		}
		if origin, err := o.db.GroupOrigin(ctx, grp.ID); err != nil || origin != "" {
			continue
		}
		wg.Go(func() {
			if o.claim(ctx, g) {
				won.Store(true)
			}
		})
	}
	wg.Wait()
	return won.Load()
}

// Ensure is the fleet's Ensure: an admin write on a group of
// this node's own is made under its claim, so its events carry the claim
// and no peer adopts the group with an older state. Errors: conflict when
// another node owns the group, unavailable when NATS cannot be reached
// or this node has not caught up yet with a peer the group went on at.
func (o *Ownership) Ensure(ctx context.Context, group string) error {
	if o.claims.Held(group) {
		return nil
	}
	rev, err := o.claims.Claim(ctx, group)
	if err != nil {
		return err
	}
	// Adopted like any group won: the claim taken may have been a peer's
	// that had the group after this node (see adoption.movedOn).
	if err := o.adopt(ctx, group); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "group %q: %v; try again shortly", group, err)
	}
	if err := o.owner.Own(ctx, group, rev); err != nil {
		return err
	}
	o.keeper.wonNow(group)
	return nil
}

// Lost disowns group, whose claim was lost, at once, in the background
// (the claims must not wait on the catalog's writer). Start takes the
// claims' losses (Losses) to it; a group lost before Start is disowned
// once it. A node whose life lapsed loses
// every claim at once; those are disowned a batch per write, by one
// goroutine. Groups lost after Stop are not disowned.
func (o *Ownership) Lost(group string) {
	if o.Stopped() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lost = append(o.lost, group)
	o.disownLostLocked()
}

// disownLostLocked starts the disowning goroutine if none runs and the
// service takes it. o.mu is held.
func (o *Ownership) disownLostLocked() {
	if !o.disowning && len(o.lost) > 0 && o.Go(o.disownLost) {
		o.disowning = true
	}
}

// ownershipDisownBatch bounds the groups disowned in one write.
const ownershipDisownBatch = 1024

// disownLost disowns the groups Lost was told of until none are left.
func (o *Ownership) disownLost(ctx context.Context) error {
	for {
		o.mu.Lock()
		batch := o.lost[:min(len(o.lost), ownershipDisownBatch)]
		o.lost = o.lost[len(batch):]
		if len(batch) == 0 {
			o.lost, o.disowning = nil, false
			o.mu.Unlock()
			return nil
		}
		o.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		// A claim won back since (Held again) has been or is being owned
		// again: disowning it now would undo that.
		if err := o.owner.Disown(wctx, batch, o.claims.Held); err != nil {
			o.log.Error("ownership: disowning groups whose claims were lost", "groups", len(batch), "first", batch[0], "err", err)
		}
		cancel()
	}
}

// ownershipClaimers is how many groups asked for by leases are claimed at
// once: their claims wait on NATS and their owning writes on the catalog's
// commit, so together they cost about what one does.
const ownershipClaimers = 8

// Start claims the groups leases asked for and, when a lease found nothing
// (at most every o.every), offers the claims of disowned groups with work
// again (their owner may have lapsed), and disowns lost groups, until ctx
// ends or Stop. Stop cancels a disowning write in flight and waits for
// it; stop the claims first, so no group is lost after. Errors:
// service.ErrStarted.
func (o *Ownership) Start(ctx context.Context) error {
	if err := o.Begin(ctx, o.run, o.takeLosses); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.disownLostLocked()
	return nil
}

// takeLosses disowns the groups whose claims the claims lost, as they
// tell them, until ctx ends.
func (o *Ownership) takeLosses(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.claims.Losses():
			for _, g := range o.claims.TakeLost() {
				o.Lost(g)
			}
		}
	}
}

// run claims and offers groups (see Start) until ctx ends.
func (o *Ownership) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	claiming := map[string]bool{} // a lease asks again while a claim is made
	for range ownershipClaimers {
		wg.Go(func() {
			for {
				var g string
				select {
				case <-ctx.Done():
					return
				case g = <-o.wanted:
				}
				mu.Lock()
				busy := claiming[g]
				claiming[g] = true
				mu.Unlock()
				if busy || o.claims.Held(g) {
					if !busy {
						mu.Lock()
						delete(claiming, g)
						mu.Unlock()
					}
					continue
				}
				o.claim(ctx, g)
				mu.Lock()
				delete(claiming, g)
				mu.Unlock()
			}
		})
	}
	if o.orphans != nil {
		wg.Go(func() { o.takeOvers(ctx) })
	}
	var offered time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.idle:
			// Only a node whose workers find nothing takes groups on, and
			// not more often than every o.every (at most a second): a node with no workers, or
			// busy ones, leaves its live peers' groups where they are (a
			// peer found down has its groups taken over by takeOvers).
			if time.Since(offered) >= min(o.every, ownershipOfferMax) {
				offered = time.Now()
				o.offer(ctx)
			}
		}
	}
}

// takeOvers takes over the groups of members found down (takeOver), a
// pass when one is found and again while some are left, until ctx ends.
// It runs beside the idle offers, never behind one: an offer waits on
// peers (a yield asked of an owner cut off waits spreadAskTimeout, a
// claim or an adoption on a stream electing its leader), and a fault run
// on a loaded machine had a member found down wait 6 s so before its
// groups were tried.
func (o *Ownership) takeOvers(ctx context.Context) {
	downs := o.orphans.Downs()
	// The next takeover pass, while a member found down has groups left.
	var again <-chan time.Time
	var wait time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-downs:
			wait, again = 0, time.After(0)
		case <-again:
			again = nil
			tried, took, later := o.takeOver(ctx)
			var ok bool
			if wait, ok = takeoverWait(wait, tried, took, later, min(3*o.every, takeoverWaitMax)); ok {
				again = time.After(wait)
			}
		}
	}
}

// takeoverWaitMax bounds the wait between takeover passes that take
// nothing (most often: the fold not caught up with the dead member's
// last events yet, just after a member rejoined). Three offers' periods,
// the bound before, is the claim TTL itself: at the default, passes
// 1, 2, 4, 8 and 16 s apart let a takeover run 15 s past the fold's
// catching up, far past the claim TTL + 5 s. A pass costs a catalog read
// and a claim a group.
const takeoverWaitMax = 2 * time.Second

// claim tries group's claim and owns the group when it is won.
func (o *Ownership) claim(ctx context.Context, group string) bool {
	rev, err := o.claims.Claim(ctx, group)
	if err != nil {
		if k := leasehold.KindOf(err); k != leasehold.KindConflict && k != leasehold.KindInvalid {
			o.log.Warn("ownership: claiming a group", "group", group, "err", err)
		}
		return false
	}
	return o.own(ctx, group, rev)
}

// own makes a won group this node's, adopting it first.
func (o *Ownership) own(ctx context.Context, group string, rev uint64) bool {
	if o.adopt(ctx, group) != nil {
		return false
	}
	// Whose state the group held before, for the ownership line: a
	// group of this node's own claimed again is no change of owner.
	from, _ := o.db.PeerOwner(ctx, group)
	if err := o.owner.Own(ctx, group, rev); err != nil {
		o.log.Error("ownership: owning a claimed group", "group", group, "err", err)
		return false
	}
	if from != "" && o.claims.Held(group) {
		o.log.Info(LogGroupTakenOver, "group", group, "from", from, "claim_rev", rev,
			leasehold.TimelineAttr, leasehold.TimelineAdoption)
	}
	o.keeper.wonNow(group)
	return true
}

// adopt adopts a won group before it is owned: ErrBehind lets its claim
// go (tried again later) and is returned; another error is logged and
// the group owned all the same.
func (o *Ownership) adopt(ctx context.Context, group string) error {
	if o.adoption == nil {
		return nil
	}
	err := o.adoption.Adopt(ctx, group)
	if errors.Is(err, ErrBehind) {
		o.log.Info("ownership: not adopting a group yet; its claim is let go and tried again later", "group", group, "why", err)
		if err := o.claims.Release(ctx, group); err != nil {
			o.log.Warn("ownership: releasing a claim", "group", group, "err", err)
		}
		return err
	}
	if err != nil {
		o.log.Warn("ownership: adopting a group without its snapshot", "group", group, "err", err)
	}
	return nil
}

// ownershipOfferMax bounds the time between an idle node's offers of
// disowned groups' claims, so a dead or cut-off peer's groups are taken
// over within about a second of its life lapsing, whatever the claim TTL.
// An offer is one indexed catalog read of at most ownershipOffer groups
// and a read of their claims.
const ownershipOfferMax = time.Second

// ownershipOffer bounds the disowned groups tried in one pass.
const ownershipOffer = 64

// offer tries the claims of groups this node has but does not own.
func (o *Ownership) offer(ctx context.Context) {
	groups, err := o.db.DisownedGroups(ctx, ownershipOffer)
	if err != nil {
		o.log.Warn("ownership: listing disowned groups", "err", err)
		return
	}
	won, err := o.claims.ClaimFree(ctx, groups, len(groups))
	o.log.Debug("ownership: offered disowned groups", "offered", len(groups), "won", len(won))
	if err != nil {
		o.log.Warn("ownership: claiming free groups", "err", err)
	}
	for _, g := range won {
		o.own(ctx, g, o.claims.Rev(g))
	}
	o.spread(ctx)
}
