package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/leasehold/leasehold"
)

// The watchman's queries, one a kind of finding; each is an index seek
// (findings_test.go checks the plans). ?1 is the bound's instant, ?2 the
// limit.
const (
	qFindRangeStale = `SELECT g.name, r.id, coalesce(n.name, ''), r.heartbeat_at, r.next_id, ''
		FROM ranges r JOIN groups g ON g.id = r.group_id LEFT JOIN nodes n ON n.id = r.node_id
		WHERE r.status = 'leased' AND r.heartbeat_at < ?1 ORDER BY r.heartbeat_at DESC LIMIT ?2`
	qFindLeaseQuiet = `SELECT g.name, l.range_id, coalesce(n.name, ''), l.heartbeat_at, l.fence, ''
		FROM group_leases l JOIN groups g ON g.id = l.group_id LEFT JOIN nodes n ON n.id = l.node_id
		WHERE l.node_id IS NOT NULL AND l.heartbeat_at < ?1 ORDER BY l.heartbeat_at DESC LIMIT ?2`
	qFindRangeFailed = `SELECT g.name, r.id, coalesce(n.name, ''), r.updated_at, r.attempts, coalesce(r.last_error, '')
		FROM ranges r JOIN groups g ON g.id = r.group_id LEFT JOIN nodes n ON n.id = r.node_id
		WHERE r.status = 'failed' AND ?1 = ?1 ORDER BY r.updated_at DESC LIMIT ?2`
	// A node unseen is a finding while it holds groups (nodeMissed) or
	// was never seen: a worker that stopped after releasing its groups
	// strands nothing, and stays merely unseen in the nodes list.
	qFindNodeUnseen = `SELECT '', NULL, n.name, coalesce(n.last_seen_at, n.created_at), n.capacity, ''
		FROM nodes n WHERE n.home = '' AND coalesce(n.last_seen_at, n.created_at) < ?1 AND ` + nodeMissed + ` ORDER BY 4 DESC LIMIT ?2`
	// nodeMissed is whether node n is missed when unseen: it was never
	// seen (its worker never came) or holds a group (a worker that
	// stopped cleanly released them all; a killed one left them).
	nodeMissed       = `(n.last_seen_at IS NULL OR EXISTS (SELECT 1 FROM group_leases l WHERE l.node_id = n.id))`
	qFindSnapshotOld = `SELECT g.name, l.range_id, coalesce(n.name, ''), coalesce(l.snapshot_at, l.leased_at), coalesce(l.snapshot_next, 0), ''
		FROM group_leases l JOIN groups g ON g.id = l.group_id LEFT JOIN nodes n ON n.id = l.node_id
		WHERE l.node_id IS NOT NULL AND coalesce(l.snapshot_at, l.leased_at) < ?1 ORDER BY 4 DESC LIMIT ?2`
	// Quarantined groups (rule 10), by the partial index groups_quarantined.
	qFindWindowUnreadable = `SELECT g.name, NULL, g.quarantine_node, g.quarantine_at, 0, g.quarantine_error
		FROM groups g WHERE g.quarantine_at IS NOT NULL AND ?1 = ?1 ORDER BY g.quarantine_at DESC LIMIT ?2`
	// Flapping groups, by the partial index groups_flapping (its
	// condition is leasehold.FlapsFinding).
	qFindFlapping = `SELECT g.name, NULL, coalesce(n.name, ''), g.flapped_at, g.flaps, ''
		FROM groups g JOIN group_leases l ON l.group_id = g.id LEFT JOIN nodes n ON n.id = l.node_id
		WHERE g.flaps >= 5 AND ?1 = ?1 ORDER BY g.flapped_at DESC LIMIT ?2`
	// Groups whose source failed twice in a row (rule 13), by the
	// partial index groups_source_unreadable.
	qFindSourceUnreadable = `SELECT g.name, NULL, coalesce(g.source_error_node, ''), g.source_error_at, g.source_errors, coalesce(g.source_error, '')
		FROM groups g WHERE g.source_errors >= 2 AND ?1 = ?1 ORDER BY g.source_error_at DESC LIMIT ?2`
	// The kinds with open work (rule 12), one skip of groups_kind_open a
	// kind; few kinds, so few steps.
	qOpenKinds = `SELECT DISTINCT kind FROM groups WHERE active = 1 AND owned = 1 AND quarantine_at IS NULL
		AND (urgent_tail IS NOT NULL OR urgent_hist IS NOT NULL)`
	// The kinds of the live, unpaused nodes here and at peers: few rows.
	qLiveKinds = `SELECT DISTINCT k.value FROM nodes n, json_each(n.kinds) k WHERE n.paused = 0 AND coalesce(n.last_seen_at, n.created_at) >= ?1
		UNION SELECT DISTINCT k.value FROM peer_nodes p, json_each(p.kinds) k WHERE p.paused = 0 AND coalesce(p.last_seen_at, 0) >= ?1`
	// qBacklogOldest is one lane's oldest planned range: the first entry
	// of the ranges_planned_since index. The lane's count is a tally.
	qBacklogOldest = `SELECT updated_at FROM ranges WHERE status = 'planned' AND (priority < 0) = ? ORDER BY updated_at LIMIT 1`
)

