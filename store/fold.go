package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// Peer sync's part of the catalog. A fleet's nodes each keep their own
// catalog; the state of the groups a peer owns is folded in here from its
// events (peer_groups names the origin), so this node's API shows the
// fleet and can take a group over when its owner is gone. Rows are keyed
// fleet-wide by names, never by the origin's ids. Folding writes no outbox
// rows: a node publishes only its own changes.

// PeerGroup is a group as its owner holds it, as peer sync carries it: the
// group row (its ID is the origin's), the claim revision it is owned under,
// the lease fence, holder and counts, and its newest snapshot.
type PeerGroup struct {
	leasehold.Group
	ClaimRev    uint64              `json:"claim_rev"`
	Fence       int64               `json:"fence"`
	Holder      string              `json:"holder"`
	LeasedAt    *time.Time          `json:"leased_at"`
	HeartbeatAt *time.Time          `json:"heartbeat_at"`
	Snapshot    *leasehold.Snapshot `json:"snapshot"`
	RangesDone  int64               `json:"ranges_done"`
	Headers     int64               `json:"headers"`
}

// PeerRange is one range of a PeerGroup (ID, GroupID and NodeID are the
// origin's); Node names its holder, empty when none.
type PeerRange struct {
	leasehold.Range
	Node string `json:"node"`
}

// Event kinds of peer sync.
const (
	EventGroupAdopted = "group_adopted"
)

var (
	qFoldGroupFind = wq(`SELECT g.id, g.owned, g.claim_rev FROM groups g WHERE g.name = ?`)
	qFoldGroupNew  = wq(`INSERT INTO groups (name, priority, active, range_size, start_id, tail_end, history_floor, free_since, created_at, updated_at, owned, claim_rev,
		quarantine_error, quarantine_node, quarantine_at, marks_low, marks_high, marks_at, kind, source_error, source_error_node, source_error_at, source_errors)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?8, 0, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)`)
	qFoldGroupSet = wq(`UPDATE groups SET priority = ?2, active = ?3, range_size = ?4, start_id = ?5, tail_end = ?6, history_floor = ?7,
		claim_rev = ?8, updated_at = ?9, owned = 0, quarantine_error = ?10, quarantine_node = ?11, quarantine_at = ?12,
		marks_low = ?13, marks_high = ?14, marks_at = ?15, kind = ?16, source_error = ?17, source_error_node = ?18, source_error_at = ?19,
		source_errors = ?20 WHERE id = ?1`)
	qFoldLeaseNew = wq(`INSERT INTO group_leases (group_id, fence) VALUES (?, ?)`)
	qFoldLeaseSet = wq(`UPDATE group_leases SET fence = max(fence, ?2) WHERE group_id = ?1`)
	// qLeaseFenceLead: a takeover's fence lead (FenceLead).
	qLeaseFenceLead = wq(`UPDATE group_leases SET fence = fence + ?2 WHERE group_id = ?1`)
	qFoldPeerGroup  = wq(`INSERT INTO peer_groups (group_id, origin, holder, fence, leased_at, heartbeat_at,
		snapshot_next, snapshot_size, snapshot_sha256, snapshot_at, ranges_done, headers, updated_at)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
		ON CONFLICT (group_id) DO UPDATE SET origin = ?2, holder = ?3, fence = ?4, leased_at = ?5, heartbeat_at = ?6,
		snapshot_next = ?7, snapshot_size = ?8, snapshot_sha256 = ?9, snapshot_at = ?10, ranges_done = ?11, headers = ?12, updated_at = ?13`)
	// A peer's ranges, in statements of foldRangeBatches rows: a
	// catch-up of millions of ranges pays a statement's fixed cost (its
	// journal, its binding) once for many.
	qFoldRanges = func() (qs []*query) {
		for _, n := range foldRangeBatches {
			qs = append(qs, wq(foldRangesSQL(n)))
		}
		return qs
	}()
	// qGroupUrgent for the groups of a JSON array of ids.
	qGroupsUrgent = wq(`UPDATE groups SET
		urgent_tail = (SELECT min(priority) FROM ranges WHERE group_id = groups.id AND status IN ('planned', 'leased') AND priority < 0),
		urgent_hist = (SELECT min(priority) FROM ranges WHERE group_id = groups.id AND status IN ('planned', 'leased') AND priority >= 0)
		WHERE id IN (SELECT value FROM json_each(?1))`)
	qFoldNode = wq(`INSERT INTO peer_nodes (origin, name, priority_min, priority_max, capacity, paused, paused_by, paused_at, held, last_seen_at, updated_at, kinds, token_hash)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
		ON CONFLICT (origin, name) DO UPDATE SET priority_min = ?3, priority_max = ?4, capacity = ?5, paused = ?6, paused_by = ?7,
		paused_at = ?8, held = ?9, last_seen_at = ?10, updated_at = ?11, kinds = ?12, token_hash = ?13`)
	qFoldNodeGone = wq(`DELETE FROM peer_nodes WHERE origin = ? AND name = ?`)
	qFoldPeer     = wq(`INSERT INTO peers (name, catalog_id, last_event, last_event_at, folded_seq, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
		ON CONFLICT (name) DO UPDATE SET catalog_id = ?2, last_event = max(last_event, ?3), last_event_at = max(coalesce(last_event_at, 0), ?4),
		folded_seq = max(folded_seq, ?5), updated_at = ?6`)
	qRebuildOwe  = wq(`INSERT INTO rebuilds_owed (origin, since) VALUES (?1, ?2) ON CONFLICT (origin) DO NOTHING`)
	qRebuildDone = wq(`DELETE FROM rebuilds_owed WHERE origin = ?`)
	qFoldMarkSet = wq(`INSERT INTO fold_mark (id, stream, seq, updated_at) VALUES (1, ?1, ?2, ?3)
		ON CONFLICT (id) DO UPDATE SET stream = ?1, seq = ?2, updated_at = ?3`)
	// Ranges do not overlap and the floor is a range's start, so a range
	// below the floor starts below it: both ends are index seeks.
	qFoldRangesOutside = wq(`DELETE FROM ranges WHERE group_id = ?1 AND (start_id > ?2 OR start_id < ?3)`)
	qPeerGroupOf       = wq(`SELECT origin, snapshot_next FROM peer_groups WHERE group_id = ?`)
	qPeerGroupDrop     = wq(`DELETE FROM peer_groups WHERE group_id = ?`)
	qGroupAdopt        = wq(`UPDATE groups SET owned = 1, claim_rev = ?2 WHERE id = ?1 RETURNING start_id`)
	qGroupClaimRev     = wq(`UPDATE groups SET claim_rev = ?2 WHERE id = ?1`)
	qLeaseSnapNext     = wq(`SELECT snapshot_next FROM group_leases WHERE group_id = ?`)
	qPeerRebuilt       = wq(`UPDATE peers SET rebuilds = rebuilds + 1, updated_at = ?2 WHERE name = ?1`)
	qPeerNodeNames     = wq(`SELECT name FROM peer_nodes WHERE origin = ?`)
	qGroupMirrored     = wq(`SELECT EXISTS (SELECT 1 FROM peer_groups WHERE group_id = ?)`)

	qOutboxSent  = wq(`UPDATE events SET sent = 1 WHERE sent = 0 AND id <= ?`)
	qOutboxPrune = wq(`DELETE FROM events WHERE id <= min(?1, (SELECT min(id) FROM events) + ?2) AND sent = 1`)
)

