package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
)

// claimTestTTL is short so that lapses happen within a test's seconds; the
// margin is the default TTL/4.
const claimTestTTL = 1500 * time.Millisecond

var claimQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// claimOnLost calls fn with each group c loses, as ownership takes them,
// until the test ends.
func claimOnLost(t *testing.T, c *Claims, fn func(group string)) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-c.Losses():
				for _, g := range c.TakeLost() {
					fn(g)
				}
			}
		}
	}()
}

// claimNew opens a node's Claims, retrying while a cluster elects its
// leaders, and closes it with the test.
func claimNew(t *testing.T, js jetstream.JetStream, cfg ClaimsConfig) *Claims {
	t.Helper()
	if cfg.TTL == 0 {
		cfg.TTL = claimTestTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = claimQuiet
	}
	var c *Claims
	poll.Eventually(t, 20*time.Second, "claims bucket", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		c, err = NewClaims(ctx, js, cfg)
		return err == nil
	})
	t.Cleanup(c.Stop)
	return c
}

// claimRun runs c's renewals and watch until the test ends or c stops.
func claimRun(t *testing.T, c *Claims) {
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
}

// claimThroughout checks cond every so often for the whole window, and
// once more at its end, and fails the test the first time cond fails. It
// is for what must stay true for a while: a claim kept across its
// renewals, a group another node never leases. Polling until true shows
// nothing there, and one sleep then one check sees only the window's end.
// It is modelled on nats-server's checkFor, the other way round.
func claimThroughout(t *testing.T, window, every time.Duration, cond func() error) {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err != nil {
			t.Fatalf("%v (%s into a window of %s)", err, time.Since(start).Round(time.Millisecond), window)
		}
		if time.Since(start) >= window {
			return
		}
		time.Sleep(every) // stays: the sampling interval across a window that must hold throughout, no step to wait for
	}
}

// claimTracked reports whether c still keeps a claim on group at all
// (held or waiting on a renewal).
func claimTracked(c *Claims, group string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[group]
	return ok
}

// claimMetric is the value of a counter or a gauge.
func claimMetric(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}

// claimKeyRe is nats.go's rule for a key-value key.
var claimKeyRe = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func claimKeyValid(k string) bool {
	return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && claimKeyRe.MatchString(k)
}

// TestClaimKey: every valid group name makes a valid key, ordinary names
// are kept as they are, and no two names share a key; the awkward ones are
// written to and read from a real bucket.
func TestClaimKey(t *testing.T) {
	cases := []struct{ group, want string }{
		{"comp.lang.go", "comp.lang.go"},
		{"alt.binaries.x-y_z", "alt.binaries.x-y_z"},
		{"comp.lang.c++", "comp.lang.c=2B=2B"},
		{"a..b", "a=2E.b"},
		{"a.", "a=2E"},
		{"a...", "a=2E=2E=2E"},
		{"9+.+", "9=2B.=2B"},
	}
	for _, tc := range cases {
		if got := ClaimKey(tc.group); got != tc.want {
			t.Errorf("ClaimKey(%q) = %q, want %q", tc.group, got, tc.want)
		}
	}

	const alphabet = "ab9Z._+-"
	keys := map[string]string{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := []byte{"aZ09"[r.IntN(4)]}
		for range r.IntN(8) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		g := string(b)
		if !leasehold.ValidGroupName(g) {
			t.Fatalf("generator made invalid name %q", g)
		}
		k := ClaimKey(g)
		if !claimKeyValid(k) {
			t.Fatalf("ClaimKey(%q) = %q, not a valid key", g, k)
		}
		if back := claimGroup(k); back != g {
			t.Fatalf("claimGroup(ClaimKey(%q)) = %q", g, back)
		}
		if other, ok := keys[k]; ok && other != g {
			t.Fatalf("%q and %q share key %q", g, other, k)
		}
		keys[k] = g
	}
	long := strings.Repeat("+", 254)
	if k := ClaimKey("a" + long); !claimKeyValid(k) {
		t.Fatalf("longest name's key %q not valid", k)
	}

	s := natstest.Server(t)
	c := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a"})
	ctx := context.Background()
	for _, g := range []string{"comp.lang.c++", "a..b", "a.", "a" + long, "x.y"} {
		if _, err := c.Claim(ctx, g); err != nil {
			t.Fatalf("Claim(%q): %v", g, err)
		}
		if own, _, err := c.Owner(ctx, g); err != nil || own.Node != "a" {
			t.Fatalf("Owner(%q) = %v, %v", g, own, err)
		}
	}
}

