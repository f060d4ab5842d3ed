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

// downs reads the peer-down lines of every node's log, in the load's
// time; lines from before the load (a serial start) are left out.
func (r *run) downs() []Down {
	var out []Down
	for _, n := range r.nodes {
		b, err := os.ReadFile(filepath.Join(r.cfg.Out, n.Name+".log"))
		if err != nil {
			r.violation("reading %s's log for members shown down: %v", n.Name, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, `msg="`+LogPeerDown+`"`) {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, logField(line, "time"))
			peer := logField(line, "peer")
			if err != nil || peer == "" || t.Before(r.t0) {
				continue
			}
			out = append(out, Down{Node: n.Name, Peer: peer, At: t.Sub(r.t0)})
		}
	}
	return out
}

// CheckDowns lists as false the downs shown of a member whose life was
// renewed: no fault of the member, nor of the node showing it, began
// before the down and ended less than grace before it (a killed node's
// life lapses a claim TTL after the kill; a node paused or cut off
// judges from what it last saw).
func (r *Report) CheckDowns(downs []Down, faults []Fault, grace time.Duration) {
	r.DownsChecked, r.FalseDowns = len(downs), nil
	for _, d := range downs {
		explained := false
		for _, f := range faults {
			if (f.Node == d.Peer || f.Node == d.Node) && f.Start <= d.At && d.At <= f.End+grace {
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
