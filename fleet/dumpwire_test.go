package fleet

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// TestAppendRangeAsMarshal holds the dumper's hand-written range encoding
// to encoding/json's, byte for byte: a receiver of any version reads it
// as it read json.Marshal's.
func TestAppendRangeAsMarshal(t *testing.T) {
	t.Parallel()
	node, msg, at := int64(7), "411 no such <group> & \"more\"\n\x01 é \xff", time.Date(2026, 12, 6, 15, 4, 5, 123456789, time.FixedZone("x", 3600))
	plain := "timeout"
	cases := []store.PeerRange{
		{},
		{Range: leasehold.Range{ID: 1, GroupID: 2, Start: 3, End: 102, Next: 50, Status: leasehold.StatusPlanned, Priority: -1,
			UpdatedAt: time.UnixMilli(1765000000123)}},
		{Range: leasehold.Range{ID: 9, GroupID: -2, Start: 1 << 62, End: 1<<63 - 1, Next: 1<<63 - 1, Status: leasehold.StatusFailed, Priority: 17,
			NodeID: &node, Attempts: 3, RuleVersion: 4, Headers: 99, UpdatedAt: at, LastError: &msg, LastErrorAt: &at}, Node: "w-1"},
		{Range: leasehold.Range{Status: "leased", UpdatedAt: at.UTC(), LastError: &plain, LastErrorAt: &at}, Node: "a<b"},
	}
	for i, r := range cases {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendRange([]byte("x"), r)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Errorf("case %d:\n got %s\nwant %s", i, got[1:], want)
		}
	}
	far := store.PeerRange{Range: leasehold.Range{UpdatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if _, err := appendRange(nil, far); err == nil {
		t.Error("a time json.Marshal refuses was encoded")
	}
}