// TestClaimBesideClaim: two claims of one group on one node at once (a
// lease's, and the idle worker's it queued) end at one revision: the one
// that finds the other's write holds it as it is, not written anew under
// the lease granted at it (a lone node's bench lost 6 leases in 5,600 to
// "this node's claim changed"). A claim that finds its own write being
// released writes it anew, so the release's delete misses it.
func TestClaimBesideClaim(t *testing.T) {
	s := natstest.Server(t)
	c := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a"})
	ctx := context.Background()
	first, err := c.Claim(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	// The second claim started before the first was recorded: it finds
	// the key written, and not held yet.
	c.mu.Lock()
	delete(c.held, "g")
	c.mu.Unlock()
	second, err := c.Claim(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, rev, err := c.Owner(ctx, "g"); err != nil || second != first || rev != first {
		t.Fatalf("the claim beside it: %d; the bucket's %d, %v; want both at the first's revision %d", second, rev, err, first)
	}

	// Released meanwhile: held no more, its delete at that revision in
	// flight.
	c.mu.Lock()
	delete(c.held, "g")
	c.released["g"] = releasedClaim{rev: first, at: time.Now()}
	c.mu.Unlock()
	again, err := c.Claim(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if again <= first {
		t.Fatalf("a claim beside its release: revision %d, want one above %d", again, first)
	}
	if err := c.kv.Delete(ctx, ClaimKey("g"), jetstream.LastRevision(first)); err == nil {
		t.Fatal("the release's delete at the old revision removed the new claim")
	}
	if _, rev, err := c.Owner(ctx, "g"); err != nil || rev != again || !c.Held("g") {
		t.Fatalf("after the release missed: owner at %d, %v, held %v; want held at %d", rev, err, c.Held("g"), again)
	}

	// A claim that read this life's write just before a release of it
	// ran to the end (its delete landed) records nothing: the revision
	// was given up, and a next round creates the claim anew.
	if err := c.Release(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	life := c.life
	c.mu.Unlock()
	if _, err := c.recordOwn("g", life, again); !errors.Is(err, errReleased) || c.Held("g") {
		t.Fatalf("recording a released revision: %v, held %v; want errReleased, not held", err, c.Held("g"))
	}
	if last, err := c.Claim(ctx, "g"); err != nil || last <= again || !c.Held("g") {
		t.Fatalf("claiming after the release: %d, %v; want held above %d", last, err, again)
	}
}

// TestClaimRace: two nodes race for one group: exactly one wins, the
// loser sees the winner as the owner at the winner's fence, renewing the
// winner's life leaves the fence as it is, and a release lets the loser
// claim the group at a higher one.
func TestClaimRace(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	for round := range 5 {
		group := fmt.Sprintf("race.%d", round)
		nodes := []*Claims{
			// New names each round: a name's last life stands until it lapses.
			claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: fmt.Sprintf("a%d", round)}),
			claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: fmt.Sprintf("b%d", round)}),
		}
		claimRun(t, nodes[0])
		claimRun(t, nodes[1])
		fences := make([]uint64, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range nodes {
			wg.Go(func() {
				<-start
				fences[i], errs[i] = c.Claim(ctx, group)
			})
		}
		close(start)
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: errors %v, %v; want exactly one winner", round, errs[0], errs[1])
		}
		win, lose := 0, 1
		if errs[0] != nil {
			win, lose = 1, 0
		}
		if k := leasehold.KindOf(errs[lose]); k != leasehold.KindConflict {
			t.Fatalf("loser's error %v is %s, want conflict", errs[lose], k)
		}
		w, l := nodes[win], nodes[lose]
		if !w.Held(group) || l.Held(group) {
			t.Fatalf("held: winner %v, loser %v", w.Held(group), l.Held(group))
		}
		own, rev, err := l.Owner(ctx, group)
		if err != nil || own.Node != w.Node() || rev != fences[win] {
			t.Fatalf("loser sees owner %v at %d (%v), want %s at %d", own, rev, err, w.Node(), fences[win])
		}
		// Renewing the life writes no claim: the fence stays.
		if err := w.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		// Claiming one's own claim again answers its fence; the loser's
		// claim is again a conflict.
		f3, err := w.Claim(ctx, group)
		if err != nil || f3 != fences[win] {
			t.Fatalf("reclaim by owner: fence %d (%v), want %d", f3, err, fences[win])
		}
		if _, rev, err := l.Owner(ctx, group); err != nil || rev != f3 {
			t.Fatalf("owner's fence after a renewal: %d (%v), want %d", rev, err, f3)
		}
		if _, err := l.Claim(ctx, group); leasehold.KindOf(err) != leasehold.KindConflict {
			t.Fatalf("loser's second claim: %v, want conflict", err)
		}
		if g := w.Owned(); len(g) != 1 || g[0] != group {
			t.Fatalf("winner owns %v", g)
		}
		// A release frees the group for the other node at a higher fence.
		if err := w.Release(ctx, group); err != nil {
			t.Fatal(err)
		}
		if w.Held(group) {
			t.Fatal("held after release")
		}
		f4, err := l.Claim(ctx, group)
		if err != nil || f4 <= f3 {
			t.Fatalf("claim after release: fence %d (%v), want above %d", f4, err, f3)
		}
		// The former owner finds the group taken.
		if _, err := w.Claim(ctx, group); leasehold.KindOf(err) != leasehold.KindConflict {
			t.Fatalf("claim after release and a peer's claim: %v, want conflict", err)
		}
		nodes[0].Stop()
		nodes[1].Stop()
	}
}