// FoldGroup folds a peer's state of a group into the catalog, creating the
// group if it is new here, and reports the local id and whether the state
// was taken. It is taken under a claim at least as new as the one the
// group was last owned under here, so a late event of an old owner never
// undoes a newer owner's state; a group this node owns is left alone
// unless the state comes under a newer claim, which means this node lost
// the group: it is disowned first, ending a lease held here.
func (tx *Tx) FoldGroup(origin string, g PeerGroup, maxAttempts int64) (int64, bool, error) {
	if !leasehold.ValidGroupName(g.Name) || g.RangeSize < 1 {
		return 0, false, leasehold.Errorf(leasehold.KindInvalid, "peer %q: group %q is not valid", origin, g.Name)
	}
	if dead, err := tx.buried(g.Name, g.ClaimRev); err != nil || dead {
		// Deleted in the fleet since: a late event makes nothing again.
		return 0, false, err
	}
	now := ms(tx.now)
	carried, err := carriedColumns(origin, g)
	if err != nil {
		return 0, false, err
	}
	var id, rev int64
	var owned bool
	err = tx.queryRow(qFoldGroupFind, g.Name).Scan(&id, &owned, &rev)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		res, err := tx.exec(qFoldGroupNew, append([]any{g.Name, g.Priority, g.Active, g.RangeSize, g.Start, g.TailEnd, g.HistoryFloor, now, ms(g.CreatedAt), g.ClaimRev},
			carried...)...)
		if err != nil {
			return 0, false, mapError(err, "folding a peer's group")
		}
		if id, err = res.LastInsertId(); err != nil {
			return 0, false, mapError(err, "folding a peer's group")
		}
		if _, err := tx.exec(qFoldLeaseNew, id, g.Fence); err != nil {
			return 0, false, mapError(err, "folding a peer's group")
		}
	case err != nil:
		return 0, false, mapError(err, "folding a peer's group")
	default:
		if int64(g.ClaimRev) < rev {
			// A late event of an earlier owner: its state is not taken,
			// its plans are (every node folds it alike, so all converge).
			return id, false, tx.replayPlans(id, g.TailEnd, g.HistoryFloor)
		}
		if owned && int64(g.ClaimRev) == rev {
			return id, false, nil
		}
		if err := tx.foldKnownGroup(id, rev, owned, g, maxAttempts, now, carried); err != nil {
			return 0, false, err
		}
	}
	var snapNext, snapSize, snapAt any
	var snapSHA any
	if s := g.Snapshot; s != nil {
		snapNext, snapSize, snapSHA, snapAt = s.Next, s.Size, s.SHA256, ms(s.At)
	}
	if _, err := tx.exec(qFoldPeerGroup, id, origin, g.Holder, g.Fence, nullMS(g.LeasedAt), nullMS(g.HeartbeatAt),
		snapNext, snapSize, snapSHA, snapAt, g.RangesDone, g.Headers, now); err != nil {
		return 0, false, mapError(err, "folding a peer's group")
	}
	return id, true, nil
}

