package web_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/web"
)

// TestTimelineFeed: the lines the fleet marks for the timeline (a peer
// down, up, a group adopted) are written to the log and shown on the
// overview's timeline of a real node whose logger is a feed; unmarked
// lines, and marked ones below the log's level, are not on it.
func TestTimelineFeed(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(web.NewTimelineFeed(slog.NewJSONHandler(&logs, nil)))
	n := nodetest.Start(t, nodetest.Options{Logger: log})

	log.Warn("peers: peer down", "peer", "b", "since", "2026-12-06T13:00:00Z", "groups_to_adopt", 2,
		leasehold.TimelineAttr, leasehold.TimelinePeerDown)
	log.Info("peers: an unmarked line", "peer", "b")
	log.Debug("peers: below the level", leasehold.TimelineAttr, leasehold.TimelinePeerUp)
	log.With("group", "g1").Info("ownership: group taken over from a peer", "from", "b", "claim_rev", 7,
		leasehold.TimelineAttr, leasehold.TimelineAdoption)
	log.Info("peers: peer up again", "peer", "b", leasehold.TimelineAttr, leasehold.TimelinePeerUp)

	down := timelineRows(t, n.URL, n.AdminToken, leasehold.TimelinePeerDown)
	if len(down) != 1 || !strings.Contains(down[0], "b") || !strings.Contains(down[0], "groups_to_adopt=2") || strings.Contains(down[0], "not marked bad") {
		t.Errorf("peer_down entries %q, want one, bad, naming b and its 2 groups", down)
	}
	up := timelineRows(t, n.URL, n.AdminToken, leasehold.TimelinePeerUp)
	if len(up) != 1 || !strings.Contains(up[0], "peer up again") || !strings.Contains(up[0], "not marked bad") {
		t.Errorf("peer_up entries %q, want one (the debug line not shown), not bad", up)
	}
	adopted := timelineRows(t, n.URL, n.AdminToken, leasehold.TimelineAdoption)
	if len(adopted) != 1 || !strings.Contains(adopted[0], "g1") || !strings.Contains(adopted[0], "from=b") {
		t.Errorf("adoption entries %q, want one naming g1, taken from b", adopted)
	}
	status, _, page := signedIn(t, n.URL, n.AdminToken).get("/")
	if status != 200 || strings.Contains(page, "an unmarked line") {
		t.Errorf("the overview (%d) shows an unmarked line", status)
	}
	for _, line := range []string{"peers: peer down", "an unmarked line", "group taken over", "peer up again"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("the log lacks %q:\n%s", line, logs.String())
		}
	}
	if strings.Contains(logs.String(), "below the level") {
		t.Errorf("the log has a line below its level")
	}
}