// TestClaimLapse: an owner killed without releasing (its Claims closed)
// loses its group after the TTL, by the server alone; another node claims
// it at a higher fence, and the old node restarted holds nothing.
func TestClaimLapse(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	const group = "comp.lang.go"
	a := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a"})
	claimRun(t, a)
	var lostMu sync.Mutex
	var lostB []string
	b := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "b"})
	claimOnLost(t, b, func(g string) {
		lostMu.Lock()
		defer lostMu.Unlock()
		lostB = append(lostB, g)
	})
	claimRun(t, b)

	fa, err := a.Claim(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	// A running owner keeps its claim past several TTLs, by renewing its
	// life: the claim itself is not written again. A window, not a poll:
	// what is shown is that the claim is never let go across renewals.
	claimThroughout(t, 2*claimTestTTL, 10*time.Millisecond, func() error {
		if !a.Held(group) {
			return errors.New("running owner does not hold its group")
		}
		return nil
	})
	own, fence, err := b.Owner(ctx, group)
	if err != nil || own.Node != "a" || fence != fa {
		t.Fatalf("owner %v at %d (%v), want a at %d", own, fence, err, fa)
	}

	a.Stop() // killed: no release
	killed := time.Now()
	if a.Held(group) {
		t.Fatal("closed Claims still holds")
	}
	var fb uint64
	poll.Eventually(t, 4*claimTestTTL, "b claims the lapsed group", func() bool {
		var err error
		fb, err = b.Claim(ctx, group)
		return err == nil
	})
	after := time.Since(killed)
	t.Logf("claimed %s after the owner was killed (TTL %s)", after.Round(time.Millisecond), claimTestTTL)
	// a's life was last renewed at most TTL/3 (and a tick) before the kill.
	if min := claimTestTTL - claimTestTTL/3 - claimTestTTL/12; after < min {
		t.Fatalf("claimed %s after the kill, before the claim could lapse (%s)", after, min)
	}
	if fb <= fence {
		t.Fatalf("new fence %d not above the old %d", fb, fence)
	}

	a2 := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a"})
	claimRun(t, a2)
	if a2.Held(group) || len(a2.Owned()) != 0 {
		t.Fatalf("restarted node holds %v", a2.Owned())
	}
	if _, err := a2.Claim(ctx, group); leasehold.KindOf(err) != leasehold.KindConflict {
		t.Fatalf("restarted node's claim: %v, want conflict", err)
	}
	// b keeps renewing: over a TTL's window (several renewals), not only
	// at its end.
	claimThroughout(t, claimTestTTL, 10*time.Millisecond, func() error {
		if !b.Held(group) {
			return errors.New("b lost its group")
		}
		return nil
	})
	lostMu.Lock()
	defer lostMu.Unlock()
	if len(lostB) != 0 {
		t.Fatalf("b told of lost claims %v", lostB)
	}
}

