package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

func (a *adminCmd) waitVerb(fs *flag.FlagSet) verbFunc {
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	every := fs.Duration("every", time.Second, "how often to look")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		return a.wait(ctx, *timeout, *every)
	}
}

// progressLine is what wait prints while it waits.
type progressLine struct {
	Groups  int   `json:"groups"`
	Ranges  int64 `json:"ranges"`
	Done    int64 `json:"done"`
	Leased  int64 `json:"leased"`
	Planned int64 `json:"planned"`
	Failed  int64 `json:"failed"`
	Held    int   `json:"held"`
	// Quarantined are the active groups leased to nobody until an
	// operator acts (rule 10); their open ranges wait for that.
	Quarantined int `json:"quarantined"`
	// stuck is why the open ranges left can only wait for an operator:
	// the quarantined groups, "" while other work goes on.
	stuck string
}

// wait polls until every active group has no planned or leased range and
// nobody holds it: its last holder uploaded the window and released it.
// In a fleet it counts the whole fleet's groups as this node has folded
// them, so one node answers for all.
// Failed ranges end the wait with an error, since nothing will lease them.
func (a *adminCmd) wait(parent context.Context, timeout, every time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	// gaveUp is the error once ctx has ended: Ctrl-C (the parent ended)
	// stops the wait as asked, the timeout gives up.
	gaveUp := func(last progressLine) error {
		if parent.Err() != nil {
			return fmt.Errorf("wait: stopped with %d of %d ranges done: %w", last.Done, last.Ranges, parent.Err())
		}
		return fmt.Errorf("wait: gave up after %s: %d of %d ranges done", timeout, last.Done, last.Ranges)
	}
	tty := isTerminal(a.stderr)
	var last progressLine
	lastPrint := time.Time{}
	for {
		p, err := a.progress(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return gaveUp(last)
			}
			return err
		}
		done := p.Planned == 0 && p.Leased == 0 && p.Held == 0
		if a.op.json {
			if p != last || done {
				if err := a.printJSON(p); err != nil {
					return err
				}
			}
		} else if p != last && time.Since(lastPrint) >= 2*time.Second || tty || done {
			line := fmt.Sprintf("waiting: %d/%d ranges done, %d leased, %d planned, %d failed, %d of %d groups held",
				p.Done, p.Ranges, p.Leased, p.Planned, p.Failed, p.Held, p.Groups)
			if p.Quarantined > 0 {
				line += fmt.Sprintf(", %d quarantined", p.Quarantined)
			}
			if tty {
				fmt.Fprintf(a.stderr, "\r\033[K%s", line)
				if done {
					fmt.Fprintln(a.stderr)
				}
			} else {
				fmt.Fprintln(a.stderr, line)
			}
			lastPrint = time.Now()
		}
		last = p
		if !done && p.stuck != "" {
			if tty {
				fmt.Fprintln(a.stderr)
			}
			return fmt.Errorf("wait: %d of %d ranges done; the rest wait for an operator: %s", p.Done, p.Ranges, p.stuck)
		}
		if done {
			if p.Failed > 0 {
				return fmt.Errorf("wait: %d ranges failed; see `leasehold admin findings`", p.Failed)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(a.stderr)
			}
			return gaveUp(last)
		case <-time.After(every):
		}
	}
}

func (a *adminCmd) progress(ctx context.Context) (progressLine, error) {
	var p progressLine
	var quarantined []string
	var stuckOpen int64
	gs, err := a.c.AllGroups(ctx)
	if err != nil {
		return p, err
	}
	for _, g := range gs {
		if !g.Active {
			continue
		}
		d, err := a.c.Group(ctx, g.Name)
		if err != nil {
			return p, err
		}
		p.Groups++
		for _, n := range d.Ranges {
			p.Ranges += n
		}
		p.Done += d.Ranges[leasehold.StatusDone]
		p.Leased += d.Ranges[leasehold.StatusLeased]
		p.Planned += d.Ranges[leasehold.StatusPlanned]
		p.Failed += d.Ranges[leasehold.StatusFailed]
		// A peer's group is held at its owner: in a fleet, this node's
		// catalog folds the owner's holder, and the window is not final
		// until that holder has uploaded it and let go.
		if d.Lease != nil || d.Peer != nil && d.Peer.Holder != "" {
			p.Held++
		}
		if q := d.Quarantine; q != nil {
			p.Quarantined++
			if open := d.Ranges[leasehold.StatusPlanned] + d.Ranges[leasehold.StatusLeased]; open > 0 {
				quarantined = append(quarantined, fmt.Sprintf("group %s is quarantined since %s by %s (%s; %d ranges open): `leasehold admin groups unquarantine %s` or `drop-snapshot %s`",
					d.Name, q.At.Format(time.RFC3339), q.Node, strings.Join(strings.Fields(q.Error), " "), open, d.Name, d.Name))
				stuckOpen += open
			}
		}
	}
	// Only when every open range is a quarantined group's and nobody holds
	// a group does waiting longer change nothing.
	if len(quarantined) > 0 && stuckOpen == p.Planned+p.Leased && p.Held == 0 {
		p.stuck = strings.Join(quarantined, "; ")
	}
	return p, nil
}

// isTerminal reports whether w is a terminal, for progress lines that
// redraw themselves; logs and pipes get plain lines or nothing.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
