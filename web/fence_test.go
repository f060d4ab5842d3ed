package web_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// fenceTTL is the lease TTL of the fencing tests; the test clock moves past
// it to let a lease lapse.
const fenceTTL = 10 * time.Second

// fenceWorld is a node with one group g (ten ranges of 100 from 1) and
// three worker nodes; w1 leased g first, at fence first, took range r1 and
// stored a window snapshot under that lease.
type fenceWorld struct {
	api
	node  *nodetest.Node
	clock *nodetest.Clock
	view  *catalogView
	// storing is told when an upload's body begins to be stored.
	storing      *nodetest.Signal
	admin        string
	w1, w2, w3   string
	gid, rangeID int64
	first        int64 // w1's first fence
	window       []byte
	rangeStart   int64
	rangeEnd     int64
	holder       string // the token holding g now, "" when nobody does
	holderFence  int64
}

func newFenceWorld(t *testing.T) *fenceWorld {
	t.Helper()
	clock := nodetest.NewClock()
	storing := nodetest.NewSignal()
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: fenceTTL, Clock: clock.Now, UploadStoring: storing.Fire})
	w := &fenceWorld{api: api{t, n.URL + "/api/v1"}, node: n, clock: clock, admin: n.AdminToken, storing: storing}
	if a := w.j("PUT", "/groups/g", w.admin, `{"range_size":100,"start":1}`); a.status != 201 {
		t.Fatalf("create group: %d %s", a.status, a.body)
	}
	if a := w.j("POST", "/groups/g/tail", w.admin, `{"high":1000}`); a.status != 200 {
		t.Fatalf("plan: %d %s", a.status, a.body)
	}
	for i, tok := range []*string{&w.w1, &w.w2, &w.w3} {
		name := fmt.Sprintf("w%d", i+1)
		a := w.j("POST", "/nodes", w.admin, fmt.Sprintf(`{"name":%q}`, name))
		if a.status != 201 {
			t.Fatalf("register %s: %d %s", name, a.status, a.body)
		}
		*tok = a.json(t)["token"].(string)
	}
	w.gid, w.first = w.lease(w.w1)
	w.rangeID = w.next(w.w1, w.first)
	w.window = gz(t, []byte("w1's window at its first fence"))
	if a := w.do("PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=1", w.gid, w.first), w.w1, bytes.NewReader(w.window),
		"Content-Encoding", "gzip"); a.status != 201 {
		t.Fatalf("snapshot: %d %s", a.status, a.body)
	}
	w.holder, w.holderFence = w.w1, w.first
	w.view = openCatalogView(t, n.DataDir)
	return w
}

// lease leases g to tok and returns the group and the fence.
func (w *fenceWorld) lease(tok string) (gid, fence int64) {
	w.t.Helper()
	l := w.j("POST", "/leases", tok, "")
	if l.status != 200 {
		w.t.Fatalf("lease: %d %s", l.status, l.body)
	}
	return num(l.json(w.t), "group", "id"), num(l.json(w.t), "fence")
}

// next takes tok's range in work at fence and returns its id.
func (w *fenceWorld) next(tok string, fence int64) int64 {
	w.t.Helper()
	r := w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), tok, fmt.Sprintf(`{"fence":%d}`, fence))
	if r.status != 200 {
		w.t.Fatalf("next: %d %s", r.status, r.body)
	}
	m := r.json(w.t)
	w.rangeStart, w.rangeEnd = num(m, "range", "start"), num(m, "range", "end")
	return num(m, "range", "id")
}

func (w *fenceWorld) release(tok string, fence int64) {
	w.t.Helper()
	if a := w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), tok, fmt.Sprintf(`{"fence":%d}`, fence)); a.status != 200 {
		w.t.Fatalf("release: %d %s", a.status, a.body)
	}
}

// catalog is what a refused holder call must leave as it was: every row
// of the catalog's tables that hold the catalog's state (groups, ranges,
// leases with their snapshot records, nodes, the events outbox, peers'
// groups), one line a row, and the snapshot files on disk.
func (w *fenceWorld) catalog() []string {
	w.t.Helper()
	return append(w.rows(), "snapshot files "+w.view.files(w.t))
}