// TestClaimRestart: a node started again under a name whose last life
// still stands (the earlier run may still be running: a restart that
// overlaps it, or a second node under that name) holds nothing and takes
// nothing over while that life is renewed; the earlier run keeps its
// group. Once the earlier run stops, the later begins a life after the
// earlier one lapses and claims the group at a higher fence.
func TestClaimRestart(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	const group = "misc.restart"
	// A TTL longer than the other tests': the earlier run must hold the
	// group throughout, and under -race on a loaded two-core machine a
	// renewal of a 1.5 s life was starved past its margin once (the run's
	// own lapse, not the later run's doing).
	const ttl = 4 * time.Second
	a := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a", TTL: ttl})
	claimRun(t, a)
	b := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "b", TTL: ttl})
	claimRun(t, b)
	fa, err := a.Claim(ctx, group)
	if err != nil {
		t.Fatal(err)
	}

	a2 := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a", TTL: ttl})
	claimRun(t, a2)
	// a renews all along: for a TTL (three renewals) the earlier run holds
	// the group and the later run does not, at every check, not only at
	// the end.
	claimThroughout(t, ttl, 10*time.Millisecond, func() error {
		if !a.Held(group) || a2.Held(group) {
			return fmt.Errorf("held: earlier run %v, later run %v; want only the earlier", a.Held(group), a2.Held(group))
		}
		return nil
	})
	if _, err := a2.Claim(ctx, group); leasehold.KindOf(err) != leasehold.KindUnavailable {
		t.Fatalf("the later run's claim while the earlier renews: %v, want unavailable (no life)", err)
	}
	if _, err := b.Claim(ctx, group); leasehold.KindOf(err) != leasehold.KindConflict {
		t.Fatalf("b's claim on a's group: %v, want conflict", err)
	}
	if !a.Held(group) || a2.Held(group) {
		t.Fatalf("held: earlier run %v, later run %v; want only the earlier", a.Held(group), a2.Held(group))
	}
	if own, rev, err := b.Owner(ctx, group); err != nil || own.Node != "a" || rev != fa {
		t.Fatalf("owner %v at %d (%v), want a at %d", own, rev, err, fa)
	}

	a.Stop() // the earlier run stops: its life lapses
	stopped := time.Now()
	var fa2 uint64
	poll.Eventually(t, 4*ttl, "the later run claims the group", func() bool {
		var err error
		fa2, err = a2.Claim(ctx, group)
		return err == nil
	})
	if d := time.Since(stopped); d < ttl-ttl/3-ttl/12 {
		t.Fatalf("the later run claimed %s after the earlier stopped, before its life could lapse", d)
	}
	if fa2 <= fa {
		t.Fatalf("fence %d, want above %d", fa2, fa)
	}
}

