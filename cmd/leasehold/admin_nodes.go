package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

func (a *adminCmd) nodesRegister(fs *flag.FlagSet) verbFunc {
	var capacity, pmin, pmax int64
	fs.Int64Var(&capacity, "capacity", 0, "groups the node may hold at once (default: the node's)")
	fs.Int64Var(&pmin, "priority-min", 0, "lowest range priority it works on")
	fs.Int64Var(&pmax, "priority-max", 0, "highest range priority it works on")
	quiet := fs.Bool("q", false, "print only the token")
	kinds := fs.String("kinds", leasehold.DefaultSourceKind, "the kinds of group its worker reads, comma-separated (nntp: the Usenet worker)")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args, "NAME"); err != nil {
			return err
		}
		spec := client.NodeSpec{Name: args[0], Kinds: strings.Split(*kinds, ",")}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "capacity":
				spec.Capacity = &capacity
			case "priority-min":
				spec.PriorityMin = &pmin
			case "priority-max":
				spec.PriorityMax = &pmax
			}
		})
		n, err := a.c.RegisterNode(ctx, spec)
		switch {
		case err != nil:
			return err
		case *quiet:
			fmt.Fprintln(a.stdout, n.Token)
			return nil
		case a.op.json:
			return a.printJSON(n)
		}
		fmt.Fprintf(a.stdout, "node %s registered (id %d, kinds %s, capacity %d)\ntoken: %s\n(the token is shown only now)\n",
			n.Name, n.ID, strings.Join(n.Kinds, ","), n.Capacity, n.Token)
		return nil
	}
}

func (a *adminCmd) nodesRotateToken(fs *flag.FlagSet) verbFunc {
	quiet := fs.Bool("q", false, "print only the token")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args, "ID|NAME"); err != nil {
			return err
		}
		id, err := a.nodeID(ctx, args[0])
		if err != nil {
			return err
		}
		token, err := a.c.RotateNodeToken(ctx, id)
		switch {
		case err != nil:
			return err
		case *quiet:
			fmt.Fprintln(a.stdout, token)
			return nil
		case a.op.json:
			return a.printJSON(map[string]any{"id": id, "token": token})
		}
		fmt.Fprintf(a.stdout, "node %s has a new token; its old one is refused from now on\ntoken: %s\n(the token is shown only now)\n", args[0], token)
		return nil
	}
}

// nodesKinds sets the kinds of group a node's worker reads.
func (a *adminCmd) nodesKinds(ctx context.Context, args []string) error {
	if err := wantArgs(args, "ID|NAME", "K[,K]"); err != nil {
		return err
	}
	id, err := a.nodeID(ctx, args[0])
	if err != nil {
		return err
	}
	n, err := a.c.ChangeNode(ctx, id, client.NodeChange{Kinds: strings.Split(args[1], ",")})
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(n)
	}
	fmt.Fprintf(a.stdout, "node %s reads kinds %s\n", n.Name, strings.Join(n.Kinds, ","))
	return nil
}

func (a *adminCmd) nodesPause(fs *flag.FlagSet) verbFunc {
	return a.pauseOrResume(fs, "pause", (*client.Client).PauseNode)
}

func (a *adminCmd) nodesResume(fs *flag.FlagSet) verbFunc {
	return a.pauseOrResume(fs, "resume", (*client.Client).ResumeNode)
}

// pauseOrResume is nodes pause or nodes resume (verb), done by setFunc
// (the client is made only after the flags are parsed).
func (a *adminCmd) pauseOrResume(fs *flag.FlagSet, verb string, setFunc func(c *client.Client, ctx context.Context, id int64, by string) (*leasehold.Node, error)) verbFunc {
	by := fs.String("by", os.Getenv("USER"), "who pauses or resumes")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args, "ID|NAME"); err != nil {
			return err
		}
		id, err := a.nodeID(ctx, args[0])
		if err != nil {
			return err
		}
		n, err := setFunc(a.c, ctx, id, *by)
		if err != nil {
			return err
		}
		if a.op.json {
			return a.printJSON(n)
		}
		fmt.Fprintf(a.stdout, "node %s %sd\n", n.Name, verb)
		return nil
	}
}