// FindingBounds are the ages past which the watchman reports something as
// stuck. A zero bound turns that kind of finding off.
type FindingBounds struct {
	RangeHeartbeat time.Duration // a leased range not heartbeaten
	LeaseQuiet     time.Duration // a held lease whose holder went quiet
	NodeUnseen     time.Duration // a registered node not seen (never, or while it holds groups)
	SnapshotAge    time.Duration // a held group's snapshot older than this
	Limit          int           // at most this many findings of each kind
}

// Findings computes what is stuck as of now, from indexed queries only,
// newest first within each kind.
func (db *DB) Findings(ctx context.Context, now time.Time, b FindingBounds) ([]leasehold.Finding, error) {
	if b.Limit <= 0 {
		b.Limit = 100
	}
	out := []leasehold.Finding{}
	for _, fq := range findingQueries(b) {
		var err error
		if out, err = db.findingsOf(ctx, now, b.Limit, fq, out); err != nil {
			return nil, err
		}
	}
	stranded, err := db.kindsWithoutWorker(ctx, now, b.NodeUnseen)
	if err != nil {
		return nil, err
	}
	for _, kind := range stranded {
		out = append(out, leasehold.Finding{Kind: leasehold.FindingNoWorkerForKind, Group: kind, Since: now,
			Detail: fmt.Sprintf("groups of kind %s have planned work and no live, unpaused node reads kind %s: "+
				"run a worker for it on a node registered with --kinds %s (or add the kind to one: admin nodes kinds)", kind, kind, kind)})
	}
	return out, nil
}

// findingQuery is one kind of finding read by one query: its rows are
// older than bound (a kind without a bound is always asked), and detail
// says each in words from its age, a number and a text the query gives.
type findingQuery struct {
	kind   leasehold.FindingKind
	q      string
	bound  time.Duration
	detail func(age time.Duration, extra int64, text string) string
}