// TestClaimPastMargin: a node whose life went past its margin gives its
// claims up; its next renewal, though the server still keeps that life,
// begins a new one (its own last life is not another node's), and the
// group is claimed again at a higher fence.
func TestClaimPastMargin(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	const group = "misc.margin"
	clock := time.Now()
	var clockMu sync.Mutex
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	a := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a", NowFunc: now})
	fa, err := a.Claim(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	clockMu.Lock()
	clock = clock.Add(claimTestTTL - a.margin) // no renewal landed since
	clockMu.Unlock()
	if a.Held(group) {
		t.Fatal("held past the margin")
	}
	a.tellLapsed()
	if claimTracked(a, group) {
		t.Fatal("claim kept past the margin")
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("beginning a new life over this node's last: %v", err)
	}
	fa2, err := a.Claim(ctx, group)
	if err != nil || fa2 <= fa {
		t.Fatalf("claim in the new life: fence %d (%v), want above %d", fa2, err, fa)
	}
}

// TestClaimRenewalLandsPastMargin: a renewal sent before the life's
// margin that lands only after it (held up while NATS was away) revives
// nothing: Held said no from the margin on, so a holder was told its lease
// was lost, and the claims are given up as at the margin; the next renewal
// begins a new life and the group is claimed again at a higher fence.
func TestClaimRenewalLandsPastMargin(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	const group = "misc.late-renewal"
	var clockMu sync.Mutex
	clock := time.Now()
	var jump time.Time // when set, the clock moves there once it is read
	now := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		t := clock
		if !jump.IsZero() {
			clock, jump = jump, time.Time{}
		}
		return t
	}
	a := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "a", NowFunc: now})
	lost := make(chan string, 1)
	claimOnLost(t, a, func(g string) { lost <- g })
	fa, err := a.Claim(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	// The renewal starts just before the margin and lands just after it.
	margin := clock.Add(claimTestTTL - a.margin)
	clockMu.Lock()
	clock, jump = margin.Add(-time.Millisecond), margin.Add(time.Millisecond)
	clockMu.Unlock()
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Held(group) || claimTracked(a, group) {
		t.Fatalf("held %v, tracked %v after a renewal that landed past the margin; want the claim given up", a.Held(group), claimTracked(a, group))
	}
	select {
	case g := <-lost:
		if g != group {
			t.Fatalf("lost %q, want %q", g, group)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the claim given up was not told as lost")
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("beginning a new life over this node's last: %v", err)
	}
	fa2, err := a.Claim(ctx, group)
	if err != nil || fa2 <= fa {
		t.Fatalf("claim in the new life: fence %d (%v), want above %d", fa2, err, fa)
	}
}

// TestClaimUnreachable: an owner cut off from NATS holds its group until
// just before its life lapses, and lets go before any other node of the
// cluster can claim it; reconnected, it finds the group taken.
func TestClaimUnreachable(t *testing.T) {
	servers, opts := natstest.Cluster(t, 3)
	ctx := context.Background()
	const group = "alt.test"
	lost := make(chan time.Time, 4)
	a := claimNew(t, natstest.Connect(t, servers[0].ClientURL()), ClaimsConfig{Node: "a", Replicas: 3})
	claimOnLost(t, a, func(g string) {
		if g == group {
			lost <- time.Now()
		}
	})
	claimRun(t, a)
	b := claimNew(t, natstest.Connect(t, servers[1].ClientURL()), ClaimsConfig{Node: "b", Replicas: 3})
	claimRun(t, b)

	var fa uint64
	poll.Eventually(t, 10*time.Second, "a claims", func() bool {
		var err error
		fa, err = a.Claim(ctx, group)
		return err == nil
	})
	// a holds its group across a few renewals before the cut.
	claimThroughout(t, claimTestTTL, 10*time.Millisecond, func() error {
		if !a.Held(group) {
			return errors.New("a does not hold its group")
		}
		return nil
	})

	servers[0].Shutdown()
	servers[0].WaitForShutdown()
	cut := time.Now()

	// Race b against a's Held: b must not win while a holds.
	var letGo, won time.Time
	var fb uint64
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for time.Since(cut) < 10*claimTestTTL {
			cctx, cancel := context.WithTimeout(ctx, claimTestTTL/3)
			f, err := b.Claim(cctx, group)
			cancel()
			if err == nil {
				won, fb = time.Now(), f
				return
			}
			time.Sleep(5 * time.Millisecond) // stays: b's pace between tries in the race, no step to wait for
		}
	}()
	// Held turns false by the clock (a's last renewal + TTL − margin): no
	// step fires to wait on. Asked every millisecond, so letGo is taken
	// close to the moment b may claim.
	if err := poll.Wait(10*claimTestTTL, time.Millisecond, func() error {
		if a.Held(group) {
			return errors.New("a still holds its group")
		}
		return nil
	}); err != nil {
		<-bDone
		t.Fatalf("%v %s after the cut", err, 10*claimTestTTL)
	}
	letGo = time.Now()
	<-bDone
	if won.IsZero() {
		t.Fatal("b never claimed the group")
	}
	held := letGo.Sub(cut)
	t.Logf("a held %s after the cut; b claimed %s after a let go (TTL %s, margin %s)",
		held.Round(time.Millisecond), won.Sub(letGo).Round(time.Millisecond), claimTestTTL, a.margin)
	if !won.After(letGo) {
		t.Fatalf("b claimed at %s, before a let go at %s", won.Sub(cut), held)
	}
	// The last renewal before the cut started at most TTL/3 and a tick
	// earlier; a holds until TTL − margin after it.
	if min := claimTestTTL - a.margin - claimTestTTL/3 - claimTestTTL/12 - 50*time.Millisecond; held < min {
		t.Fatalf("a let go %s after the cut, want at least %s", held, min)
	}
	if held > claimTestTTL-a.margin+100*time.Millisecond {
		t.Fatalf("a held %s after the cut, past TTL − margin", held)
	}
	select {
	case at := <-lost:
		if d := at.Sub(letGo); d > claimTestTTL/3 {
			t.Fatalf("Losses told %s after Held went false", d)
		}
	case <-time.After(claimTestTTL):
		t.Fatal("Losses not told")
	}
	if fb <= fa {
		t.Fatalf("b's fence %d not above a's %d", fb, fa)
	}

	// Past its margin a gave every claim up; reconnected, it begins a new
	// life and finds the group b's.
	if claimTracked(a, group) {
		t.Fatal("a still keeps the claim it gave up")
	}
	restarted := natstest.Start(t, opts[0])
	t.Cleanup(restarted.Shutdown)
	poll.Eventually(t, 30*time.Second, "a begins a new life", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.liveLocked(time.Now())
	})
	if a.Held(group) {
		t.Fatal("a holds the group again")
	}
	if _, err := a.Claim(ctx, group); leasehold.KindOf(err) != leasehold.KindConflict {
		t.Fatalf("a's claim after reconnecting: %v, want conflict", err)
	}
	own, _, err := a.Owner(ctx, group)
	if err != nil || own.Node != "b" {
		t.Fatalf("a sees owner %v (%v), want b", own, err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collectors()...)
	if got := claimMetric(t, a.lostCount); got != 1 {
		t.Errorf("claims lost = %v, want 1", got)
	}
	if got := claimMetric(t, a.renewalFailures); got < 1 {
		t.Errorf("renewal failures = %v, want some", got)
	}
	if got := claimMetric(t, a.heldGauge); got != 0 {
		t.Errorf("claims held = %v, want 0", got)
	}
}

