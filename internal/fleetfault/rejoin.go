package fleetfault

import (
	"fmt"
	"io"
	"time"
)

// RejoinTakeover is the liveness figure of one fault that came after
// another node's fault had healed (a killed node restarted, a paused one
// resumed, a cut one reconnected): the fleet is still settling the
// rejoined member (its NATS server catching up, the streams electing
// leaders with it), and the faulted node's groups are to be taken over
// all the same within the claim TTL + 5 s.
type RejoinTakeover struct {
	Fault FaultFigures
	// Rejoined is the node whose fault healed before this one, and Since
	// how long before this fault began it did.
	Rejoined string
	Since    time.Duration
	// Moved counts the groups in work at the faulted node that were
	// granted or owned elsewhere before the next fault; Complete is when
	// the last of them was, from this fault's start (-1 when not all were).
	Moved    int
	Complete time.Duration
}

// Within reports whether every group in work was taken over within bound
// of the fault's start.
func (t RejoinTakeover) Within(bound time.Duration) bool {
	return t.Complete >= 0 && t.Complete <= bound
}

// RejoinTakeovers lists the faults that began after another node's fault
// healed, with groups in work at their node, and when their takeover
// completed: each group's first grant or ownership elsewhere, the last
// of those.
func (r *Report) RejoinTakeovers() []RejoinTakeover {
	var out []RejoinTakeover
	for i, f := range r.Faults {
		if i == 0 || len(f.InWork) == 0 {
			continue
		}
		prev := r.Faults[i-1]
		if prev.Node == f.Node || prev.End > f.Start {
			continue
		}
		t := RejoinTakeover{Fault: f, Rejoined: prev.Node, Since: f.Start - prev.End, Complete: -1}
		var last time.Duration
		for _, g := range f.InWork {
			moved := f.adoption(g)
			for _, tk := range f.TakenOver {
				if tk.Group == g && (moved < 0 || tk.After < moved) {
					moved = tk.After
				}
			}
			if moved >= 0 {
				t.Moved++
				last = max(last, moved)
			}
		}
		if t.Moved == len(f.InWork) {
			t.Complete = last
		}
		out = append(out, t)
	}
	return out
}

// printRejoins writes each takeover after a rejoin against bound (the
// claim TTL + 5 s; none when bound is 0).
func (r *Report) printRejoins(w io.Writer, bound time.Duration) {
	for _, t := range r.RejoinTakeovers() {
		f := t.Fault
		done := fmt.Sprintf("%d of %d not taken over", len(f.InWork)-t.Moved, len(f.InWork))
		if t.Complete >= 0 {
			done = fmt.Sprintf("all %d taken over (granted or owned elsewhere) %.1fs after it began", len(f.InWork), t.Complete.Seconds())
		}
		verdict := ""
		switch {
		case bound <= 0:
		case t.Within(bound):
			verdict = fmt.Sprintf("; within %s (claim TTL + 5s)", bound)
		case f.End-f.Start < bound:
			verdict = fmt.Sprintf("; the fault lasted %.1fs, less than %s (claim TTL + 5s)", (f.End - f.Start).Seconds(), bound)
		default:
			verdict = fmt.Sprintf("; NOT within %s (claim TTL + 5s)", bound)
		}
		fmt.Fprintf(w, "takeover after a rejoin: %s began %.1fs after %s rejoined: %s%s\n", f.Fault, t.Since.Seconds(), t.Rejoined, done, verdict)
	}
}
