package fleetfault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LogPeerDown is the message of a node's log line that shows a member
// down on its timeline (fleet's members watch).
const LogPeerDown = "peers: peer down"

// Down is node showing peer down on its timeline at At (since the load
// began).
type Down struct {
	Node, Peer string
	At         time.Duration
}

func (d Down) String() string {
	return fmt.Sprintf("%s showed %s down at %.1fs", d.Node, d.Peer, d.At.Seconds())
}

// LogLifeUnrenewed are the messages of a node's log lines that say its
// own life in the fleet was not renewed (the claims' renewals).
var LogLifeUnrenewed = []string{"claims: renewing this node's life failed", "claims: claims lost"}

// downs reads the peer-down lines of every node's log, in the load's
// time (lines from before the load, a serial start, are left out), and
// when each node said its own life was not renewed.
func (r *run) downs() (downs []Down, unrenewed map[string][]time.Duration) {
	unrenewed = map[string][]time.Duration{}
	for _, n := range r.nodes {
		b, err := os.ReadFile(filepath.Join(r.cfg.Out, n.Name+".log"))
		if err != nil {
			r.violation("reading %s's log for members shown down: %v", n.Name, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			down := strings.Contains(line, `msg="`+LogPeerDown+`"`)
			lapse := false
			for _, m := range LogLifeUnrenewed {
				lapse = lapse || strings.Contains(line, `msg="`+m+`"`)
			}
			if !down && !lapse {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, logField(line, "time"))
			if err != nil || t.Before(r.t0) {
				continue
			}
			if lapse {
				unrenewed[n.Name] = append(unrenewed[n.Name], t.Sub(r.t0))
				continue
			}
			if peer := logField(line, "peer"); peer != "" {
				downs = append(downs, Down{Node: n.Name, Peer: peer, At: t.Sub(r.t0)})
			}
		}
	}
	return downs, unrenewed
}

// CheckDowns lists as false the downs shown of a member whose life was
// renewed: no fault of the member, nor of the node showing it, began
// before the down and ended less than ttl + 10 s before it (a killed
// node's life lapses a claim TTL after the kill; a node paused or cut off
// judges from what it last saw), and the member said nothing of its life
// going unrenewed (unrenewed, by node) in the claim TTL (+ 2 s) before
// it: a fleet whose streams stall under load lapses lives that no fault
// touched, and a member shown down then is down.
func (r *Report) CheckDowns(downs []Down, faults []Fault, unrenewed map[string][]time.Duration, ttl time.Duration) {
	r.DownsChecked, r.FalseDowns = len(downs), nil
	for _, d := range downs {
		explained := false
		for _, f := range faults {
			if (f.Node == d.Peer || f.Node == d.Node) && f.Start <= d.At && d.At <= f.End+ttl+10*time.Second {
				explained = true
				break
			}
		}
		for _, u := range unrenewed[d.Peer] {
			if d.At-ttl-2*time.Second <= u && u <= d.At {
				explained = true
				break
			}
		}
		if !explained {
			r.FalseDowns = append(r.FalseDowns, d)
		}
	}
}

// BurnArg is the first argument that makes the harness's own binary a
// CPU burner (Burn): a busy loop until its time is up.
const BurnArg = "burn"

// Burn is a CPU burner's whole life: a busy loop for d.
func Burn(d time.Duration) {
	end := time.Now().Add(d)
	for n := 0; ; n++ {
		if n%1_000_000 == 0 && time.Now().After(end) {
			return
		}
	}
}

// startBurners starts n CPU burners, each the harness's own binary as
// Burn for at most bound, dying with the harness; stop kills them.
func startBurners(n int, bound time.Duration) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	for range n {
		c := exec.Command(self, BurnArg, bound.String())
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