// TestClaimShortOutage: an owner whose NATS is away for less than its
// margin allows keeps its claim, and renews its life once reconnected.
func TestClaimShortOutage(t *testing.T) {
	o := natstest.Options(t)
	o.Port = natstest.FreePort(t)
	s := natstest.Start(t, o)
	t.Cleanup(s.Shutdown)
	ctx := context.Background()
	const group = "misc.short"
	js := natstest.Connect(t, s.ClientURL())
	// The outage begins for a when its connection says it is gone.
	away := make(chan struct{})
	var awayOnce sync.Once
	js.Conn().SetDisconnectErrHandler(func(*nats.Conn, error) { awayOnce.Do(func() { close(away) }) })
	a := claimNew(t, js, ClaimsConfig{Node: "a"})
	claimRun(t, a)
	fence, err := a.Claim(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	before := a.lifeRev
	a.mu.Unlock()
	s.Shutdown()
	s.WaitForShutdown()
	select {
	case <-away:
	case <-time.After(10 * time.Second):
		t.Fatal("a's connection did not see NATS go")
	}
	s = natstest.Start(t, o)
	t.Cleanup(s.Shutdown)
	poll.Eventually(t, 10*time.Second, "a renews after the outage", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.lifeRev > before
	})
	if !a.Held(group) {
		t.Fatal("a does not hold its group after renewing")
	}
	own, rev, err := a.Owner(ctx, group)
	if err != nil || own.Node != "a" || rev != fence {
		t.Fatalf("owner %v at %d (%v), want a at %d", own, rev, err, fence)
	}
}