// rows is catalog without the snapshot files.
func (w *fenceWorld) rows() []string {
	w.t.Helper()
	tx, err := w.view.db.Begin()
	if err != nil {
		w.t.Fatalf("catalog view: %v", err)
	}
	defer tx.Rollback()
	var out []string
	for _, table := range []string{"groups", "ranges", "group_leases", "nodes", "events", "peer_groups", "rule_sets"} {
		rows, err := tx.Query(`SELECT * FROM "` + table + `" ORDER BY rowid`)
		if err != nil {
			w.t.Fatalf("catalog view: %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				w.t.Fatalf("catalog view: %s: %v", table, err)
			}
			var b strings.Builder
			b.WriteString(table)
			for i, c := range cols {
				if vals[i].Valid {
					fmt.Fprintf(&b, " %s=%s", c, vals[i].String)
				} else {
					fmt.Fprintf(&b, " %s=NULL", c)
				}
			}
			out = append(out, b.String())
		}
		if err := rows.Err(); err != nil {
			w.t.Fatalf("catalog view: %s: %v", table, err)
		}
		rows.Close()
	}
	return out
}

// sameCatalog fails the test with the rows that differ.
func sameCatalog(t *testing.T, before, after []string) {
	t.Helper()
	if slices.Equal(before, after) {
		return
	}
	var diff []string
	for _, l := range before {
		if !slices.Contains(after, l) {
			diff = append(diff, "- "+l)
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			diff = append(diff, "+ "+l)
		}
	}
	t.Errorf("the refused call changed the catalog:\n%s", strings.Join(diff, "\n"))
}

// holderCall is one holder call of the API, made as tok at fence.
type holderCall struct {
	name string
	// do makes the call; rangeID is the range a range call names.
	do func(w *fenceWorld, tok string, fence, rangeID int64) answer
	// ok is the status the current holder gets for the same call.
	ok int
}

var holderCalls = []holderCall{
	{"Next", func(w *fenceWorld, tok string, fence, _ int64) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), tok, fmt.Sprintf(`{"fence":%d}`, fence))
	}, 200},
	{"NextFinished", func(w *fenceWorld, tok string, fence, rangeID int64) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/next", w.gid), tok, fmt.Sprintf(`{"fence":%d,"finished":{"range":%d,"headers":7}}`, fence, rangeID))
	}, 200},
	{"Heartbeat", func(w *fenceWorld, tok string, fence, _ int64) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/heartbeat", w.gid), tok, fmt.Sprintf(`{"fence":%d}`, fence))
	}, 200},
	{"Release", func(w *fenceWorld, tok string, fence, _ int64) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), tok, fmt.Sprintf(`{"fence":%d}`, fence))
	}, 200},
	{"Progress", func(w *fenceWorld, tok string, fence, rangeID int64) answer {
		return w.j("POST", fmt.Sprintf("/ranges/%d/progress", rangeID), tok, fmt.Sprintf(`{"fence":%d,"next":%d}`, fence, w.rangeStart+10))
	}, 200},
	{"Finish", func(w *fenceWorld, tok string, fence, rangeID int64) answer {
		return w.j("POST", fmt.Sprintf("/ranges/%d/finish", rangeID), tok, fmt.Sprintf(`{"fence":%d,"headers":7}`, fence))
	}, 200},
	{"Fail", func(w *fenceWorld, tok string, fence, rangeID int64) answer {
		return w.j("POST", fmt.Sprintf("/ranges/%d/fail", rangeID), tok, fmt.Sprintf(`{"fence":%d,"error":"connection reset"}`, fence))
	}, 200},
	{"FailNoRetry", func(w *fenceWorld, tok string, fence, rangeID int64) answer {
		return w.j("POST", fmt.Sprintf("/ranges/%d/fail", rangeID), tok, fmt.Sprintf(`{"fence":%d,"error":"bad article","retry":false}`, fence))
	}, 200},
	{"ReleaseWindowError", func(w *fenceWorld, tok string, fence, _ int64) answer {
		return w.j("POST", fmt.Sprintf("/leases/%d/release", w.gid), tok, fmt.Sprintf(`{"fence":%d,"window_error":"gzip: invalid header"}`, fence))
	}, 200},
	{"SnapshotPut", func(w *fenceWorld, tok string, fence, _ int64) answer {
		return w.do("PUT", fmt.Sprintf("/leases/%d/snapshot?fence=%d&next=%d", w.gid, fence, w.rangeStart+50), tok,
			bytes.NewReader(gz(w.t, []byte("a window written at fence "+fmt.Sprint(fence)))), "Content-Encoding", "gzip")
	}, 201},
	{"SnapshotGet", func(w *fenceWorld, tok string, fence, _ int64) answer {
		return w.do("GET", fmt.Sprintf("/leases/%d/snapshot?fence=%d", w.gid, fence), tok, nil)
	}, 200},
}

