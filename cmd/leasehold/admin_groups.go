package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// groupSpecFlags are the flags of groups create and update.
type groupSpecFlags struct {
	rangeSize, priority, start int64
	inactive, active           bool
	kind                       string
	// create is groups create, which refuses a group that exists unless
	// update says to change it.
	create, update bool
}

func (a *adminCmd) groupsCreate(fs *flag.FlagSet) verbFunc {
	var spec groupSpecFlags
	spec.register(fs)
	fs.Int64Var(&spec.start, "start", 0, "the first id the tail plans from (not given: the low water mark a worker first reports for the group, else 1)")
	fs.BoolVar(&spec.inactive, "inactive", false, "create the group inactive")
	fs.BoolVar(&spec.update, "update", false, "change the group if it exists (not its --start; refused while a worker holds it)")
	spec.create = true
	return func(ctx context.Context, args []string) error { return a.putGroup(ctx, fs, &spec, args) }
}

func (a *adminCmd) groupsUpdate(fs *flag.FlagSet) verbFunc {
	var spec groupSpecFlags
	spec.register(fs)
	fs.BoolVar(&spec.active, "active", true, "whether the group is leased at all")
	return func(ctx context.Context, args []string) error { return a.putGroup(ctx, fs, &spec, args) }
}

// register registers the flags groups create and update share.
func (spec *groupSpecFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&spec.rangeSize, "range-size", 0, "ids per range (0: the node's default)")
	fs.Int64Var(&spec.priority, "priority", 0, "the group's priority, lower first")
	fs.StringVar(&spec.kind, "kind", leasehold.DefaultSourceKind, "the source it is read from (nntp: the Usenet worker's); only nodes of this kind lease it")
}

// putGroup creates or updates a group with the flags given on fs; those
// not given keep the node's defaults or the group's values.
func (a *adminCmd) putGroup(ctx context.Context, fs *flag.FlagSet, spec *groupSpecFlags, args []string) error {
	if err := wantArgs(args, "NAME"); err != nil {
		return err
	}
	var gs client.GroupSpec
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["range-size"] {
		gs.RangeSize = &spec.rangeSize
	}
	if set["priority"] {
		gs.Priority = &spec.priority
	}
	if set["start"] {
		gs.Start = &spec.start
	}
	if set["kind"] {
		gs.Kind = &spec.kind
	}
	if set["inactive"] {
		gs.Active = new(!spec.inactive)
	}
	if set["active"] {
		gs.Active = &spec.active
	}
	if spec.create {
		if err := checkNewGroupName(args[0]); err != nil {
			return err
		}
		// The API's PUT creates or updates; create asks first, so that a
		// name taken already is not silently turned into another group.
		if err := a.mayCreate(ctx, args[0], spec, set); err != nil {
			return err
		}
	}
	g, created, err := a.c.PutGroup(ctx, args[0], gs)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(g)
	}
	what := "updated"
	if created {
		what = "created"
	}
	fmt.Fprintf(a.stdout, "group %s %s (id %d, kind %s, range size %d, start %d)\n", g.Name, what, g.ID, g.Kind, g.RangeSize, g.Start)
	return nil
}

// plannedIDs is the ids a group has planned, LOW..HIGH, or none yet (its
// tail end is Start-1 and its floor Start until something is planned).
func plannedIDs(g leasehold.Group) string {
	if g.TailEnd < g.HistoryFloor {
		return fmt.Sprintf("none yet (the tail starts at %d)", g.HistoryFloor)
	}
	return fmt.Sprintf("%d..%d", g.HistoryFloor, g.TailEnd)
}

// checkNewGroupName refuses a name the API takes but no source has: an
// empty word between dots (Bad..name) or a dot at the end.
func checkNewGroupName(name string) error {
	if strings.Contains(name, "..") || strings.HasSuffix(name, ".") {
		return usageError(fmt.Errorf("group name %q has an empty word between dots; group names are words joined by single dots (alt.binaries.test)", name))
	}
	return nil
}