// carriedColumns are what a group's state carries to whichever node owns
// it next, as the last columns of qFoldGroupNew and qFoldGroupSet: its
// quarantine, water marks, kind and source error.
func carriedColumns(origin string, g PeerGroup) ([]any, error) {
	// A quarantine travels with the group: its window is the same at
	// whichever node owns it next (rule 10).
	var qErr, qNode, qAt any
	if q := g.Quarantine; q != nil {
		qErr, qNode, qAt = q.Error, q.Node, ms(q.At)
	}
	// So do the source's water marks (rule 11), shown wherever the group is.
	var low, high, marksAt any
	if g.MarksAt != nil && g.Low != nil && g.High != nil {
		low, high, marksAt = *g.Low, *g.High, ms(*g.MarksAt)
	}
	// And its kind (rule 12), so only a node of that kind leases it after
	// a takeover; a peer from before kinds sends none: the default.
	kind := g.Kind
	if kind == "" {
		kind = leasehold.DefaultSourceKind
	}
	if !leasehold.ValidSourceKind(kind) {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "peer %q: group %q has an invalid kind %q", origin, g.Name, kind)
	}
	// And what its source last said (rule 13); the count in a row is not
	// carried, so a peer's error counts as the one that makes a finding.
	var sErr, sNode, sAt any
	var sCount int64
	if e := g.SourceError; e != nil {
		sErr, sNode, sAt, sCount = e.Error, e.Node, ms(e.At), 2
	}
	return []any{qErr, qNode, qAt, low, high, marksAt, kind, sErr, sNode, sAt, sCount}, nil
}

// foldKnownGroup takes a peer's state of group id, known here under claim
// revision rev, at the same claim or a newer one; a group this node owned
// is disowned first.
func (tx *Tx) foldKnownGroup(id, rev int64, owned bool, g PeerGroup, maxAttempts int64, now int64, carried []any) error {
	if owned {
		if err := tx.disown(id, maxAttempts); err != nil {
			return err
		}
	}
	if _, err := tx.exec(qFoldGroupSet, append([]any{id, g.Priority, g.Active, g.RangeSize, g.Start, g.TailEnd, g.HistoryFloor, g.ClaimRev, now},
		carried...)...); err != nil {
		return mapError(err, "folding a peer's group")
	}
	if _, err := tx.exec(qFoldLeaseSet, id, g.Fence); err != nil {
		return mapError(err, "folding a peer's group")
	}
	if int64(g.ClaimRev) <= rev {
		return nil
	}
	// The first state under a newer claim: ranges outside the plan it
	// comes with are not the new owner's. This node planned them under an
	// earlier claim (its own, or an earlier owner's late plan it replayed)
	// that the new owner had not heard of when it adopted the group. They
	// go, and come back as the new owner replays that plan, in the same
	// place, so planning them never meets them. Only a newer claim: a
	// state under the same claim may be an older message folded again
	// after a rebuild, whose plan the ranges here have outgrown.
	res, err := tx.exec(qFoldRangesOutside, id, g.TailEnd, g.HistoryFloor)
	if err != nil {
		return mapError(err, "folding a peer's group")
	}
	if n, _ := res.RowsAffected(); n > 0 {
		if _, err := tx.exec(qGroupUrgent, id); err != nil {
			return mapError(err, "folding a peer's group")
		}
	}
	return nil
}

