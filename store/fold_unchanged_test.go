package store

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestFoldRangesUnchanged: a peer's range the catalog holds as it is
// already is not written again (a peer sends a group's every range under
// a claim just won, and a range again in each batch it changed in), and
// the group's key is not recomputed; a range that differs in any one
// column the fold sets, or held here by a local node, is written.
func TestFoldRangesUnchanged(t *testing.T) {
	db := openTest(t, "", Options{NowFunc: func() time.Time { return foldStart }})
	id, _ := foldIn(t, db, "a", foldGroup("g", 1), foldRanges())
	// Every write of a range, and of the group's key, is counted.
	must(t, db.rawExec(`CREATE TABLE range_writes (n INTEGER NOT NULL)`))
	must(t, db.rawExec(`INSERT INTO range_writes VALUES (0)`))
	must(t, db.rawExec(`CREATE TRIGGER count_range_writes AFTER UPDATE ON ranges BEGIN UPDATE range_writes SET n = n + 1; END`))
	must(t, db.rawExec(`CREATE TRIGGER count_key_writes AFTER UPDATE OF urgent_tail ON groups BEGIN UPDATE range_writes SET n = n + 1000; END`))
	writes := func() int64 {
		t.Helper()
		var n int64
		must(t, db.r.QueryRow(`SELECT n FROM range_writes`).Scan(&n))
		return n
	}
	foldIn(t, db, "a", foldGroup("g", 1), foldRanges())
	if n := writes(); n != 0 {
		t.Fatalf("folding the same ranges again wrote %d rows (a key write counts 1000), want none", n)
	}
	lastErr := "boom"
	for name, change := range map[string]func(r *PeerRange){
		"End":         func(r *PeerRange) { r.End++ },
		"Next":        func(r *PeerRange) { r.Next++ },
		"Status":      func(r *PeerRange) { r.Status = leasehold.StatusFailed },
		"Priority":    func(r *PeerRange) { r.Priority-- },
		"Attempts":    func(r *PeerRange) { r.Attempts++ },
		"RuleVersion": func(r *PeerRange) { r.RuleVersion++ },
		"Headers":     func(r *PeerRange) { r.Headers++ },
		"UpdatedAt":   func(r *PeerRange) { r.UpdatedAt = r.UpdatedAt.Add(time.Second) },
		"LastError":   func(r *PeerRange) { r.LastError = &lastErr },
		"LastErrorAt": func(r *PeerRange) { at := foldStart.Add(time.Minute); r.LastErrorAt = &at },
	} {
		rs := foldRanges()
		r := rs[len(rs)-1]
		change(&r)
		before := writes()
		foldIn(t, db, "a", foldGroup("g", 1), []PeerRange{r})
		if writes() == before {
			t.Errorf("%s: a changed range was not written", name)
		}
		// Back as it was, for the next case.
		foldIn(t, db, "a", foldGroup("g", 1), []PeerRange{rs[len(rs)-1]})
	}
	// A range a local node holds is the peer's again: written, its
	// holder forgotten.
	must(t, db.rawExec(`INSERT INTO nodes (id, name, token_hash, priority_min, priority_max, capacity, created_at) VALUES (1, 'w', x'00', -100, 100, 1000, 0)`))
	rs := foldRanges()
	must(t, db.rawExec(`UPDATE ranges SET node_id = 1 WHERE group_id = ? AND start_id = ?`, id, rs[0].Start))
	foldIn(t, db, "a", foldGroup("g", 1), rs[:1])
	if got := rangesOf(t, db, id)[0]; got.NodeID != nil {
		t.Fatalf("range %d keeps local holder %v", got.Start, *got.NodeID)
	}
}