// findingQueries are the finding kinds read by a query, in the order shown.
func findingQueries(b FindingBounds) []findingQuery {
	round := func(d time.Duration) time.Duration { return d.Round(time.Second) }
	return []findingQuery{
		{leasehold.FindingRangeStale, qFindRangeStale, b.RangeHeartbeat, func(age time.Duration, next int64, _ string) string {
			return fmt.Sprintf("no heartbeat for %s (bound %s), resume point %d", round(age), b.RangeHeartbeat, next)
		}},
		{leasehold.FindingLeaseQuiet, qFindLeaseQuiet, b.LeaseQuiet, func(age time.Duration, fence int64, _ string) string {
			return fmt.Sprintf("holder quiet for %s at fence %d: awaiting takeover", round(age), fence)
		}},
		{leasehold.FindingRangeFailed, qFindRangeFailed, 0, func(_ time.Duration, attempts int64, lastErr string) string {
			if lastErr != "" {
				return fmt.Sprintf("failed after %s: %s; retry it when the cause is fixed", attemptsText(attempts), lastErr)
			}
			return fmt.Sprintf("failed after %s: retry it when the cause is fixed", attemptsText(attempts))
		}},
		{leasehold.FindingNodeUnseen, qFindNodeUnseen, b.NodeUnseen, func(age time.Duration, _ int64, _ string) string {
			return fmt.Sprintf("not seen for %s", round(age))
		}},
		{leasehold.FindingSnapshotOld, qFindSnapshotOld, b.SnapshotAge, func(age time.Duration, next int64, _ string) string {
			return fmt.Sprintf("window snapshot %s old (next %d) on a group in work", round(age), next)
		}},
		{leasehold.FindingWindowUnreadable, qFindWindowUnreadable, 0, func(_ time.Duration, _ int64, windowErr string) string {
			return fmt.Sprintf("quarantined: the window would not load: %s; keep it (DELETE .../quarantine), drop it (DELETE .../snapshot) or restore another (PUT .../snapshot)", windowErr)
		}},
		{leasehold.FindingFlapping, qFindFlapping, 0, func(_ time.Duration, flaps int64, _ string) string {
			return fmt.Sprintf("released or taken over %d times in a row with no range progressing: "+
				"read its workers' logs and the range's last error; pause the node that cannot work it", flaps)
		}},
		{leasehold.FindingSourceUnreadable, qFindSourceUnreadable, 0, func(_ time.Duration, n int64, sourceErr string) string {
			return fmt.Sprintf("its source could not be read %d times in a row: %s; fix the source or the worker's access, or make the group inactive", n, sourceErr)
		}},
	}
}

// findingsOf appends the findings of one query to out, at most limit.
// A kind whose bound is off (0 or less) is not asked, unless it has none.
func (db *DB) findingsOf(ctx context.Context, now time.Time, limit int, fq findingQuery, out []leasehold.Finding) ([]leasehold.Finding, error) {
	if fq.bound <= 0 && fq.kind != leasehold.FindingRangeFailed && fq.kind != leasehold.FindingWindowUnreadable && fq.kind != leasehold.FindingFlapping &&
		fq.kind != leasehold.FindingSourceUnreadable {
		return out, nil
	}
	rows, err := db.query(ctx, fq.q, ms(now.Add(-fq.bound)), limit)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var f leasehold.Finding
		var rng sql.NullInt64
		var since, extra int64
		var text string
		if err := rows.Scan(&f.Group, &rng, &f.Node, &since, &extra, &text); err != nil {
			return out, mapError(err, "computing findings")
		}
		f.Kind, f.Range, f.Since = fq.kind, nullInt(rng), fromMS(since)
		age := now.Sub(f.Since)
		f.AgeS = age.Seconds()
		f.Detail = fq.detail(age, extra, text)
		out = append(out, f)
	}
	return out, mapError(rows.Err(), "computing findings")
}