// replayPlans plans the group's tail up to tailEnd and its history down to
// floor, as an earlier owner did in an event that reached the fleet only
// after the group moved on (the owner was cut off or died, or lost its
// claim while the stream elected a leader, before it could publish). Plans
// are facts, idempotent and never shrinking, and that owner acknowledged
// them, and the finishes in them; what it did in those ranges is not taken
// (its window did not move with the claim), so they are planned afresh and
// done again by whoever owns the group. Every node folds the same late
// event and plans the same ranges from the same tail, so the fleet
// converges whether or not the group is owned here now. A replay too large
// for one call is left to the next plan.
func (tx *Tx) replayPlans(groupID, tailEnd, floor int64) error {
	g, err := tx.Group(groupID)
	if err != nil {
		return err
	}
	if tailEnd > g.TailEnd {
		if _, err := tx.PlanTail(groupID, tailEnd); err != nil && leasehold.KindOf(err) != leasehold.KindUnprocessable {
			return unreplayable(g.Name, err)
		}
	}
	if floor < g.HistoryFloor {
		if _, err := tx.PlanHistory(groupID, floor); err != nil && leasehold.KindOf(err) != leasehold.KindUnprocessable {
			return unreplayable(g.Name, err)
		}
	}
	return nil
}

// unreplayable makes a plan that cannot be replayed here (a range in its
// way) an event the folder passes over with a log line: one group's plan
// missing here is found by the fleet's convergence checks, while an error
// the folder retries would stop it folding anything, from every peer.
func unreplayable(group string, err error) error {
	if leasehold.KindOf(err) == leasehold.KindUnavailable || leasehold.KindOf(err) == leasehold.KindNoSpace {
		return err // the catalog cannot write now: tried again
	}
	return leasehold.Wrap(leasehold.KindInvalid, err, "replaying an earlier owner's plan of group %s: %v", group, err)
}

// OwnPlanLost reports whether a plan this node made of a group (high: a
// tail planned up to it; low: history planned down to it) is missing from
// its own state of the group. Plans never shrink while a node owns a
// group, so one is missing only when the node made it under an earlier
// claim, lost the group before the stream took the event, folded the new
// owner's state (which drops the ranges outside that owner's plan), and
// won the group back before the event went out (ReplayOwnPlan). A group
// mirrored here (a peer's: its plan goes out as a late plan) or gone is
// not this node's to plan.
func (db *DB) OwnPlanLost(ctx context.Context, groupID int64, high, low *int64) (bool, error) {
	var tail, floor int64
	var mirrored bool
	err := db.queryRow(ctx, `SELECT g.tail_end, g.history_floor, EXISTS (SELECT 1 FROM peer_groups p WHERE p.group_id = g.id)
		FROM groups g WHERE g.id = ?`, groupID).Scan(&tail, &floor, &mirrored)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, mapError(err, "reading a group's plan")
	}
	return !mirrored && planBeyond(tail, floor, high, low), nil
}

func planBeyond(tail, floor int64, high, low *int64) bool {
	return (high != nil && *high > tail) || (low != nil && *low < floor)
}

// ReplayOwnPlan plans again, in this node's own state of a group, a plan
// it made and acknowledged under an earlier claim that the state no
// longer carries (OwnPlanLost), as every other node replays a late plan:
// the ranges come back planned, and this node's workers do them again
// (what was done in them went with the old claim's window). Sent with the
// state as it is, the event would tell no node of the plan, and the
// finishes acknowledged in it would be lost. Reports whether anything was
// planned; the same checks as OwnPlanLost, made again inside the write.
func (tx *Tx) ReplayOwnPlan(groupID int64, high, low *int64) (bool, error) {
	g, err := tx.Group(groupID)
	if leasehold.KindOf(err) == leasehold.KindNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var mirrored bool
	if err := tx.queryRow(qGroupMirrored, groupID).Scan(&mirrored); err != nil {
		return false, mapError(err, "reading a group's plan")
	}
	if mirrored || !planBeyond(g.TailEnd, g.HistoryFloor, high, low) {
		return false, nil
	}
	tail, floor := g.TailEnd, g.HistoryFloor
	if high != nil {
		tail = *high
	}
	if low != nil {
		floor = *low
	}
	return true, tx.replayPlans(groupID, tail, floor) // plans only past what is planned
}

