package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestLeaseKinds is rule 12 in the catalog: a node leases only groups of
// its kinds, free or taken over from a quiet holder; a node of two kinds
// gets the most urgent of either; a held group's kind does not change.
func TestLeaseKinds(t *testing.T) {
	t.Parallel()
	w := newFailWorld(t, "alt.counted")
	ctx := context.Background()
	var nntpNode, both int64
	must(t, w.write(func(tx *Tx) error {
		g, _, err := tx.PutGroup("alt.binaries.x", GroupSpec{RangeSize: ptr(int64(1000)), Kind: ptr(leasehold.SourceKindNNTP)})
		if err != nil {
			return err
		}
		w.gids["alt.binaries.x"] = g.ID
		if _, err := tx.PlanTail(g.ID, 3000); err != nil {
			return err
		}
		n, err := tx.CreateNode(NewNode{Name: "usenet", TokenHash: []byte("u"), PriorityMin: -10, PriorityMax: 10, Capacity: 8, Kinds: []string{leasehold.SourceKindNNTP}})
		nntpNode = n.ID
		if err != nil {
			return err
		}
		n, err = tx.CreateNode(NewNode{Name: "both", TokenHash: []byte("b"), PriorityMin: -10, PriorityMax: 10, Capacity: 8, Kinds: []string{"default", leasehold.SourceKindNNTP}})
		both = n.ID
		return err
	}))
	lease := func(node int64) *leasehold.Grant {
		t.Helper()
		var g *leasehold.Grant
		must(t, w.write(func(tx *Tx) error {
			var err error
			g, err = tx.LeaseGroup(LeaseRequest{NodeID: node, TTL: time.Minute, MaxAttempts: failMaxAttempts})
			return err
		}))
		return g
	}
	// The default node (w) gets its own group, then nothing: never the
	// nntp one.
	if g := lease(w.node); g == nil || g.Group.Name != "alt.counted" || g.Group.Kind != leasehold.DefaultSourceKind {
		t.Fatalf("default node's first lease = %+v, want alt.counted", g)
	}
	if g := lease(w.node); g != nil {
		t.Fatalf("default node's second lease = %s (kind %s), want none: the rest is nntp", g.Group.Name, g.Group.Kind)
	}
	if g := lease(nntpNode); g == nil || g.Group.Name != "alt.binaries.x" {
		t.Fatalf("nntp node's lease = %+v, want alt.binaries.x", g)
	}
	// Both holders go quiet: the node of both kinds may take either over;
	// the default node still never the nntp group.
	w.clock.now = w.clock.now.Add(2 * time.Minute)
	if g := lease(w.node); g == nil || g.Group.Name != "alt.counted" {
		t.Fatalf("default node's takeover = %+v, want alt.counted back", g)
	}
	if g := lease(both); g == nil || g.Group.Name != "alt.binaries.x" || !g.Takeover {
		t.Fatalf("two-kind node's lease = %+v, want the nntp group taken over", g)
	}
	// Held: its kind stays.
	err := w.write(func(tx *Tx) error {
		_, _, err := tx.PutGroup("alt.binaries.x", GroupSpec{Kind: ptr("default")})
		return err
	})
	if !errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("kind change of a held group: %v, want a conflict", err)
	}
	if g, _ := w.db.GroupByName(ctx, "alt.binaries.x"); g.Kind != leasehold.SourceKindNNTP {
		t.Fatalf("kind after the refused change = %q", g.Kind)
	}
	// Bad kinds are refused with nothing written.
	err = w.write(func(tx *Tx) error {
		_, err := tx.CreateNode(NewNode{Name: "bad", TokenHash: []byte("x"), Capacity: 1, Kinds: []string{"NNTP"}})
		return err
	})
	if !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("a node of kind NNTP: %v, want invalid", err)
	}
}

