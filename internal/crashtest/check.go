package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // the catalog is read as the node wrote it, with the node's SQLite

	"github.com/leasehold/leasehold"
)

// catalog is the node's catalog as read from catalog.db after a restart.
type catalog struct {
	groups     map[int64]*groupState
	heartbeat  map[int64]int64 // group: heartbeat_at, ms
	file       map[int64]int64 // group: snapshot_file
	held       map[int64]bool
	urgentTail map[int64]sql.NullInt64
	urgentHist map[int64]sql.NullInt64
	lastSeen   map[int64]sql.NullInt64 // node id
	integrity  []string
}

// readCatalog reads the catalog read-only, in one read transaction, while
// the node serves and the load is paused.
func readCatalog(ctx context.Context, path string) (*catalog, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	c := &catalog{
		groups: map[int64]*groupState{}, heartbeat: map[int64]int64{}, file: map[int64]int64{}, held: map[int64]bool{},
		urgentTail: map[int64]sql.NullInt64{}, urgentHist: map[int64]sql.NullInt64{}, lastSeen: map[int64]sql.NullInt64{},
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, name, range_size, tail_end, held, urgent_tail, urgent_hist FROM groups`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		g := &groupState{}
		var tail, hist sql.NullInt64
		var held bool
		if err := rows.Scan(&g.ID, &g.Name, &g.RangeSize, &g.TailEnd, &held, &tail, &hist); err != nil {
			rows.Close()
			return nil, err
		}
		c.groups[g.ID], c.held[g.ID], c.urgentTail[g.ID], c.urgentHist[g.ID] = g, held, tail, hist
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT group_id, node_id, fence, range_id, snapshot_next, snapshot_size, snapshot_sha256,
		snapshot_file, ranges_done, headers, heartbeat_at FROM group_leases`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var node, rng, next, size, file, beat sql.NullInt64
		var sha sql.NullString
		var fence, done, headers int64
		if err := rows.Scan(&id, &node, &fence, &rng, &next, &size, &sha, &file, &done, &headers, &beat); err != nil {
			rows.Close()
			return nil, err
		}
		g := c.groups[id]
		if g == nil {
			rows.Close()
			return nil, fmt.Errorf("lease row of group %d, which has no groups row", id)
		}
		g.Holder, g.Fence, g.RangeID, g.RangesDone, g.Headers = node.Int64, fence, rng.Int64, done, headers
		if next.Valid {
			g.Snap = &snapState{Next: next.Int64, Size: size.Int64, SHA256: sha.String}
			c.file[id] = file.Int64
		}
		c.heartbeat[id] = beat.Int64
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT id, group_id, start_id, end_id, next_id, status, priority, node_id, attempts, headers, rule_version
		FROM ranges ORDER BY id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r rangeState
		var gid int64
		var node sql.NullInt64
		if err := rows.Scan(&r.ID, &gid, &r.Start, &r.End, &r.Next, &r.Status, &r.Priority, &node, &r.Attempts, &r.Headers, &r.RuleVersion); err != nil {
			rows.Close()
			return nil, err
		}
		r.Node = node.Int64
		if g := c.groups[gid]; g != nil {
			g.Ranges = append(g.Ranges, r)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT id, last_seen_at FROM nodes`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var seen sql.NullInt64
		if err := rows.Scan(&id, &seen); err != nil {
			rows.Close()
			return nil, err
		}
		c.lastSeen[id] = seen
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return nil, err
		}
		c.integrity = append(c.integrity, line)
	}
	return c, rows.Close()
}

// candidate is one way the calls in doubt may have turned out for a group.
type candidate struct {
	g      *groupState
	landed []*op
}

// check compares the catalog with the model after a restart. Every call
// the node acknowledged must be in it; a call in doubt may have landed or
// not, and whichever it did becomes part of the model.
func (s *session) check(ctx context.Context) error {
	cat, err := readCatalog(ctx, filepath.Join(s.node.dir, "catalog.db"))
	if err != nil {
		s.violate("catalog", "reading the catalog: %v", err)
		return nil
	}
	s.stats.checks++
	if len(cat.integrity) != 1 || cat.integrity[0] != "ok" {
		s.violate("integrity", "PRAGMA integrity_check: %s", strings.Join(cat.integrity, "; "))
	}

	m := s.model
	m.mu.Lock()
	defer m.mu.Unlock()
	var leaseDoubts []*op
	holderDoubt := map[int64]*op{}
	for _, o := range m.doubts {
		switch {
		case o.applied: // a later grant proved it landed
		case o.kind == "lease":
			leaseDoubts = append(leaseDoubts, o)
		default:
			holderDoubt[o.group] = o
		}
	}
	used := map[*op]int64{}
	for _, id := range m.order {
		want := m.groups[id]
		got := cat.groups[id]
		if got == nil {
			s.violate("lost-write", "group %d (%s) is missing from the catalog", id, want.Name)
			continue
		}
		cands := []candidate{{g: want}}
		if o := holderDoubt[id]; o != nil && o.writes() {
			c := want.clone()
			m.rules.apply(c, o)
			cands = append(cands, candidate{g: c, landed: []*op{o}})
		}
		for _, base := range cands {
			if base.g.Holder != 0 {
				continue
			}
			for _, o := range leaseDoubts {
				c := base.g.clone()
				m.rules.lease(c, o.client.nodeID)
				cands = append(cands, candidate{g: c, landed: append(append([]*op(nil), base.landed...), o)})
			}
		}
		var match *candidate
		for i := range cands {
			if diff(cands[i].g, got) == "" {
				match = &cands[i]
				break
			}
		}
		s.stats.rangesChecked += len(want.Ranges)
		if match == nil {
			s.violate("lost-write", "group %d (%s): %s", id, want.Name, diff(want, got))
			m.groups[id] = got // go on from what the node has, so one loss is one violation
			continue
		}
		for _, o := range match.landed {
			if prev, ok := used[o]; ok {
				s.violate("fence", "one lease by %s landed on groups %d and %d", o.client.name, prev, id)
			}
			used[o] = id
			o.applied = true
			if o.kind != "snapshot" {
				m.lastSeen[o.client] = o.sent
			}
			m.lastBeat[id] = o.sent
		}
		m.groups[id] = match.g
	}
	for _, o := range m.doubts {
		if !o.applied && o.writes() {
			s.stats.doubtLost++
		} else if o.writes() {
			s.stats.doubtLanded++
		}
		if o.kind == "release" {
			m.doneReleasing(o)
		}
	}
	s.stats.doubts += len(m.doubts)
	m.doubts = nil

	for _, id := range m.order {
		g := m.groups[id]
		if g.Holder != 0 {
			if beat, at := cat.heartbeat[id], m.lastBeat[id].UnixMilli(); beat < at {
				s.violate("lost-write", "group %d: heartbeat_at %d is before the last acknowledged holder call at %d", id, beat, at)
			}
		}
		if cat.held[id] != (g.Holder != 0) {
			s.violate("catalog", "group %d: groups.held is %v while the lease's holder is %d", id, cat.held[id], g.Holder)
		}
		tail, hist := urgency(g)
		if cat.urgentTail[id] != tail || cat.urgentHist[id] != hist {
			s.violate("catalog", "group %d: urgent_tail %v, urgent_hist %v; its open ranges say %v, %v", id, cat.urgentTail[id], cat.urgentHist[id], tail, hist)
		}
	}
	for c, at := range m.lastSeen {
		if seen := cat.lastSeen[c.nodeID]; !seen.Valid || seen.Int64 < at.UnixMilli()-1000 {
			s.violate("lost-write", "node %s: last_seen_at %v, but a call at %d was acknowledged", c.name, seen, at.UnixMilli())
		}
	}
	s.checkFiles(cat)
	return nil
}

// urgency is what groups.urgent_tail and urgent_hist must be: the lowest
// priority of the open ranges in each lane.
func urgency(g *groupState) (tail, hist sql.NullInt64) {
	for _, r := range g.Ranges {
		if r.Status != leasehold.StatusPlanned && r.Status != leasehold.StatusLeased {
			continue
		}
		lane := &hist
		if r.Priority < 0 {
			lane = &tail
		}
		if !lane.Valid || r.Priority < lane.Int64 {
			*lane = sql.NullInt64{Int64: r.Priority, Valid: true}
		}
	}
	return tail, hist
}

// checkFiles checks the snapshot directory against the catalog: every
// recorded snapshot's file is whole (size and sha-256 as recorded),
// nothing else is left (no .part, no file the catalog does not point at),
// and a download serves the recorded window.
func (s *session) checkFiles(cat *catalog) {
	dir := filepath.Join(s.node.dir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil {
		s.violate("snapshot-file", "reading %s: %v", dir, err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		base, ext, _ := strings.Cut(name, ".")
		g, q, _ := strings.Cut(base, "-")
		gid, _ := strconv.ParseInt(g, 10, 64)
		seq, _ := strconv.ParseInt(q, 10, 64)
		switch {
		case ext == "part":
			s.violate("snapshot-file", "%s is left after the restart", name)
		case ext == "gz" && (cat.groups[gid] == nil || cat.groups[gid].Snap == nil || cat.file[gid] != seq):
			s.violate("snapshot-file", "%s is not the recorded snapshot of any group and is left after the restart", name)
		}
	}
	for _, id := range s.model.order {
		g := cat.groups[id]
		if g == nil {
			continue
		}
		if g.Snap != nil {
			s.stats.snapshotsChecked++
			path := filepath.Join(dir, fmt.Sprintf("%d-%d.gz", id, cat.file[id]))
			size, sum, err := fileSum(path)
			switch {
			case err != nil:
				s.violate("snapshot-file", "group %d: the recorded snapshot: %v", id, err)
			case size != g.Snap.Size || sum != g.Snap.SHA256:
				s.violate("snapshot-file", "group %d: %s is %d bytes with sha-256 %.12s; recorded %s", id, filepath.Base(path), size, sum, snapString(g.Snap))
			default:
				if head, want := windowHead(path), windowHeader(id, g.Snap.Next); head != want {
					s.violate("snapshot-file", "group %d: %s holds the window %q; recorded next %d", id, filepath.Base(path), head, g.Snap.Next)
				}
			}
		}
		s.checkDownload(g)
	}
}

// checkDownload reads the group's snapshot as an operator would.
func (s *session) checkDownload(g *groupState) {
	rd, err := s.admin.GetGroupSnapshot(context.Background(), g.Name, 0)
	if err != nil {
		s.violate("download", "group %d: %v", g.ID, err)
		return
	}
	if rd == nil {
		if g.Snap != nil {
			s.violate("download", "group %d: the node serves no snapshot; recorded %s", g.ID, snapString(g.Snap))
		}
		return
	}
	defer rd.Close()
	h := sha256.New()
	n, err := io.Copy(h, rd)
	got := &snapState{Next: rd.Next, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if err != nil && !errors.Is(err, leasehold.ErrInternal) {
		s.violate("download", "group %d: %v", g.ID, err)
		return
	}
	if g.Snap == nil || *got != *g.Snap || err != nil {
		s.violate("download", "group %d: the node serves %s (%v); recorded %s", g.ID, snapString(got), err, snapString(g.Snap))
	}
}

// windowHead is the first line of a stored window, which names the group
// and the next it was uploaded with.
func windowHead(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err.Error()
	}
	line, err := bufio.NewReader(zr).ReadString('\n')
	if err != nil {
		return err.Error()
	}
	return line
}

func fileSum(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return n, hex.EncodeToString(h.Sum(nil)), err
}
