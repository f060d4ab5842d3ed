package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/leasehold/leasehold"
)

// faults are what the self-test does to a crashed node's data before the
// restart, each with the kind of violation the check must report. They
// stand for the bugs the crash test exists to catch: an acknowledged write
// that did not reach the disk, a torn or mixed-up snapshot, a corrupt file.
var faults = map[string]string{
	"drop-range":        "lost-write",    // an acknowledged range's row is gone
	"revert-progress":   "lost-write",    // an acknowledged resume point moved back
	"lose-lease":        "lost-write",    // an acknowledged lease is not held
	"drop-snapshot":     "lost-write",    // an acknowledged upload is not recorded
	"flip-snapshot":     "snapshot-file", // one byte of a stored snapshot flipped
	"truncate-snapshot": "snapshot-file", // a stored snapshot cut short, as a .part would be
	"corrupt-index":     "integrity",     // a b-tree page of the catalog damaged
}

func faultNames() []string {
	var names []string
	for n := range faults {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// injectFault does cfg.fault to the data of the dead node if the model has
// something for it to break; otherwise it waits for a later kill.
func (s *session) injectFault(ctx context.Context) error {
	path := filepath.Join(s.node.dir, "catalog.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	m := s.model
	// A group with a call in doubt at the kill is left alone: the fault
	// done to it can look like that call having landed (a lease cleared as
	// a release in flight would clear it), and the check rightly takes it
	// so. A CI run's lose-lease once broke only such a group, and nothing
	// was reported.
	doubted := map[int64]bool{}
	for _, o := range m.doubts {
		if !o.applied {
			doubted[o.group] = true
		}
	}
	var target *groupState
	var rng *rangeState
	for _, id := range m.order {
		g := m.groups[id]
		if doubted[id] {
			continue
		}
		for i := range g.Ranges {
			r := &g.Ranges[i]
			switch {
			case s.cfg.fault == "drop-range" && r.Status == leasehold.StatusDone,
				s.cfg.fault == "revert-progress" && r.Next > r.Start:
				target, rng = g, r
			}
		}
		switch {
		case s.cfg.fault == "lose-lease" && g.Holder != 0,
			(s.cfg.fault == "drop-snapshot" || s.cfg.fault == "flip-snapshot" || s.cfg.fault == "truncate-snapshot") && g.Snap != nil && g.Snap.Size > 100,
			s.cfg.fault == "corrupt-index":
			target = g
		}
	}
	if target == nil {
		return nil
	}
	exec := func(q string, args ...any) error {
		_, err := db.ExecContext(ctx, q, args...)
		return err
	}
	snapshotFile := func() (string, error) {
		var file int64
		err := db.QueryRowContext(ctx, `SELECT snapshot_file FROM group_leases WHERE group_id = ?`, target.ID).Scan(&file)
		return filepath.Join(s.node.dir, "snapshots", fmt.Sprintf("%d-%d.gz", target.ID, file)), err
	}
	switch s.cfg.fault {
	case "drop-range":
		err = exec(`DELETE FROM ranges WHERE id = ?`, rng.ID)
	case "revert-progress":
		err = exec(`UPDATE ranges SET next_id = start_id WHERE id = ?`, rng.ID)
	case "lose-lease":
		err = exec(`UPDATE group_leases SET node_id = NULL WHERE group_id = ?`, target.ID)
	case "drop-snapshot":
		err = exec(`UPDATE group_leases SET snapshot_next = NULL, snapshot_size = NULL, snapshot_sha256 = NULL, snapshot_at = NULL, snapshot_file = NULL WHERE group_id = ?`, target.ID)
	case "flip-snapshot", "truncate-snapshot":
		var file string
		if file, err = snapshotFile(); err == nil {
			err = damage(file, s.cfg.fault == "truncate-snapshot")
		}
	case "corrupt-index":
		err = corruptIndex(ctx, db, path, "nodes_token_hash")
	default:
		return fmt.Errorf("no fault %q; there are %v", s.cfg.fault, faultNames())
	}
	if err != nil {
		return fmt.Errorf("fault %s: %w", s.cfg.fault, err)
	}
	s.stats.faultsDone++
	s.logf("fault %s done to group %d", s.cfg.fault, target.ID)
	return nil
}

// damage flips one byte in the middle of a file, or cuts it in half.
func damage(path string, truncate bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if truncate {
		return f.Truncate(fi.Size() / 2)
	}
	b := make([]byte, 1)
	at := fi.Size() / 2
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err = f.WriteAt(b, at)
	return err
}

// corruptIndex flips the last byte of an index's root page (the rowid of
// one of its entries) after moving every page from the WAL into the file,
// so the index no longer matches its table.
func corruptIndex(ctx context.Context, db *sql.DB, path, index string) error {
	var root, pageSize int64
	if err := db.QueryRowContext(ctx, `SELECT rootpage FROM sqlite_schema WHERE name = ?`, index).Scan(&root); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	at := root*pageSize - 1
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 0x01
	_, err = f.WriteAt(b, at)
	return err
}