// mayCreate is nil when groups create may go on with name: it is free, or
// it exists and --update says to change it while no worker holds it.
func (a *adminCmd) mayCreate(ctx context.Context, name string, spec *groupSpecFlags, set map[string]bool) error {
	g, err := a.c.Group(ctx, name)
	if errors.Is(err, leasehold.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !spec.update {
		return leasehold.Errorf(leasehold.KindConflict,
			"group %s exists (kind %s, range size %d, start %d): nothing changed; give --update to change it, or use admin groups update",
			name, g.Kind, g.RangeSize, g.Start)
	}
	if set["start"] {
		return usageError(fmt.Errorf("group %s exists (start %d): --start is only for a new group", name, g.Start))
	}
	if holder := groupHolder(g); holder != "" {
		return leasehold.Errorf(leasehold.KindConflict,
			"group %s is held by %s: nothing changed; change it once the worker has released it", name, holder)
	}
	return nil
}

// groupHolder names the worker node holding g, here or at its owner in
// the fleet; "" when none does.
func groupHolder(g *leasehold.GroupDetail) string {
	switch {
	case g.Lease != nil:
		return g.Lease.Node
	case g.Peer != nil && g.Peer.Holder != "":
		return g.Peer.Holder
	}
	return ""
}

func (a *adminCmd) groupsTail(ctx context.Context, args []string) error {
	return a.plan(ctx, "tail", "HIGH", a.c.PlanTail, args)
}

func (a *adminCmd) groupsHistory(ctx context.Context, args []string) error {
	return a.plan(ctx, "history", "LOW", a.c.PlanHistory, args)
}

// plan plans a group's tail or history up to the id in args[1], named arg.
func (a *adminCmd) plan(ctx context.Context, verb, arg string, planFunc func(ctx context.Context, group string, id int64) (int64, error), args []string) error {
	if err := wantArgs(args, "NAME", arg); err != nil {
		return err
	}
	id, err := parseInt(arg, args[1])
	if err != nil {
		return err
	}
	if id < 1 {
		return usageError(fmt.Errorf("%s %d: ids start at 1", arg, id))
	}
	n, err := planFunc(ctx, args[0], id)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(map[string]int64{"planned": n})
	}
	fmt.Fprintf(a.stdout, "group %s: %d %s ranges planned\n", args[0], n, verb)
	return nil
}

func (a *adminCmd) groupsRanges(fs *flag.FlagSet) verbFunc {
	status := fs.String("status", "", "only ranges of this status: planned, leased, done, failed")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args, "NAME"); err != nil {
			return err
		}
		rs, err := a.c.AllRanges(ctx, args[0], leasehold.RangeStatus(*status))
		if err != nil {
			return err
		}
		if a.op.json {
			return a.printJSON(rs)
		}
		names, err := a.nodeNames(ctx)
		if err != nil {
			return err
		}
		return a.table([]string{"ID", "START", "END", "NEXT", "STATUS", "PRIORITY", "NODE", "ATTEMPTS", "LAST_ERROR"}, len(rs), func(i int) []any {
			r := rs[i]
			node := optInt(r.NodeID)
			if r.NodeID != nil && names[*r.NodeID] != "" {
				node = names[*r.NodeID]
			}
			return []any{r.ID, r.Start, r.End, r.Next, r.Status, r.Priority, node, r.Attempts, lastError(r)}
		})
	}
}

// lastError is a range's last error for a table cell: one line, at most
// 80 bytes, "-" when it has none.
func lastError(r leasehold.Range) string {
	if r.LastError == nil {
		return "-"
	}
	s := strings.Join(strings.Fields(*r.LastError), " ")
	if len(s) > 80 {
		cut := 77
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

func (a *adminCmd) groupsUnquarantine(ctx context.Context, args []string) error {
	return a.groupWrite(ctx, args, a.c.LiftQuarantine, "group %s: quarantine lifted; its window is handed out again\n")
}

func (a *adminCmd) groupsDropSnapshot(ctx context.Context, args []string) error {
	return a.groupWrite(ctx, args, a.c.DropGroupSnapshot, "group %s: window dropped, quarantine lifted; its next holder starts without a window\n")
}

// groupWrite runs an operator's write on the group NAME and says what it did.
func (a *adminCmd) groupWrite(ctx context.Context, args []string, write func(context.Context, string) (*leasehold.Group, error), done string) error {
	if err := wantArgs(args, "NAME"); err != nil {
		return err
	}
	g, err := write(ctx, args[0])
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(g)
	}
	fmt.Fprintf(a.stdout, done, g.Name)
	return nil
}

func (a *adminCmd) groupsDelete(fs *flag.FlagSet) verbFunc {
	yes := fs.Bool("yes", false, "delete without asking on a terminal")
	return func(ctx context.Context, args []string) error { return a.groupDelete(ctx, args, *yes) }
}

// groupDelete deletes the group args[0]. On a terminal it first asks,
// naming what goes with it, unless yes; scripts (no terminal) are not
// asked, as before.
func (a *adminCmd) groupDelete(ctx context.Context, args []string, yes bool) error {
	if err := wantArgs(args, "NAME"); err != nil {
		return err
	}
	if !yes && isTerminal(os.Stdin) && isTerminal(a.stderr) {
		g, err := a.c.Group(ctx, args[0])
		if err != nil {
			return err
		}
		var total int64
		for _, n := range g.Ranges {
			total += n
		}
		window := "no window"
		if g.Snapshot != nil {
			window = "its window"
		}
		q := fmt.Sprintf("group %s has %d range(s), %d done, and %s; deleting it forgets them all.\nDelete it?",
			g.Name, total, g.Ranges[leasehold.StatusDone], window)
		if !confirm(a.stderr, q) {
			return fmt.Errorf("group %s not deleted (--yes deletes without asking)", args[0])
		}
	}
	if err := a.c.DeleteGroup(ctx, args[0]); err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(map[string]string{"deleted": args[0]})
	}
	fmt.Fprintf(a.stdout, "group %s deleted with its ranges and window\n", args[0])
	return nil
}