// kindsWithoutWorker lists the kinds with open work that no live node
// (seen within unseen, not paused, here or at a peer) reads: their groups
// would wait for ever (rule 12).
func (db *DB) kindsWithoutWorker(ctx context.Context, now time.Time, unseen time.Duration) ([]string, error) {
	if unseen <= 0 {
		unseen = 24 * time.Hour
	}
	read := func(q string, args ...any) (map[string]bool, error) {
		rows, err := db.query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		set := map[string]bool{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return nil, mapError(err, "computing findings")
			}
			set[k] = true
		}
		return set, mapError(rows.Err(), "computing findings")
	}
	open, err := read(qOpenKinds)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	live, err := read(qLiveKinds, ms(now.Add(-unseen)))
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range open {
		if !live[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Backlog counts planned work waiting for a worker, by lane, with the
// oldest waiting age. Backlog is never a finding. The counts are tallies
// and the oldest one seek a lane, so it costs the same at any size.
func (db *DB) Backlog(ctx context.Context, now time.Time) (leasehold.Backlog, error) {
	t, err := db.Tallies(ctx)
	if err != nil {
		return leasehold.Backlog{}, err
	}
	b := leasehold.Backlog{Tail: t.PlannedTail, History: t.PlannedHist}
	oldest := func(tail bool) (float64, error) {
		var at int64
		err := db.queryRow(ctx, qBacklogOldest, tail).Scan(&at)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		return now.Sub(fromMS(at)).Seconds(), mapError(err, "finding the oldest backlog")
	}
	if b.TailOldestS, err = oldest(true); err != nil {
		return b, err
	}
	if b.HistOldestS, err = oldest(false); err != nil {
		return b, err
	}
	b.Planned = b.Tail + b.History
	b.OldestAgeS = max(b.TailOldestS, b.HistOldestS)
	return b, nil
}

// FindingCounts counts what is stuck as of now by kind, without the
// per-kind limit of Findings, for the metrics gauges. Every kind is
// present, zero when nothing is stuck or the kind is turned off. Failed
// ranges and quarantined groups are tallies; the other kinds count what
// is held or registered past a bound (at most the fleet's leases and
// workers), never the catalog.
func (db *DB) FindingCounts(ctx context.Context, now time.Time, b FindingBounds) (map[leasehold.FindingKind]int64, error) {
	t, err := db.Tallies(ctx)
	if err != nil {
		return nil, err
	}
	out := map[leasehold.FindingKind]int64{
		leasehold.FindingRangeFailed:      t.Ranges[leasehold.StatusFailed],
		leasehold.FindingWindowUnreadable: t.Owned[leasehold.GroupQuarantined] + t.Unowned[leasehold.GroupQuarantined],
	}
	for _, c := range []struct {
		kind  leasehold.FindingKind
		q     string
		bound time.Duration
	}{
		{leasehold.FindingRangeStale, `SELECT count(*) FROM ranges WHERE status = 'leased' AND heartbeat_at < ?1`, b.RangeHeartbeat},
		{leasehold.FindingLeaseQuiet, `SELECT count(*) FROM group_leases WHERE node_id IS NOT NULL AND heartbeat_at < ?1`, b.LeaseQuiet},
		{leasehold.FindingNodeUnseen, `SELECT count(*) FROM nodes n WHERE n.home = '' AND coalesce(n.last_seen_at, n.created_at) < ?1 AND ` + nodeMissed, b.NodeUnseen},
		{leasehold.FindingSnapshotOld, `SELECT count(*) FROM group_leases WHERE node_id IS NOT NULL AND coalesce(snapshot_at, leased_at) < ?1`, b.SnapshotAge},
	} {
		out[c.kind] = 0
		if c.bound <= 0 {
			continue
		}
		var n int64
		if err := db.queryRow(ctx, c.q, ms(now.Add(-c.bound))).Scan(&n); err != nil {
			return nil, mapError(err, "counting findings")
		}
		out[c.kind] = n
	}
	var n int64
	if err := db.queryRow(ctx, `SELECT count(*) FROM groups WHERE source_errors >= 2`).Scan(&n); err != nil {
		return nil, mapError(err, "counting findings")
	}
	out[leasehold.FindingSourceUnreadable] = n
	stranded, err := db.kindsWithoutWorker(ctx, now, b.NodeUnseen)
	if err != nil {
		return nil, err
	}
	out[leasehold.FindingNoWorkerForKind] = int64(len(stranded))
	return out, nil
}

// attemptsText is a count of attempts in words: "1 attempt", "3 attempts".
func attemptsText(n int64) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