// ReplayLatePlan replays one plan an earlier owner of the group made and
// published only once the group was no longer its own, so it could send
// the plan without the group's state (its catalog had taken the new
// owner's): high plans the tail up to it, low the history down to it, as
// replayPlans does for a late event that carries its state. Each plan is
// replayed alone and in stream order, so the ranges come out with the
// bounds the earlier owner gave them. A group unknown here is passed over.
func (tx *Tx) ReplayLatePlan(name string, high, low *int64) error {
	g, err := tx.GroupByName(name)
	if leasehold.KindOf(err) == leasehold.KindNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	tail, floor := g.TailEnd, g.HistoryFloor
	if high != nil {
		tail = *high
	}
	if low != nil {
		floor = *low
	}
	return tx.replayPlans(g.ID, tail, floor)
}

// FoldRanges folds a peer's ranges of the group FoldGroup took (by its
// local id), matched by start, and brings the group's lease-choice key up
// to date, so the group is ready to lease the moment it is adopted.
func (tx *Tx) FoldRanges(groupID int64, rs []PeerRange) error {
	return tx.FoldGroupsRanges([]GroupRanges{{GroupID: groupID, Ranges: rs}})
}

// GroupRanges is a peer's ranges of one group, by the group's local id.
type GroupRanges struct {
	GroupID int64
	Ranges  []PeerRange
}

// FoldGroupsRanges is FoldRanges for many groups at once, as a joining
// node folds a dump chunk: the ranges in a few statements of many rows,
// and every group's key in one more. The ranges are folded in order,
// each as FoldRanges alone would.
func (tx *Tx) FoldGroupsRanges(gs []GroupRanges) error {
	changed, err := tx.foldRangeRows(gs)
	if err != nil {
		return err
	}
	if len(gs) == 0 || !changed {
		// The keys follow from the ranges: none changed, none moves.
		return nil
	}
	ids := make([]byte, 0, 16*len(gs)+2)
	ids = append(ids, '[')
	for _, g := range gs {
		if len(ids) > 1 {
			ids = append(ids, ',')
		}
		ids = strconv.AppendInt(ids, g.GroupID, 10)
	}
	_, err = tx.exec(qGroupsUrgent, string(append(ids, ']')))
	return mapError(err, "folding a peer's ranges")
}

// foldRangeRows writes FoldGroupsRanges' ranges, leaving the groups' keys
// as they are, and reports whether it wrote any row (a range held as it
// is already is not written).
func (tx *Tx) foldRangeRows(gs []GroupRanges) (bool, error) {
	args := make([]any, 0, foldRangeColumns*foldRangeBatches[0])
	changed := false
	flush := func() error {
		for len(args) > 0 {
			n := len(args) / foldRangeColumns
			i := 0
			for foldRangeBatches[i] > n {
				i++
			}
			k := foldRangeBatches[i] * foldRangeColumns
			res, err := tx.exec(qFoldRanges[i], args[:k]...)
			if err != nil {
				return mapError(err, "folding a peer's ranges")
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				changed = true // unknown counts as changed
			}
			args = append(args[:0], args[k:]...)
		}
		return nil
	}
	for _, g := range gs {
		for _, r := range g.Ranges {
			if err := validPeerRange(r); err != nil {
				return false, err
			}
			// The worker's last error travels with the range (rule 10).
			var lastErr any
			if r.LastError != nil {
				lastErr = *r.LastError
			}
			args = append(args, g.GroupID, r.Start, r.End, r.Next, r.Status, r.Priority, r.Attempts, r.RuleVersion, r.Headers, ms(r.UpdatedAt),
				lastErr, nullMS(r.LastErrorAt))
			if len(args) == cap(args) {
				if err := flush(); err != nil {
					return false, err
				}
			}
		}
	}
	err := flush()
	return changed, err
}

// foldRangeBatches are the row counts of the range-folding statements,
// largest first, ending in 1 so any count can be folded.
var foldRangeBatches = []int{64, 8, 1}

// foldRangeColumns is the number of values a folded range binds.
const foldRangeColumns = 12