func (a *adminCmd) groupsList(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	gs, err := a.c.AllGroups(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(gs)
	}
	details, err := a.groupDetails(ctx, gs)
	if err != nil {
		return err
	}
	return a.table([]string{"ID", "NAME", "KIND", "PRIORITY", "ACTIVE", "RANGE_SIZE", "HISTORY_FLOOR", "TAIL_END", "DONE", "HOLDER", "QUARANTINE", "SOURCE_ERROR"}, len(gs), func(i int) []any {
		g, d := gs[i], details[i]
		sourceErr := "-"
		if e := g.SourceError; e != nil {
			sourceErr = strings.Join(strings.Fields(e.Error), " ")
		}
		// DONE is ranges done of all the group's ranges; a group another
		// node deleted meanwhile shows "-".
		done, holder := "-", "-"
		if d != nil {
			var total int64
			for _, n := range d.Ranges {
				total += n
			}
			done = fmt.Sprintf("%d/%d", d.Ranges[leasehold.StatusDone], total)
			if h := groupHolder(d); h != "" {
				holder = h
			}
		}
		quarantine := "-"
		if q := g.Quarantine; q != nil {
			quarantine = q.Node + ": " + strings.Join(strings.Fields(q.Error), " ")
		}
		return []any{g.ID, g.Name, g.Kind, g.Priority, g.Active, g.RangeSize, g.HistoryFloor, g.TailEnd, done, holder, quarantine, sourceErr}
	})
}

// groupDetails reads each group's ranges and holder, a few at a time (the
// list of groups carries neither); nil for a group gone meanwhile.
func (a *adminCmd) groupDetails(ctx context.Context, gs []leasehold.Group) ([]*leasehold.GroupDetail, error) {
	out := make([]*leasehold.GroupDetail, len(gs))
	errs := make([]error, len(gs))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d, err := a.c.Group(ctx, g.Name)
			if errors.Is(err, leasehold.ErrNotFound) {
				err = nil
			}
			out[i], errs[i] = d, err
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (a *adminCmd) groupsShow(ctx context.Context, args []string) error {
	if err := wantArgs(args, "NAME"); err != nil {
		return err
	}
	g, err := a.c.Group(ctx, args[0])
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(g)
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "group\t%s (id %d)\n", g.Name, g.ID)
	fmt.Fprintf(w, "kind\t%s\npriority\t%d\nactive\t%t\nrange size\t%d\nplanned ids\t%s\n", g.Kind, g.Priority, g.Active, g.RangeSize, plannedIDs(g.Group))
	if e := g.SourceError; e != nil {
		fmt.Fprintf(w, "source error\tsince %s from %s: %s\n", e.At.Format(time.RFC3339), e.Node, strings.Join(strings.Fields(e.Error), " "))
	}
	fmt.Fprintf(w, "ranges\tplanned %d, leased %d, done %d, failed %d\n",
		g.Ranges[leasehold.StatusPlanned], g.Ranges[leasehold.StatusLeased], g.Ranges[leasehold.StatusDone], g.Ranges[leasehold.StatusFailed])
	if l := g.Lease; l != nil {
		fmt.Fprintf(w, "held by\t%s (node %d) at fence %d since %s, heartbeat %s ago\n",
			l.Node, l.NodeID, l.Fence, l.LeasedAt.Format(time.RFC3339), time.Since(l.HeartbeatAt).Round(time.Second))
		fmt.Fprintf(w, "done\t%d ranges, %d headers\n", l.RangesDone, l.Headers)
	} else {
		fmt.Fprintf(w, "held by\tnobody\n")
	}
	if q := g.Quarantine; q != nil {
		fmt.Fprintf(w, "quarantined\tsince %s by %s: %s\n", q.At.Format(time.RFC3339), q.Node, strings.Join(strings.Fields(q.Error), " "))
	}
	if s := g.Snapshot; s != nil {
		fmt.Fprintf(w, "snapshot\tnext %d, %d bytes, sha256 %s, at %s\n", s.Next, s.Size, s.SHA256, s.At.Format(time.RFC3339))
	} else {
		fmt.Fprintf(w, "snapshot\tnone\n")
	}
	return w.Flush()
}