func (a *adminCmd) nodesDelete(fs *flag.FlagSet) verbFunc {
	force := fs.Bool("force", false, "delete it even while it holds groups (they are released from under its worker)")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args, "ID|NAME"); err != nil {
			return err
		}
		id, err := a.nodeID(ctx, args[0])
		if err != nil {
			return err
		}
		err = a.c.DeleteNode(ctx, id, *force)
		if errors.Is(err, leasehold.ErrConflict) && !*force && confirm(a.stderr, err.Error()+"\nDelete it anyway?") {
			err = a.c.DeleteNode(ctx, id, true)
		}
		if err != nil {
			return forceHint(err, *force)
		}
		if a.op.json {
			return a.printJSON(map[string]any{"deleted": id})
		}
		fmt.Fprintf(a.stdout, "node %s deleted; what it held is released\n", args[0])
		return nil
	}
}

// confirm asks question on a terminal and reports whether the answer was
// yes; without a terminal on both stdin and stderr it asks nothing and
// answers no, so scripts need --force to do what the node guards.
func confirm(stderr io.Writer, question string) bool {
	if !isTerminal(os.Stdin) || !isTerminal(stderr) {
		return false
	}
	fmt.Fprintf(stderr, "%s [y/N] ", question)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		// Ctrl-D ends the input with no newline echoed: what follows
		// starts a line of its own, not after the question.
		fmt.Fprintln(stderr)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// forceHint adds how to go ahead to a guarded write's refusal.
func forceHint(err error, forced bool) error {
	if errors.Is(err, leasehold.ErrConflict) && !forced && strings.Contains(err.Error(), "force") {
		return fmt.Errorf("%w (run it again with --force)", err)
	}
	return err
}

func (a *adminCmd) nodesList(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	ns, now, err := a.c.NodesAt(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(ns)
	}
	if now.IsZero() { // a node that sends no Date: this machine's clock
		now = time.Now()
	}
	head := []string{"ID", "NAME", "KINDS", "STATE", "PRIORITY", "CAPACITY", "HELD", "PAUSED", "LAST_SEEN"}
	// Visitors (registered at another node of the fleet) say where: a
	// HOME column, only when there are any.
	visitors := slices.ContainsFunc(ns, func(n leasehold.Node) bool { return n.Home != "" })
	if visitors {
		head = append(head, "HOME")
	}
	return a.table(head, len(ns), func(i int) []any {
		n := ns[i]
		paused := "no"
		if n.Paused {
			paused = "by " + n.PausedBy
		}
		seen := "never"
		if n.LastSeenAt != nil {
			seen = max(now.Sub(*n.LastSeenAt), 0).Round(time.Second).String() + " ago"
		}
		row := []any{n.ID, n.Name, strings.Join(n.Kinds, ","), n.State, fmt.Sprintf("%d..%d", n.PriorityMin, n.PriorityMax), n.Capacity, n.Held, paused, seen}
		if visitors {
			row = append(row, cmp.Or(n.Home, "here"))
		}
		return row
	})
}

// nodeNames is the worker nodes' names by id, for tables that name the
// node a row concerns (a node deleted since keeps its id there).
func (a *adminCmd) nodeNames(ctx context.Context) (map[int64]string, error) {
	ns, err := a.c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	names := make(map[int64]string, len(ns))
	for _, n := range ns {
		names[n.ID] = n.Name
	}
	return names, nil
}

// nodeID takes a node's id or looks its name up.
func (a *adminCmd) nodeID(ctx context.Context, arg string) (int64, error) {
	if id, err := strconv.ParseInt(arg, 10, 64); err == nil {
		return id, nil
	}
	ns, err := a.c.Nodes(ctx)
	if err != nil {
		return 0, err
	}
	for _, n := range ns {
		if n.Name == arg {
			return n.ID, nil
		}
	}
	return 0, leasehold.Errorf(leasehold.KindNotFound, "no node named %q", arg)
}