// foldRangesSQL is the upsert of n peer ranges, matched by start. A
// range the catalog holds as it is already is not written again: a peer
// sends a group's every range under a claim it has just won, and a range
// again in each batch it changed in, and the write of a row (its seven
// indexes, the tallies' trigger) is most of what folding it costs.
func foldRangesSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ranges (group_id, start_id, end_id, next_id, status, priority, attempts, rule_version, headers, updated_at,
		last_error, last_error_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?)")
	}
	b.WriteString(` ON CONFLICT (group_id, start_id) DO UPDATE SET end_id = excluded.end_id, next_id = excluded.next_id, status = excluded.status,
		priority = excluded.priority, node_id = NULL, attempts = excluded.attempts, rule_version = excluded.rule_version,
		headers = excluded.headers, updated_at = excluded.updated_at, last_error = excluded.last_error, last_error_at = excluded.last_error_at
		WHERE ranges.end_id IS NOT excluded.end_id OR ranges.next_id IS NOT excluded.next_id OR ranges.status IS NOT excluded.status
		OR ranges.priority IS NOT excluded.priority OR ranges.node_id IS NOT NULL OR ranges.attempts IS NOT excluded.attempts
		OR ranges.rule_version IS NOT excluded.rule_version OR ranges.headers IS NOT excluded.headers OR ranges.updated_at IS NOT excluded.updated_at
		OR ranges.last_error IS NOT excluded.last_error OR ranges.last_error_at IS NOT excluded.last_error_at`)
	return b.String()
}

// validPeerRange refuses a peer's range no catalog of this node could
// have written.
func validPeerRange(r PeerRange) error {
	if r.Start > r.End || r.Next < r.Start || r.Next > r.End+1 {
		return leasehold.Errorf(leasehold.KindInvalid, "peer range %d..%d (next %d) is not valid", r.Start, r.End, r.Next)
	}
	switch r.Status {
	case leasehold.StatusPlanned, leasehold.StatusLeased, leasehold.StatusDone, leasehold.StatusFailed:
		return nil
	}
	return leasehold.Errorf(leasehold.KindInvalid, "peer range %d..%d: status %q is not valid", r.Start, r.End, r.Status)
}

// FoldNode folds a worker node of a peer, with its token's hash when the
// peer sends one (a hash that is not a sha-256 is dropped), and keeps the
// node's visitor here, if it has one, in step (visitors.go).
func (tx *Tx) FoldNode(origin string, n FleetNode, maxAttempts int64) error {
	if !leasehold.ValidNodeName(n.Name) {
		return leasehold.Errorf(leasehold.KindInvalid, "peer %q: node %q is not valid", origin, n.Name)
	}
	kinds, err := kindsJSON(n.Kinds)
	if err != nil {
		return leasehold.Errorf(leasehold.KindInvalid, "peer %q: node %q: %v", origin, n.Name, err)
	}
	n.TokenHash = validHash(n.TokenHash)
	_, err = tx.exec(qFoldNode, origin, n.Name, n.PriorityMin, n.PriorityMax, n.Capacity, n.Paused, n.PausedBy,
		nullMS(n.PausedAt), n.Held, nullMS(n.LastSeenAt), ms(tx.now), kinds, n.TokenHash)
	if err != nil {
		return mapError(err, "folding a peer's node")
	}
	return tx.stepVisitor(origin, n, kinds, maxAttempts)
}

// FoldNodeGone removes a worker node a peer deleted, and its visitor
// here, releasing what that holds.
func (tx *Tx) FoldNodeGone(origin, name string, maxAttempts int64) error {
	if _, err := tx.exec(qFoldNodeGone, origin, name); err != nil {
		return mapError(err, "folding a peer's node")
	}
	return tx.visitorGone(origin, name, maxAttempts)
}

// FoldPeer records the last event folded from a peer: its outbox id, when
// it was made, and the stream position it was at.
func (tx *Tx) FoldPeer(origin, catalog string, event int64, at time.Time, seq uint64) error {
	_, err := tx.exec(qFoldPeer, origin, catalog, event, ms(at), seq, ms(tx.now))
	return mapError(err, "recording a peer")
}

// SetFoldMark records that the stream's incarnation stream is folded
// through seq. Written in the transaction of the fold it marks, it never
// says more than the catalog holds.
func (tx *Tx) SetFoldMark(stream string, seq uint64) error {
	_, err := tx.exec(qFoldMarkSet, stream, seq, ms(tx.now))
	return mapError(err, "marking the fold")
}

// OweRebuild records that origin's part is owed a rebuild from its dump
// (one a gap called for failed, or one about to be made); an origin owed
// already keeps its since.
func (db *DB) OweRebuild(ctx context.Context, origin string) error {
	return db.Write(ctx, func(tx *Tx) error { return tx.OweRebuild(origin) })
}

// OweRebuild is DB.OweRebuild in a write, so a fold that calls for a
// rebuild owes it in the transaction that moves the mark.
func (tx *Tx) OweRebuild(origin string) error {
	_, err := tx.exec(qRebuildOwe, origin, ms(tx.now))
	return mapError(err, "owing a rebuild")
}

