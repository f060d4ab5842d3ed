package fleetfault

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BurnArg is the first argument that makes the harness's own binary a
// CPU burner (Burn): a busy loop until its time is up.
const BurnArg = "burn"

// BurnersPIDFile is the file in the run's output directory listing the
// CPU burners running, one process id a line, while they run: the
// script's exit trap kills them from it when the harness itself was
// killed.
const BurnersPIDFile = "burners.pid"

// Burn is a CPU burner's whole life: a busy loop for d.
func Burn(d time.Duration) {
	end := time.Now().Add(d)
	for n := 0; ; n++ {
		if n%1_000_000 == 0 && time.Now().After(end) {
			return
		}
	}
}

// Pressure is what the CPU burners did in a run: how many ran, at which
// nice value (the nodes' own), for how long, how much CPU they took, and
// the machine's load average over that time.
type Pressure struct {
	Burners int
	Nice    int
	// Ran is the time from their start to their stop; CPU the CPU time
	// all of them got in it (at most Burners × Ran).
	Ran, CPU time.Duration
	// LoadMin, LoadMax are the lowest and highest 1-minute load average
	// sampled while they ran; LoadSamples how many samples.
	LoadMin, LoadMax float64
	LoadSamples      int
}

// Print writes the burners' line of the summary.
func (p *Pressure) Print(w io.Writer) {
	share := 0.0
	if p.Ran > 0 && p.Burners > 0 {
		share = p.CPU.Seconds() / (p.Ran.Seconds() * float64(p.Burners))
	}
	load := "not sampled"
	if p.LoadSamples > 0 {
		load = fmt.Sprintf("%.1f–%.1f (%d samples)", p.LoadMin, p.LoadMax, p.LoadSamples)
	}
	fmt.Fprintf(w, "CPU burners: %d at nice %d (the nodes'), %.0fs through the faults, %.0f CPU-s (%.0f%% of their cores); load average (1 min) while they ran %s\n",
		p.Burners, p.Nice, p.Ran.Seconds(), p.CPU.Seconds(), 100*share, load)
}

// burners are the CPU burners of a run.
type burners struct {
	bs      []*burner // set before startBurners returns
	p       Pressure
	started time.Time
	stopped chan struct{} // closed by stop
	done    chan struct{} // closed once they are killed and reaped
	early   []string      // burners gone before stop
	pidFile string
}

// burner is one CPU burner process.
type burner struct {
	c      *exec.Cmd
	exited chan struct{}
	gone   time.Time // set before exited is closed
}

// gone counts the burners that have exited.
func (b *burners) gone() int {
	n := 0
	for _, bu := range b.bs {
		select {
		case <-bu.exited:
			n++
		default:
		}
	}
	return n
}

// startBurners starts n CPU burners, each the harness's own binary as
// Burn for at most bound, at nice value nice (the nodes'), and lists
// them in pidFile; stop kills them. They die with the harness too
// (Pdeathsig), and the script's trap kills those in pidFile.
func startBurners(n int, bound time.Duration, nice int, pidFile string) (*burners, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b := &burners{p: Pressure{Burners: n, Nice: nice}, stopped: make(chan struct{}), done: make(chan struct{}), pidFile: pidFile}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig is sent when the thread that started the child ends,
		// not the process, and Go ends a thread when a goroutine locked to
		// it returns (the harness's dials into the namespaces do): started
		// from any thread, a burner could die mid-run. This goroutine keeps
		// the thread that starts them until they are stopped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(b.done)
		var bs []*burner
		var err error
		for range n {
			c := exec.Command(self, BurnArg, bound.String())
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err = c.Start(); err != nil {
				break
			}
			bu := &burner{c: c, exited: make(chan struct{})}
			bs = append(bs, bu)
			go func() { c.Wait(); bu.gone = time.Now(); close(bu.exited) }()
			// Their priority is the nodes' (not below: they are to take
			// CPU from the nodes as any other busy process would).
			if err = syscall.Setpriority(syscall.PRIO_PROCESS, c.Process.Pid, nice); err != nil {
				err = fmt.Errorf("renice burner %d to %d: %w", c.Process.Pid, nice, err)
				break
			}
		}
		if err == nil {
			var pids []string
			for _, bu := range bs {
				pids = append(pids, strconv.Itoa(bu.c.Process.Pid))
			}
			err = os.WriteFile(pidFile, []byte(strings.Join(pids, "\n")+"\n"), 0o600)
		}
		b.started, b.bs = time.Now(), bs
		started <- err
		if err == nil {
			b.p.sampleLoad()
			t := time.NewTicker(5 * time.Second)
		wait:
			for {
				select {
				case <-b.stopped:
					break wait
				case <-t.C:
					b.p.sampleLoad()
				}
			}
			t.Stop()
		}
		stopped := time.Now()
		b.p.Ran = stopped.Sub(b.started)
		for i, bu := range bs {
			select {
			case <-bu.exited:
				b.early = append(b.early, fmt.Sprintf("CPU burner %d (pid %d) was gone %.0fs before the faults were over (%v): the run was not under the pressure asked", i+1, bu.c.Process.Pid, stopped.Sub(bu.gone).Seconds(), bu.c.ProcessState))
			default:
				bu.c.Process.Kill()
				<-bu.exited
			}
			if st := bu.c.ProcessState; st != nil {
				b.p.CPU += st.UserTime() + st.SystemTime()
			}
		}
		os.Remove(pidFile)
	}()
	if err := <-started; err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// stop kills the burners (once) and waits for them; it returns what they
// did and the burners that were gone before it.
func (b *burners) stop() (Pressure, []string) {
	select {
	case <-b.stopped:
	default:
		close(b.stopped)
	}
	<-b.done
	return b.p, b.early
}

// sampleLoad adds the machine's 1-minute load average to p.
func (p *Pressure) sampleLoad() {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return
	}
	if p.LoadSamples == 0 || l < p.LoadMin {
		p.LoadMin = l
	}
	p.LoadMax = max(p.LoadMax, l)
	p.LoadSamples++
}

// niceOf is process pid's nice value (/proc/PID/stat, field 19).
func niceOf(pid int) (int, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields are counted after its closing one.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no command name in /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): field 19 is f[16].
	if len(f) < 17 {
		return 0, errors.New("short /proc stat")
	}
	return strconv.Atoi(f[16])
}

// nodesNice is the nice value of the nodes running now: the lowest (the
// highest priority) of them, or the harness's own when none runs (they
// inherit it).
func (r *run) nodesNice() int {
	var nices []int
	for _, n := range r.nodes {
		if pid := n.Pid(); pid > 0 {
			if v, err := niceOf(pid); err == nil {
				nices = append(nices, v)
			}
		}
	}
	if len(nices) == 0 {
		v, _ := niceOf(os.Getpid())
		return v
	}
	return slices.Min(nices)
}