// TestLeaseKindsSeek: the lease's choice stays one seek of its lane's
// index for each kind, at any number of groups of other kinds, and the
// takeover choice a walk of the quiet leases.
func TestLeaseKindsSeek(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	for q, index := range map[*query]string{qChooseFreeTail: "groups_free_tail", qChooseFreeHist: "groups_free_hist"} {
		p := plan(t, db, q.sql, -10, 10, leasehold.SourceKindNNTP)
		if len(p) != 1 || !strings.Contains(p[0], "USING INDEX "+index+" (kind=? AND") {
			t.Errorf("plan of %q: %q, want one seek of %s by kind", q.sql, p, index)
		}
	}
	// Takeover candidates are walked from the quiet leases, never from a
	// kind's groups.
	if p := plan(t, db, qChooseQuiet.sql, 0, -10, -1, 0, 10, `["nntp"]`); len(p) == 0 || !strings.HasPrefix(p[0], "SEARCH l USING INDEX group_leases_heartbeat") {
		t.Errorf("plan of the takeover choice: %q, want the quiet leases first", p)
	}
}

// TestKindsTravel: a peer's group keeps its kind and its source error
// here, and a peer's node its kinds, so after a takeover only a node of
// the group's kind leases it, and no_worker_for_kind counts the fleet's
// workers, not only this node's.
func TestKindsTravel(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	ctx := context.Background()
	pg := foldGroup("alt.binaries.far", 3)
	pg.Kind = leasehold.SourceKindNNTP
	pg.SourceError = &leasehold.SourceError{Error: "411 No such group", Node: "wa", At: foldStart}
	foldIn(t, db, "a", pg, foldRanges())
	g, err := db.GroupByName(ctx, "alt.binaries.far")
	must(t, err)
	if g.Kind != leasehold.SourceKindNNTP || g.SourceError == nil || g.SourceError.Error != "411 No such group" {
		t.Fatalf("a peer's group here: kind %q, source error %+v", g.Kind, g.SourceError)
	}
	// What this node publishes of its own group carries both too.
	var own int64
	must(t, db.Write(ctx, func(tx *Tx) error {
		g, _, err := tx.PutGroup("alt.binaries.own", GroupSpec{Kind: ptr(leasehold.SourceKindNNTP)})
		own = g.ID
		if err == nil {
			_, err = tx.ReportSourceError(own, "usenet", "481 refused")
		}
		return err
	}))
	if _, err := db.PeerIndexes(ctx, true); err != nil {
		t.Fatal(err)
	}
	st, _, _, err := db.OwnState(ctx, own, time.Time{})
	must(t, err)
	if st.Kind != leasehold.SourceKindNNTP || st.SourceError == nil || st.SourceError.Error != "481 refused" {
		t.Fatalf("an own group as published: kind %q, source error %+v", st.Kind, st.SourceError)
	}
	seen := foldStart
	must(t, db.Write(ctx, func(tx *Tx) error {
		return tx.FoldNode("a", FleetNode{Node: leasehold.Node{Name: "usenet", Capacity: 1, LastSeenAt: &seen, Kinds: []string{leasehold.SourceKindNNTP}}}, 3)
	}))
	ns, err := db.PeerNodes(ctx)
	must(t, err)
	if len(ns) != 1 || len(ns[0].Kinds) != 1 || ns[0].Kinds[0] != leasehold.SourceKindNNTP {
		t.Fatalf("a peer's node here: %+v", ns)
	}
	// Owned here with open work: the peer's live nntp node counts.
	must(t, db.rawExec(`UPDATE groups SET owned = 1, urgent_tail = -1`))
	fs, err := db.Findings(ctx, foldStart, FindingBounds{NodeUnseen: time.Hour})
	must(t, err)
	for _, f := range fs {
		if f.Kind == leasehold.FindingNoWorkerForKind {
			t.Fatalf("no_worker_for_kind %q with the peer's nntp node live", f.Group)
		}
	}
	fs, err = db.Findings(ctx, foldStart.Add(2*time.Hour), FindingBounds{NodeUnseen: time.Hour})
	must(t, err)
	found := false
	for _, f := range fs {
		found = found || f.Kind == leasehold.FindingNoWorkerForKind && f.Group == leasehold.SourceKindNNTP
	}
	if !found {
		t.Fatalf("findings with the only nntp node unseen: %+v, want no_worker_for_kind nntp", fs)
	}
}
