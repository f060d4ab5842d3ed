package fleetfault

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// logPeerDown is what marks a node's log line that is a member shown
// down on its timeline: the attribute the node's log handler copies the
// line onto the dashboard's timeline by (leasehold.TimelineAttr), of
// kind peer_down. The log holds every such entry of the run, a restarted
// node's from before its restart too, where the timeline's ring holds
// the newest few hundred entries since the node's start.
var logPeerDown = " " + leasehold.TimelineAttr + "=" + string(leasehold.TimelinePeerDown)

// Down is node showing peer down on its timeline at At (since the load
// began).
type Down struct {
	Node, Peer string
	At         time.Duration
}

func (d Down) String() string {
	return fmt.Sprintf("%s showed %s down at %.1fs", d.Node, d.Peer, d.At.Seconds())
}

// LogLifeLapsed is the message of a node's log line that says its own
// life in the fleet lapsed: it went unrenewed past its margin, and the
// node gave its claims up (fleet's claims). A renewal that failed once
// is not that: the life stands until its TTL.
const LogLifeLapsed = "claims: claims lost"

// downs reads the peer-down entries of every node's log, in the load's
// time (lines from before the load, a serial start, are left out), and
// when each node said its own life lapsed.
func (r *run) downs() (downs []Down, lapsed map[string][]time.Duration) {
	lapsed = map[string][]time.Duration{}
	for _, n := range r.nodes {
		b, err := os.ReadFile(filepath.Join(r.cfg.Out, n.Name+".log"))
		if err != nil {
			r.violation("reading %s's log for members shown down: %v", n.Name, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			down := strings.Contains(line, logPeerDown)
			lapse := strings.Contains(line, `msg="`+LogLifeLapsed+`"`)
			if !down && !lapse {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, logField(line, "time"))
			if err != nil || t.Before(r.t0) {
				continue
			}
			if lapse {
				lapsed[n.Name] = append(lapsed[n.Name], t.Sub(r.t0))
				continue
			}
			if peer := logField(line, "peer"); peer != "" {
				downs = append(downs, Down{Node: n.Name, Peer: peer, At: t.Sub(r.t0)})
			}
		}
	}
	return downs, lapsed
}

// CheckDowns lists as false the downs shown of a member whose life was
// renewed. A down is explained by a fault of the member, or of the node
// showing it, that began before the down and ended less than ttl + 10 s
// before it (a killed node's life lapses a claim TTL after the kill; a
// node paused or cut off judges from what it last saw); failing that, by
// the member's own word that its life lapsed (lapsed, by node: its
// claims given up) in the claim TTL + 2 s before the down or the claim
// TTL after it (a member gives up a margin before its life's TTL runs
// out, but one starved of CPU says so late): a fleet whose streams stall
// under load lapses lives that no fault touched, and a member shown down
// then is down. Any other down is false.
func (r *Report) CheckDowns(downs []Down, faults []Fault, lapsed map[string][]time.Duration, ttl time.Duration) {
	r.DownsChecked, r.DownsByFault, r.DownsByLapse, r.FalseDowns = len(downs), 0, 0, nil
	for _, d := range downs {
		explained := false
		for _, f := range faults {
			if (f.Node == d.Peer || f.Node == d.Node) && f.Start <= d.At && d.At <= f.End+ttl+10*time.Second {
				explained = true
				break
			}
		}
		if explained {
			r.DownsByFault++
			continue
		}
		for _, u := range lapsed[d.Peer] {
			if d.At-ttl-2*time.Second <= u && u <= d.At+ttl {
				explained = true
				break
			}
		}
		if explained {
			r.DownsByLapse++
			continue
		}
		r.FalseDowns = append(r.FalseDowns, d)
	}
}