// TestClaimServerLapse measures how late the server removes an unrenewed
// life after its TTL (MaxAge), which Margin and the takeover rule must
// allow for: the expiry timer fires no more often than every 250 ms and
// reads a clock cached for 100 ms. The claim written in that life stays
// in the bucket and stands for no one from then on.
func TestClaimServerLapse(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	ctx := context.Background()
	other := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "other"})
	claimRun(t, other)
	var worst time.Duration
	for i := range 4 {
		node, group := fmt.Sprintf("lapse-%d", i), fmt.Sprintf("lapse.%d", i)
		c := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: node})
		if _, err := c.Claim(ctx, group); err != nil {
			t.Fatal(err)
		}
		e, err := c.lives.Get(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		due := e.Created().Add(claimTestTTL)
		poll.Eventually(t, 3*claimTestTTL, "the server removes the life", func() bool {
			_, err := c.lives.Get(ctx, node)
			return err != nil
		})
		late := time.Since(due)
		if late < 0 {
			t.Fatalf("life removed %s before its TTL ran out", -late)
		}
		worst = max(worst, late)
		if _, err := c.kv.Get(ctx, ClaimKey(group)); err != nil {
			t.Fatalf("the claim left the bucket with its life: %v", err)
		}
		if _, _, err := other.Owner(ctx, group); leasehold.KindOf(err) != leasehold.KindNotFound {
			t.Fatalf("owner of a group whose owner's life lapsed: %v, want not found", err)
		}
		if _, err := other.Claim(ctx, group); err != nil {
			t.Fatalf("claiming a group whose owner's life lapsed: %v", err)
		}
		c.Stop()
		// stays: starts the next life 100 ms later in the server's 250 ms
		// expiry period, so the four lapses measure its phases, not one.
		time.Sleep(time.Duration(i) * 100 * time.Millisecond)
	}
	t.Logf("unrenewed lives removed at most %s after their TTL of %s (poll period 10ms)", worst.Round(time.Millisecond), claimTestTTL)
}

// claimInterval is one incarnation of a node holding a group, as seen by
// polling Held.
type claimInterval struct {
	who        string // node name and incarnation
	from, till time.Time
}

// claimNodeOf is the node name of an incarnation "node#n".
func claimNodeOf(who string) string {
	node, _, _ := strings.Cut(who, "#")
	return node
}

// claimHandovers counts the handovers in the hold intervals of each
// group, those between nodes, and the closest gap of one.
func claimHandovers(byGroup map[string][]*claimInterval) (handovers, crossNode int, minGap time.Duration) {
	minGap = time.Duration(1<<63 - 1)
	for _, ivs := range byGroup {
		for i := 1; i < len(ivs); i++ {
			if ivs[i].who != ivs[i-1].who {
				handovers++
				if claimNodeOf(ivs[i].who) != claimNodeOf(ivs[i-1].who) {
					crossNode++
				}
				if gap := ivs[i].from.Sub(ivs[i-1].till); gap < minGap {
					minGap = gap
				}
			}
		}
	}
	return handovers, crossNode, minGap
}

