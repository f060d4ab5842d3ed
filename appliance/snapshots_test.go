package appliance

import (
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// TestUploadGroup: an operator's upload goes to this node's own group; a
// peer's group, as folded here, is refused naming its owner, and an
// unknown one is not found.
func TestUploadGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	own := f.group("own.g", 0, 100)
	if err := f.app.db.Write(f.ctx, func(tx *store.Tx) error {
		_, _, err := tx.FoldGroup("node-b", store.PeerGroup{
			Group: leasehold.Group{Name: "peer.g", Active: true, RangeSize: 100, Start: 1, CreatedAt: f.clock.Now()},
		}, 3)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, group string
		want        leasehold.ErrorKind
		wantID      int64
	}{
		{"Own", "own.g", "", own.ID},
		{"Peer", "peer.g", leasehold.KindConflict, 0},
		{"Unknown", "none.g", leasehold.KindNotFound, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := f.app.Snapshots.UploadGroup(f.ctx, tc.group)
			var got leasehold.ErrorKind
			if err != nil {
				got = leasehold.KindOf(err)
			}
			if got != tc.want {
				t.Fatalf("UploadGroup(%q): kind %q (%v), want %q", tc.group, got, err, tc.want)
			}
			if g.ID != tc.wantID {
				t.Errorf("UploadGroup(%q): group %d, want %d", tc.group, g.ID, tc.wantID)
			}
		})
	}
}
