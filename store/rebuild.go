package store

import (
	"database/sql"
	"errors"
	"strings"

	"github.com/leasehold/leasehold"
)

// A joining node rebuilds a peer's part from its dump: up to millions of
// groups this catalog has never seen, each with its ranges. Folded one
// group at a time (FoldGroup, then FoldGroupsRanges), a new group costs
// five statements and an UPDATE of its lease-choice key that reads back
// the ranges just written; here the groups new to this catalog are
// written in a few statements of many rows each, their key worked out
// from the ranges in hand. Groups the catalog knows already go the one-
// at-a-time way, under FoldGroup's claim rule.

// PeerGroupState is a peer's group with some (or all) of its ranges, as a
// dump chunk carries it.
type PeerGroupState struct {
	Group  PeerGroup
	Ranges []PeerRange
}

// rebuildBatches are the row counts of the multi-row statements below,
// largest first, ending in 1 so any count can be written.
var rebuildBatches = []int{64, 8, 1}

// rebuildTable is one table a rebuild writes new rows to: its INSERT's
// head (up to VALUES), its columns a row, and a statement a batch size.
type rebuildTable struct {
	columns int
	qs      []*query
}

func newRebuildTable(head string, columns int, tail string) rebuildTable {
	t := rebuildTable{columns: columns}
	row := "(" + strings.Repeat("?,", columns-1) + "?)"
	for _, n := range rebuildBatches {
		var b strings.Builder
		b.WriteString(head)
		b.WriteString(" VALUES ")
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(row)
		}
		b.WriteString(tail)
		t.qs = append(t.qs, wq(b.String()))
	}
	return t
}

var (
	// The groups as qFoldGroupNew writes them (owned = 0), with their id
	// chosen here and their lease-choice key from their ranges.
	rebuildGroups = newRebuildTable(`INSERT INTO groups (id, name, priority, active, range_size, start_id, tail_end, history_floor,
		urgent_tail, urgent_hist, free_since, created_at, updated_at, owned, claim_rev,
		quarantine_error, quarantine_node, quarantine_at, marks_low, marks_high, marks_at, kind, source_error, source_error_node, source_error_at, source_errors)`, 26, "")
	rebuildLeases     = newRebuildTable(`INSERT INTO group_leases (group_id, fence)`, 2, "")
	rebuildPeerGroups = newRebuildTable(`INSERT INTO peer_groups (group_id, origin, holder, fence, leased_at, heartbeat_at,
		snapshot_next, snapshot_size, snapshot_sha256, snapshot_at, ranges_done, headers, updated_at)`, 13, "")
)

// FoldPeerGroups folds a chunk of origin's dump: each group as FoldGroup
// would, and the ranges of those it takes as FoldGroupsRanges would. A
// group this catalog does not have is new: it is written with the rest of
// the chunk's new groups in a few statements, its lease-choice key worked
// out from its ranges (a group split over chunks is new only in its first;
// the next finds it and goes the one-at-a-time way). A chunk that names a
// group twice goes the one-at-a-time way whole.
func (tx *Tx) FoldPeerGroups(origin string, gs []PeerGroupState, maxAttempts int64) error {
	names := make(map[string]bool, len(gs))
	for _, g := range gs {
		if names[g.Group.Name] {
			return tx.foldPeerGroupsEach(origin, gs, maxAttempts)
		}
		names[g.Group.Name] = true
	}
	var next int64
	if err := tx.queryRow(qMaxGroupID).Scan(&next); err != nil {
		return mapError(err, "folding a peer's groups")
	}
	now := ms(tx.now)
	var groups, leases, peerGroups batchRows
	var known, fresh []GroupRanges
	for _, g := range gs {
		var id int64
		err := tx.queryRow(qFoldGroupFind, g.Group.Name).Scan(&id, new(bool), new(int64))
		switch {
		case err == nil:
			// Known here: the claim rule decides, one group at a time.
			id, ok, err := tx.FoldGroup(origin, g.Group, maxAttempts)
			if err != nil {
				return err
			}
			if ok && len(g.Ranges) > 0 {
				known = append(known, GroupRanges{GroupID: id, Ranges: g.Ranges})
			}
			continue
		case !errors.Is(err, sql.ErrNoRows):
			return mapError(err, "folding a peer's group")
		}
		if dead, err := tx.buried(g.Group.Name, g.Group.ClaimRev); err != nil {
			return err
		} else if dead {
			continue // deleted in the fleet since (FoldGroup)
		}
		row, err := newGroupRow(origin, next, g, now)
		if err != nil {
			return err
		}
		id, next = next, next+1
		groups.add(row...)
		leases.add(id, g.Group.Fence)
		peerGroups.add(peerGroupRow(id, origin, g.Group, now)...)
		if len(g.Ranges) > 0 {
			fresh = append(fresh, GroupRanges{GroupID: id, Ranges: g.Ranges})
		}
	}
	for _, w := range []struct {
		t    rebuildTable
		rows batchRows
	}{{rebuildGroups, groups}, {rebuildLeases, leases}, {rebuildPeerGroups, peerGroups}} {
		if err := tx.insertBatches(w.t, w.rows); err != nil {
			return mapError(err, "folding a peer's groups")
		}
	}
	// The new groups' keys are written already: their ranges only.
	if _, err := tx.foldRangeRows(fresh); err != nil {
		return err
	}
	return tx.FoldGroupsRanges(known)
}