// fenceCase brings a fenceWorld to a state and names the stale caller.
type fenceCase struct {
	name string
	// stale brings w to the case's state and returns the caller and the
	// fence it calls with.
	stale func(w *fenceWorld) (tok string, fence int64)
}

var fenceCases = []fenceCase{
	// Another registered node presents the holder's fence.
	{"OtherNode", func(w *fenceWorld) (string, int64) { return w.w2, w.first }},
	// The holder released and leased the group again, took the same range
	// again, and calls at its first fence: the same node, one fence old.
	{"SameNodeOlderFence", func(w *fenceWorld) (string, int64) {
		w.release(w.w1, w.first)
		_, fence := w.lease(w.w1)
		if fence != w.first+1 {
			w.t.Fatalf("the second lease's fence is %d, want %d", fence, w.first+1)
		}
		if r := w.next(w.w1, fence); r != w.rangeID {
			w.t.Fatalf("the second lease's range is %d, want %d again", r, w.rangeID)
		}
		w.holderFence = fence
		return w.w1, w.first
	}},
	// The holder released the group and calls at its own fence.
	{"AfterRelease", func(w *fenceWorld) (string, int64) {
		w.release(w.w1, w.first)
		w.holder = ""
		return w.w1, w.first
	}},
	// The holder went quiet past the TTL, another node took the group over
	// and took the range, and the old holder calls at its fence.
	{"AfterTakeover", func(w *fenceWorld) (string, int64) {
		w.clock.Advance(fenceTTL + time.Second)
		l := w.j("POST", "/leases", w.w3, "")
		if l.status != 200 || l.json(w.t)["takeover"] != true {
			w.t.Fatalf("takeover: %d %s", l.status, l.body)
		}
		w.holder, w.holderFence = w.w3, num(l.json(w.t), "fence")
		if r := w.next(w.w3, w.holderFence); r != w.rangeID {
			w.t.Fatalf("the new holder's range is %d, want %d", r, w.rangeID)
		}
		return w.w1, w.first
	}},
}

// TestFencing is rule 6 over HTTP: every holder call (next, heartbeat,
// release plain or with a window error, progress, finish, fail with and
// without retry, snapshot upload and download) made by a node
// that does not hold the group at the fence it names is refused with 409
// lease_lost and changes nothing in the catalog or the snapshot files:
// from another node with the holder's fence, from the holder at its older
// fence after it leased the group again, after its release, and after a
// takeover. The same call made next by the current holder at its fence
// succeeds, so each refusal is the fence's doing and nothing else's.
func TestFencing(t *testing.T) {
	t.Parallel()
	for _, fc := range fenceCases {
		t.Run(fc.name, func(t *testing.T) {
			for _, call := range holderCalls {
				t.Run(call.name, func(t *testing.T) {
					w := newFenceWorld(t)
					tok, fence := fc.stale(w)
					before := w.catalog()
					a := call.do(w, tok, fence, w.rangeID)
					if a.status != 409 || a.code() != "lease_lost" {
						t.Errorf("%s at fence %d: got %d %q (%s), want 409 \"lease_lost\"", call.name, fence, a.status, a.code(), a.body)
					}
					sameCatalog(t, before, w.catalog())
					if w.holder == "" {
						return
					}
					if a := call.do(w, w.holder, w.holderFence, w.rangeID); a.status != call.ok {
						t.Errorf("the holder's own %s at fence %d: got %d (%s), want %d", call.name, w.holderFence, a.status, a.body, call.ok)
					}
				})
			}
		})
	}
}