// RebuildDone records that origin's part was rebuilt: it is owed nothing.
func (db *DB) RebuildDone(ctx context.Context, origin string) error {
	return db.Write(ctx, func(tx *Tx) error {
		_, err := tx.exec(qRebuildDone, origin)
		return mapError(err, "recording a rebuild")
	})
}

// RebuildsOwed lists the origins owed a rebuild, by name.
func (db *DB) RebuildsOwed(ctx context.Context) ([]string, error) {
	rows, err := db.query(ctx, `SELECT origin FROM rebuilds_owed ORDER BY origin`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, mapError(err, "listing rebuilds owed")
		}
		out = append(out, o)
	}
	return out, mapError(rows.Err(), "listing rebuilds owed")
}

// FoldMark is how far this node has folded the stream: the incarnation and
// the sequence; "" and 0 when it never folded.
func (db *DB) FoldMark(ctx context.Context) (stream string, seq uint64, err error) {
	err = db.queryRow(ctx, `SELECT stream, seq FROM fold_mark WHERE id = 1`).Scan(&stream, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return stream, seq, mapError(err, "reading the fold mark")
}

// PeerRebuilt ends the rebuild of origin's part from its dump: worker
// nodes of origin not in the dump are removed, and the rebuild counted.
func (tx *Tx) PeerRebuilt(origin string, nodes []string, maxAttempts int64) error {
	keep := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		keep[n] = true
	}
	rows, err := tx.query(qPeerNodeNames, origin)
	if err != nil {
		return mapError(err, "rebuilding a peer")
	}
	var gone []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return mapError(err, "rebuilding a peer")
		}
		if !keep[n] {
			gone = append(gone, n)
		}
	}
	if err := rows.Close(); err != nil {
		return mapError(err, "rebuilding a peer")
	}
	for _, n := range gone {
		if err := tx.FoldNodeGone(origin, n, maxAttempts); err != nil {
			return err
		}
	}
	_, err = tx.exec(qPeerRebuilt, origin, ms(tx.now))
	return mapError(err, "rebuilding a peer")
}

// peerIndexes are the indexes only peer sync reads. Every write of their
// columns pays for them, so a node running alone goes without.
var peerIndexes = []struct{ name, create string }{
	// The publisher's ranges of a group changed since its first event in
	// a batch (OwnState): one seek a group.
	{"ranges_group_updated", `CREATE INDEX ranges_group_updated ON ranges (group_id, updated_at)`},
}

// PeerIndexes makes the indexes peer sync reads (on) or drops them (off),
// and returns the names of those it made or dropped. Making one reads
// every range, a few seconds for millions, with the writer held. Open
// decides them, as Options.NoOutbox says (settlePeerIndexes); this is for
// tests that change them on an open catalog.
func (db *DB) PeerIndexes(ctx context.Context, on bool) ([]string, error) {
	var changed []string
	err := db.Write(ctx, func(tx *Tx) error {
		var err error
		changed, err = changePeerIndexes(on, func(q string, args ...any) scanner { return tx.queryRowSQL(q, args...) },
			func(q string) error { _, err := tx.execSQL(q); return err })
		return err
	})
	return changed, err
}

// settlePeerIndexes makes (on) or drops peer sync's indexes as Open opens
// the catalog, before its writer runs, in one transaction of its own.
func (db *DB) settlePeerIndexes(on bool) error {
	tx, err := db.w.Begin()
	if err != nil {
		return mapError(err, "changing peer sync's indexes")
	}
	defer tx.Rollback()
	if _, err := changePeerIndexes(on, func(q string, args ...any) scanner { return tx.QueryRow(q, args...) },
		func(q string) error { _, err := tx.Exec(q); return err }); err != nil {
		return err
	}
	return mapError(tx.Commit(), "changing peer sync's indexes")
}