// foldPeerGroupsEach is FoldPeerGroups one group at a time.
func (tx *Tx) foldPeerGroupsEach(origin string, gs []PeerGroupState, maxAttempts int64) error {
	for _, g := range gs {
		id, ok, err := tx.FoldGroup(origin, g.Group, maxAttempts)
		if err != nil {
			return err
		}
		if ok && len(g.Ranges) > 0 {
			if err := tx.FoldRanges(id, g.Ranges); err != nil {
				return err
			}
		}
	}
	return nil
}

// newGroupRow is the rebuildGroups row of a group new here, checked as
// FoldGroup and FoldGroupsRanges check it.
func newGroupRow(origin string, id int64, g PeerGroupState, now int64) ([]any, error) {
	pg := g.Group
	if !leasehold.ValidGroupName(pg.Name) || pg.RangeSize < 1 {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "peer %q: group %q is not valid", origin, pg.Name)
	}
	carried, err := carriedColumns(origin, pg)
	if err != nil {
		return nil, err
	}
	// The lease-choice key as qGroupUrgent reads it back: the lowest
	// priority of the open ranges in each lane.
	var tail, hist any
	for _, r := range g.Ranges {
		if err := validPeerRange(r); err != nil {
			return nil, err
		}
		if r.Status != leasehold.StatusPlanned && r.Status != leasehold.StatusLeased {
			continue
		}
		lane := &hist
		if r.Priority < 0 {
			lane = &tail
		}
		if *lane == nil || r.Priority < (*lane).(int64) {
			*lane = r.Priority
		}
	}
	return append([]any{id, pg.Name, pg.Priority, pg.Active, pg.RangeSize, pg.Start, pg.TailEnd, pg.HistoryFloor,
		tail, hist, now, ms(pg.CreatedAt), now, 0, pg.ClaimRev}, carried...), nil
}

// peerGroupRow is the peer_groups row of g, as qFoldPeerGroup writes it.
func peerGroupRow(id int64, origin string, g PeerGroup, now int64) []any {
	var snapNext, snapSize, snapAt, snapSHA any
	if s := g.Snapshot; s != nil {
		snapNext, snapSize, snapSHA, snapAt = s.Next, s.Size, s.SHA256, ms(s.At)
	}
	return []any{id, origin, g.Holder, g.Fence, nullMS(g.LeasedAt), nullMS(g.HeartbeatAt),
		snapNext, snapSize, snapSHA, snapAt, g.RangesDone, g.Headers, now}
}

// batchRows are rows of one table's values, one after another.
type batchRows []any

func (b *batchRows) add(v ...any) { *b = append(*b, v...) }

// insertBatches writes rows to t in as few statements as its batch sizes
// allow.
func (tx *Tx) insertBatches(t rebuildTable, rows batchRows) error {
	for len(rows) > 0 {
		n := len(rows) / t.columns
		i := 0
		for rebuildBatches[i] > n {
			i++
		}
		k := rebuildBatches[i] * t.columns
		if _, err := tx.exec(t.qs[i], rows[:k]...); err != nil {
			return err
		}
		rows = rows[k:]
	}
	return nil
}