// TestClaimHistory: several nodes claim free groups, renew, release and
// are killed and restarted; every Held is recorded, and no two
// incarnations ever hold a group at overlapping times.
func TestClaimHistory(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	url := s.ClientURL()
	groups := []string{"h.0", "h.1", "h.2", "h.3"}
	type life struct {
		who string
		c   *Claims
	}
	var mu sync.Mutex
	var lives []*life // every incarnation, for the sampler
	var lostWhileHeld []string

	start := func(node string, n int) *life {
		l := &life{who: fmt.Sprintf("%s#%d", node, n)}
		l.c = claimNew(t, natstest.Connect(t, url), ClaimsConfig{Node: node})
		claimOnLost(t, l.c, func(g string) {
			if l.c.Held(g) {
				mu.Lock()
				lostWhileHeld = append(lostWhileHeld, l.who+" "+g)
				mu.Unlock()
			}
		})
		claimRun(t, l.c)
		mu.Lock()
		lives = append(lives, l)
		mu.Unlock()
		return l
	}

	// At least 8 s, and on until the history has handovers enough to
	// prove something (a node's groups moving to another), 30 s at most:
	// the random kills and releases may hand over little in 8 s on a
	// loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enoughAt := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	var kills, releases int
	var countMu sync.Mutex
	for i, node := range []string{"a", "b", "c"} {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			n := 0
			l := start(node, n)
			for ctx.Err() == nil {
				l.c.ClaimFree(ctx, groups, 2-len(l.c.Owned()))
				time.Sleep(time.Duration(100+r.IntN(300)) * time.Millisecond) // stays: the node's random pace between acts
				switch r.IntN(8) {
				case 0: // killed, and down long enough for its claims to lapse
					l.c.Stop()
					countMu.Lock()
					kills++
					countMu.Unlock()
					time.Sleep(claimTestTTL + time.Duration(r.Int64N(int64(claimTestTTL)))) // stays: down long enough for its claims to lapse
					n++
					l = start(node, n)
				case 1: // lets one group go
					if owned := l.c.Owned(); len(owned) > 0 {
						l.c.Release(ctx, owned[0])
						countMu.Lock()
						releases++
						countMu.Unlock()
					}
				}
			}
		})
	}

	// The sampler: Held of every incarnation for every group, each call
	// timed before it is made, so one incarnation's last true precedes
	// the next holder's first true whenever the two are ordered.
	open := map[string]*claimInterval{} // by who + group
	var done []claimInterval
	byGroup := map[string][]*claimInterval{}
	for ctx.Err() == nil {
		mu.Lock()
		ls := append([]*life(nil), lives...)
		mu.Unlock()
		for _, l := range ls {
			for _, g := range groups {
				at := time.Now()
				k := l.who + " " + g
				if l.c.Held(g) {
					if iv, ok := open[k]; ok {
						iv.till = at
					} else {
						iv := &claimInterval{who: l.who, from: at, till: at}
						open[k] = iv
						byGroup[g] = append(byGroup[g], iv)
					}
				} else if iv, ok := open[k]; ok {
					done = append(done, *iv)
					delete(open, k)
				}
			}
		}
		if time.Now().After(enoughAt) {
			if h, x, _ := claimHandovers(byGroup); h >= 3 && x >= 1 {
				cancel()
			}
		}
		time.Sleep(time.Millisecond) // stays: the sampler's interval over the whole run
	}
	wg.Wait()

	for g, ivs := range byGroup {
		for i, x := range ivs {
			for _, y := range ivs[i+1:] {
				if x.who == y.who {
					continue
				}
				if !x.from.After(y.till) && !y.from.After(x.till) {
					t.Errorf("group %s held by %s [%s, %s] and %s [%s, %s] at once", g,
						x.who, x.from.Format("15:04:05.000"), x.till.Format("15:04:05.000"),
						y.who, y.from.Format("15:04:05.000"), y.till.Format("15:04:05.000"))
				}
			}
		}
	}
	handovers, crossNode, minGap := claimHandovers(byGroup)
	countMu.Lock()
	t.Logf("%d hold intervals, %d handovers between incarnations (%d between nodes; closest %s apart), %d kills, %d releases",
		len(done)+len(open), handovers, crossNode, minGap, kills, releases)
	countMu.Unlock()
	if handovers < 3 || crossNode < 1 {
		t.Fatalf("only %d handovers, %d between nodes: the history proves nothing", handovers, crossNode)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lostWhileHeld) > 0 {
		t.Fatalf("Losses told while Held was still true: %v", lostWhileHeld)
	}
}

// TestClaimsCountPeers: a node counts the other nodes' lives standing in
// the fleet (not its own); a peer that stops renewing stops counting once
// its life's key expires, a TTL after its last renewal.
func TestClaimsCountPeers(t *testing.T) {
	s := natstest.Server(t)
	a := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "node-a"})
	claimRun(t, a)
	b := claimNew(t, natstest.Connect(t, s.ClientURL()), ClaimsConfig{Node: "node-b"})
	claimRun(t, b)
	poll.Eventually(t, 5*time.Second, "a counting b", func() bool { return a.Peers() == 1 })
	poll.Eventually(t, 5*time.Second, "b counting a", func() bool { return b.Peers() == 1 })
	b.Stop()
	poll.Eventually(t, 3*claimTestTTL, "a no longer counting b", func() bool { return a.Peers() == 0 })
}

// TestClaimsLifeReadBounded: a read of a node's life that the server takes
// and never answers ends within lifeReadTimeout even when the caller's
// context has no deadline, as the offer of disowned groups' does: waiting
// for good once left a node that had been cut off unable to take any group
// on again.
func TestClaimsLifeReadBounded(t *testing.T) {
	opts := natstest.Options(t)
	opts.JetStream = false // only the silent subscriber below gets the request
	s := natstest.Start(t, opts)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync("$JS.API.STREAM.MSG.GET.KV_" + LivesBucket)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	defer func(d time.Duration) { lifeReadTimeout = d }(lifeReadTimeout)
	lifeReadTimeout = 200 * time.Millisecond

	c := &Claims{nc: nc}
	done := make(chan error, 1)
	go func() {
		_, err := c.readLife(context.Background(), "node-b")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a life read nobody answered succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a life read nobody answered still waits after 10s")
	}
}