// changePeerIndexes makes or drops each of peerIndexes not yet as on
// says, reading the schema with queryRow and changing it with exec, and
// returns the names it changed.
func changePeerIndexes(on bool, queryRow func(q string, args ...any) scanner, exec func(q string) error) ([]string, error) {
	var changed []string
	for _, ix := range peerIndexes {
		var n int
		if err := queryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = ?`, ix.name).Scan(&n); err != nil {
			return nil, mapError(err, "reading the schema")
		}
		if (n > 0) == on {
			continue
		}
		q := ix.create
		if !on {
			q = "DROP INDEX " + ix.name
		}
		if err := exec(q); err != nil {
			return nil, mapError(err, "changing peer sync's indexes")
		}
		changed = append(changed, ix.name)
	}
	return changed, nil
}

// Peers lists the fleet's other nodes seen here, by name, with how many
// groups and worker nodes of theirs are folded here.
func (db *DB) Peers(ctx context.Context) ([]leasehold.Peer, error) {
	rows, err := db.query(ctx, `SELECT p.name, p.catalog_id, p.last_event_at, p.folded_seq, p.rebuilds,
		(SELECT count(*) FROM peer_groups g WHERE g.origin = p.name), (SELECT count(*) FROM peer_nodes n WHERE n.origin = p.name)
		FROM peers p ORDER BY p.name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	now := db.now()
	out := []leasehold.Peer{}
	for rows.Next() {
		var p leasehold.Peer
		var at sql.NullInt64
		if err := rows.Scan(&p.Name, &p.Catalog, &at, &p.Folded, &p.Rebuilds, &p.Groups, &p.Nodes); err != nil {
			return nil, mapError(err, "listing peers")
		}
		if p.LastEventAt = fromNullMS(at); p.LastEventAt != nil {
			p.LagS = max(0, now.Sub(*p.LastEventAt).Seconds())
		}
		out = append(out, p)
	}
	return out, mapError(rows.Err(), "listing peers")
}

// PeerMembers lists the fleet's other nodes seen here, by name, with only
// their last event's time: what their member states need (the members
// gauge, read at every scrape), without Peers' count of their groups.
func (db *DB) PeerMembers(ctx context.Context) ([]leasehold.Peer, error) {
	rows, err := db.query(ctx, `SELECT name, last_event_at FROM peers ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []leasehold.Peer{}
	for rows.Next() {
		var p leasehold.Peer
		var at sql.NullInt64
		if err := rows.Scan(&p.Name, &at); err != nil {
			return nil, mapError(err, "listing peers")
		}
		p.LastEventAt = fromNullMS(at)
		out = append(out, p)
	}
	return out, mapError(rows.Err(), "listing peers")
}

// PeerNodes lists the worker nodes registered at peers, by origin, name.
func (db *DB) PeerNodes(ctx context.Context) ([]PeerNode, error) {
	rows, err := db.query(ctx, `SELECT origin, name, priority_min, priority_max, capacity, paused, paused_by, paused_at, held, last_seen_at, kinds
		FROM peer_nodes ORDER BY origin, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PeerNode
	for rows.Next() {
		var n PeerNode
		var pausedAt, seen sql.NullInt64
		var kinds string
		if err := rows.Scan(&n.Origin, &n.Name, &n.PriorityMin, &n.PriorityMax, &n.Capacity, &n.Paused, &n.PausedBy, &pausedAt, &n.Held, &seen, &kinds); err != nil {
			return nil, mapError(err, "listing peer nodes")
		}
		n.Kinds = parseKinds(kinds)
		n.PausedAt, n.LastSeenAt = fromNullMS(pausedAt), fromNullMS(seen)
		out = append(out, n)
	}
	return out, mapError(rows.Err(), "listing peer nodes")
}

// PeerNode is a worker node registered at a peer.
type PeerNode struct {
	Origin string `json:"origin"`
	leasehold.Node
}

// GroupOrigin names the peer whose state the group is here ("" when it
// is this node's own).
func (db *DB) GroupOrigin(ctx context.Context, groupID int64) (string, error) {
	var origin string
	err := db.queryRow(ctx, `SELECT origin FROM peer_groups WHERE group_id = ?`, groupID).Scan(&origin)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return origin, mapError(err, "reading a group's origin")
}

func nullMS(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ms(*t)
}

var qRangeAt = wq(`SELECT id FROM ranges WHERE group_id = ? AND start_id = ?`)

// RangeAt finds a group's range by its start: ranges are the same across
// the fleet by group and start, never by id. None is not found.
func (tx *Tx) RangeAt(groupID, start int64) (int64, error) {
	var id int64
	err := tx.queryRow(qRangeAt, groupID, start).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, leasehold.Errorf(leasehold.KindNotFound, "no range starts at %d in group %d", start, groupID)
	}
	return id, mapError(err, "finding a range")
}

// GroupByID reads a group by its id; a missing one is not found.
func (db *DB) GroupByID(ctx context.Context, id int64) (leasehold.Group, error) {
	g, err := scanGroup(db.queryRow(ctx, `SELECT `+groupColumns+` FROM groups g WHERE g.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return g, leasehold.Errorf(leasehold.KindNotFound, "group %d not found", id)
	}
	return g, mapError(err, "reading a group")
}
