package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// adminUsage is the admin command's help, its commands listed from
// adminVerbs.
func adminUsage() string {
	var b strings.Builder
	b.WriteString("Usage: leasehold admin [--url U] [--token T] [--data DIR] [--output table|json] <noun> <verb> [args]\n\n")
	for _, v := range adminVerbs {
		line := strings.Join(strings.Fields(v.noun+" "+v.verb+" "+v.args), " ")
		if v.summary == "" {
			fmt.Fprintf(&b, "  %s\n", line)
		} else {
			fmt.Fprintf(&b, "  %-36s %s\n", line, v.summary)
		}
	}
	b.WriteString(`
Flags may come anywhere after "admin"; --json is --output json. The admin
token is --token, else $LEASEHOLD_ADMIN_TOKEN, else <--data>/admin.token.
"leasehold admin NOUN -h" lists a noun's verbs, "leasehold admin NOUN VERB -h"
a verb's flags.
`)
	return b.String()
}

// operator is what every operator command (admin, snapshot) shares: where
// the node is and the admin token.
type operator struct {
	url, token, data string
	json             bool
	tls              clientTLS
}

// flags registers the operator's flags on fs. Every verb's FlagSet gets
// them, so they may come before or after the verb.
func (o *operator) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", o.url, "node URL (default $LEASEHOLD_URL or "+client.DefaultURL+")")
	fs.StringVar(&o.token, "token", o.token, "admin token (default $LEASEHOLD_ADMIN_TOKEN or <data>/admin.token)")
	fs.StringVar(&o.data, "data", o.data, "the node's data directory, for admin.token")
	fs.Var((*outputFlag)(&o.json), "output", "`table|json`: tables for people, JSON for scripts")
	fs.BoolVar(&o.json, "json", o.json, "print JSON for scripts (as --output json)")
	o.tls.flags(fs)
}

// outputFlag is --output table|json: true for json.
type outputFlag bool

func (o *outputFlag) String() string {
	if o != nil && *o {
		return "json"
	}
	return "table"
}

func (o *outputFlag) Set(s string) error {
	switch s {
	case "json":
		*o = true
	case "table":
		*o = false
	default:
		return fmt.Errorf("%q: want table or json", s)
	}
	return nil
}

// printJSON prints v indented, for scripts.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newOperator() *operator {
	return &operator{url: envOr("LEASEHOLD_URL", client.DefaultURL), data: "./data"}
}

// client resolves the admin token and returns a client of the node.
func (o *operator) client() (*client.Client, error) {
	token, err := adminToken(o.token, o.data)
	if err != nil {
		return nil, err
	}
	return o.tls.apply(client.New(o.url, token))
}

// adminToken is the flag's token, else $LEASEHOLD_ADMIN_TOKEN, else the one
// the node wrote to <data>/admin.token on its first start.
func adminToken(flagToken, data string) (string, error) {
	if flagToken != "" {
		return flagToken, nil
	}
	if t := os.Getenv("LEASEHOLD_ADMIN_TOKEN"); t != "" {
		return t, nil
	}
	path := filepath.Join(data, "admin.token")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usageError(fmt.Errorf("no admin token: give --token, set LEASEHOLD_ADMIN_TOKEN or point --data at the node's data directory (%v)", err))
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("no admin token: %s is empty", path)
	}
	return t, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// wantArgs checks the number of positional arguments of a verb.
func wantArgs(args []string, names ...string) error {
	if len(args) != len(names) {
		return usageError(fmt.Errorf("want %d argument(s): %s; got %q", len(names), strings.Join(names, " "), args))
	}
	return nil
}

func parseInt(what, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, usageError(fmt.Errorf("%s: %q is not an integer", what, s))
	}
	return n, nil
}

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOperator()
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, adminUsage()) }
	o.flags(fs)
	// Only the operator's flags come before the noun; the verb parses the rest.
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return usageError(errors.New("admin: no command given"))
	}
	noun, rest := rest[0], rest[1:]
	if isHelp(noun) {
		fmt.Fprint(stderr, adminUsage())
		return errHelp
	}
	verb := ""
	if !nounOnly(noun) {
		if len(rest) == 0 || isHelp(rest[0]) {
			verbs := nounUsage(noun)
			if verbs == "" {
				fs.Usage()
				return usageError(fmt.Errorf("admin: unknown noun %q%s", noun, didYouMean(noun, "")))
			}
			fmt.Fprint(stderr, verbs)
			if len(rest) == 0 {
				return usageError(fmt.Errorf("admin %s: no verb given", noun))
			}
			return errHelp
		}
		verb, rest = rest[0], rest[1:]
	}
	v, ok := lookupVerb(noun, verb)
	if !ok {
		fs.Usage()
		return usageError(fmt.Errorf("admin: unknown command %q %q%s", noun, verb, didYouMean(noun, verb)))
	}
	a := &adminCmd{op: o, stdout: stdout, stderr: stderr}
	vf := flag.NewFlagSet(strings.TrimSpace("admin "+noun+" "+verb), flag.ContinueOnError)
	vf.SetOutput(stderr)
	o.flags(vf)
	run := v.flags(a, vf)
	vf.Usage = func() { fmt.Fprint(stderr, verbUsage(v, vf)) }
	pos, err := parseInterspersed(vf, rest)
	if err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	a.c = c
	return run(ctx, pos)
}

// adminCmd runs one admin verb.
type adminCmd struct {
	op     *operator
	c      *client.Client
	stdout io.Writer
	stderr io.Writer
}

type verbFunc func(ctx context.Context, args []string) error

// adminVerb is one admin command: its words, its line in the usage text
// and what runs it.
type adminVerb struct {
	noun, verb string // verb is "" for a command that is its noun alone (findings, wait)
	args       string // its arguments and flags, for the usage text
	summary    string // what it does, for the usage text; "" when the line is full already
	// flags registers the command's own flags on fs and returns what runs
	// it once they are parsed.
	flags func(a *adminCmd, fs *flag.FlagSet) verbFunc
}

// adminVerbs are the admin commands, in the usage text's order.
var adminVerbs = []adminVerb{
	{"groups", "list", "", "the groups", noFlags((*adminCmd).groupsList)},
	{"groups", "show", "NAME", "a group with its lease and range counts", noFlags((*adminCmd).groupsShow)},
	{"groups", "create", "NAME [--kind K] [--range-size N] [--priority P] [--start S] [--inactive]", "", (*adminCmd).groupsCreate},
	{"groups", "update", "NAME [--kind K] [--range-size N] [--priority P] [--active=false]", "", (*adminCmd).groupsUpdate},
	{"groups", "tail", "NAME HIGH", "plan the tail up to HIGH", noFlags((*adminCmd).groupsTail)},
	{"groups", "history", "NAME LOW", "plan the history down to LOW", noFlags((*adminCmd).groupsHistory)},
	{"groups", "ranges", "NAME [--status S]", "the group's ranges", (*adminCmd).groupsRanges},
	{"groups", "unquarantine", "NAME", "lease a quarantined group again with its window", noFlags((*adminCmd).groupsUnquarantine)},
	{"groups", "drop-snapshot", "NAME", "drop the group's window and lift its quarantine", noFlags((*adminCmd).groupsDropSnapshot)},
	{"nodes", "list", "", "the worker nodes", noFlags((*adminCmd).nodesList)},
	{"nodes", "register", "NAME [--kinds K,K] [--capacity N] [--priority-min P] [--priority-max P] [-q]", "", (*adminCmd).nodesRegister},
	{"nodes", "kinds", "ID|NAME K[,K]", "set the kinds of group the node's worker reads", noFlags((*adminCmd).nodesKinds)},
	{"nodes", "pause", "ID|NAME [--by WHO]", "", (*adminCmd).nodesPause},
	{"nodes", "resume", "ID|NAME [--by WHO]", "", (*adminCmd).nodesResume},
	{"nodes", "delete", "ID|NAME [--force]", "asks first on a terminal when the node holds groups", (*adminCmd).nodesDelete},
	{"nodes", "rotate-token", "ID|NAME [-q]", "a new token for the node; the old one is refused at once", (*adminCmd).nodesRotateToken},
	{"ranges", "retry", "ID", "plan a failed range again", noFlags((*adminCmd).rangesRetry)},
	{"rules", "show", "", "the rules workers index by", noFlags((*adminCmd).rulesShow)},
	{"rules", "put", "FILE|-", "store new rules from FILE (- is stdin)", noFlags((*adminCmd).rulesPut)},
	{"findings", "", "", "what is stuck, and the backlog", noFlags((*adminCmd).findings)},
	{"rotate-token", "", "[-q]", "a new admin token; the old one and every dashboard session are refused at once", (*adminCmd).rotateAdminToken},
	{"wait", "", "[--timeout D] [--every D]", "until every active group is done and released", (*adminCmd).waitVerb},
}

// nounUsage lists noun's verbs; "" for no such noun.
func nounUsage(noun string) string {
	var b strings.Builder
	for _, v := range adminVerbs {
		if v.noun == noun {
			line := strings.Join(strings.Fields(v.noun+" "+v.verb+" "+v.args), " ")
			fmt.Fprintf(&b, "  leasehold admin %-36s %s\n", line, v.summary)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "Usage:\n" + b.String() + "\nEach takes -h; flags: --url, --token, --data, --output table|json.\n"
}

// verbUsage is one admin command's help: its line, what it does and its
// flags, the operator's included.
func verbUsage(v adminVerb, fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: leasehold admin %s\n", strings.Join(strings.Fields(v.noun+" "+v.verb+" "+v.args), " "))
	if v.summary != "" {
		fmt.Fprintf(&b, "\n%s.\n", strings.ToUpper(v.summary[:1])+v.summary[1:])
	}
	b.WriteString("\nFlags:\n")
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return b.String()
}

// lookupVerb finds the command noun verb in adminVerbs.
func lookupVerb(noun, verb string) (adminVerb, bool) {
	for _, v := range adminVerbs {
		if v.noun == noun && v.verb == verb {
			return v, true
		}
	}
	return adminVerb{}, false
}

// nounOnly reports whether noun is a command by itself, with no verb.
func nounOnly(noun string) bool {
	_, ok := lookupVerb(noun, "")
	return ok
}

// noFlags is the flags of a verb that has none of its own.
func noFlags(run func(a *adminCmd, ctx context.Context, args []string) error) func(*adminCmd, *flag.FlagSet) verbFunc {
	return func(a *adminCmd, _ *flag.FlagSet) verbFunc {
		return func(ctx context.Context, args []string) error { return run(a, ctx, args) }
	}
}

// groupSpecFlags are the flags of groups create and update.
type groupSpecFlags struct {
	rangeSize, priority, start int64
	inactive, active           bool
	kind                       string
}

func (a *adminCmd) groupsCreate(fs *flag.FlagSet) verbFunc {
	var spec groupSpecFlags
	spec.register(fs)
	fs.Int64Var(&spec.start, "start", 0, "the first id the tail plans from (not given: the low water mark a worker first reports for the group, else 1)")
	fs.BoolVar(&spec.inactive, "inactive", false, "create the group inactive")
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
	fs.StringVar(&spec.kind, "kind", leasehold.DefaultKind, "the source it is read from (nntp: the Usenet worker's); only nodes of this kind lease it")
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
		rs, err := a.c.AllRanges(ctx, args[0], *status)
		if err != nil {
			return err
		}
		if a.op.json {
			return a.printJSON(rs)
		}
		return a.table([]string{"ID", "START", "END", "NEXT", "STATUS", "PRIORITY", "NODE", "ATTEMPTS", "LAST_ERROR"}, len(rs), func(i int) []any {
			r := rs[i]
			return []any{r.ID, r.Start, r.End, r.Next, r.Status, r.Priority, optInt(r.NodeID), r.Attempts, lastError(r)}
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

func (a *adminCmd) nodesRegister(fs *flag.FlagSet) verbFunc {
	var capacity, pmin, pmax int64
	fs.Int64Var(&capacity, "capacity", 0, "groups the node may hold at once (default: the node's)")
	fs.Int64Var(&pmin, "priority-min", 0, "lowest range priority it works on")
	fs.Int64Var(&pmax, "priority-max", 0, "highest range priority it works on")
	quiet := fs.Bool("q", false, "print only the token")
	kinds := fs.String("kinds", leasehold.DefaultKind, "the kinds of group its worker reads, comma-separated (nntp: the Usenet worker)")
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

func (a *adminCmd) rotateAdminToken(fs *flag.FlagSet) verbFunc {
	quiet := fs.Bool("q", false, "print only the token")
	return func(ctx context.Context, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		token, err := a.c.RotateAdminToken(ctx)
		switch {
		case err != nil:
			return err
		case *quiet:
			fmt.Fprintln(a.stdout, token)
			return nil
		case a.op.json:
			return a.printJSON(map[string]string{"token": token})
		}
		fmt.Fprintf(a.stdout, "the node has a new admin token; the old one and every dashboard session are refused from now on\n"+
			"token: %s\n(a node keeping its token in <data>/admin.token or --admin-token-file has written it there)\n", token)
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

func (a *adminCmd) rangesRetry(ctx context.Context, args []string) error {
	if err := wantArgs(args, "ID"); err != nil {
		return err
	}
	id, err := parseInt("ID", args[0])
	if err != nil {
		return err
	}
	r, err := a.c.RetryRange(ctx, id)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(r)
	}
	fmt.Fprintf(a.stdout, "range %d planned again\n", id)
	return nil
}

func (a *adminCmd) rulesShow(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	r, err := a.c.CurrentRules(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(r)
	}
	fmt.Fprintf(a.stdout, "rules version %d\n", r.Version)
	return a.printJSON(r.Body)
}

func (a *adminCmd) rulesPut(ctx context.Context, args []string) error {
	if err := wantArgs(args, "FILE|-"); err != nil {
		return err
	}
	var body []byte
	var err error
	if args[0] == "-" {
		body, err = io.ReadAll(os.Stdin)
	} else {
		body, err = os.ReadFile(args[0])
	}
	if err != nil {
		return err
	}
	if !json.Valid(body) {
		return usageError(fmt.Errorf("rules put: %s is not JSON", args[0]))
	}
	v, err := a.c.PutRules(ctx, body)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(map[string]int64{"version": v})
	}
	fmt.Fprintf(a.stdout, "rules version %d stored\n", v)
	return nil
}

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
	return a.table([]string{"ID", "NAME", "KIND", "PRIORITY", "ACTIVE", "RANGE_SIZE", "HISTORY_FLOOR", "TAIL_END", "SOURCE_ERROR"}, len(gs), func(i int) []any {
		g := gs[i]
		sourceErr := "-"
		if e := g.SourceError; e != nil {
			sourceErr = strings.Join(strings.Fields(e.Error), " ")
		}
		return []any{g.ID, g.Name, g.Kind, g.Priority, g.Active, g.RangeSize, g.HistoryFloor, g.TailEnd, sourceErr}
	})
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
	fmt.Fprintf(w, "kind\t%s\npriority\t%d\nactive\t%t\nrange size\t%d\nplanned ids\t%d..%d\n", g.Kind, g.Priority, g.Active, g.RangeSize, g.HistoryFloor, g.TailEnd)
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

func (a *adminCmd) nodesList(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	ns, err := a.c.Nodes(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(ns)
	}
	return a.table([]string{"ID", "NAME", "KINDS", "STATE", "PRIORITY", "CAPACITY", "HELD", "PAUSED", "LAST_SEEN"}, len(ns), func(i int) []any {
		n := ns[i]
		paused := "no"
		if n.Paused {
			paused = "by " + n.PausedBy
		}
		seen := "never"
		if n.LastSeenAt != nil {
			seen = time.Since(*n.LastSeenAt).Round(time.Second).String() + " ago"
		}
		return []any{n.ID, n.Name, strings.Join(n.Kinds, ","), n.State, fmt.Sprintf("%d..%d", n.PriorityMin, n.PriorityMax), n.Capacity, n.Held, paused, seen}
	})
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

func (a *adminCmd) findings(ctx context.Context, args []string) error {
	if err := wantArgs(args); err != nil {
		return err
	}
	f, err := a.c.Findings(ctx)
	if err != nil {
		return err
	}
	if a.op.json {
		return a.printJSON(f)
	}
	fmt.Fprintf(a.stdout, "backlog: %d planned ranges waiting, oldest %s\n", f.Backlog.Planned, seconds(f.Backlog.OldestAgeS))
	if len(f.Stuck) == 0 {
		fmt.Fprintln(a.stdout, "nothing stuck")
		return nil
	}
	return a.table([]string{"KIND", "GROUP", "RANGE", "NODE", "AGE", "DETAIL"}, len(f.Stuck), func(i int) []any {
		s := f.Stuck[i]
		return []any{s.Kind, s.Group, optInt(s.Range), s.Node, seconds(s.AgeS), s.Detail}
	})
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
}

// wait polls until every active group has no planned or leased range and
// nobody holds it: its last holder uploaded the window and released it.
// In a fleet it counts the whole fleet's groups as this node has folded
// them, so one node answers for all.
// Failed ranges end the wait with an error, since nothing will lease them.
func (a *adminCmd) wait(ctx context.Context, timeout, every time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tty := isTerminal(a.stderr)
	var last progressLine
	lastPrint := time.Time{}
	for {
		p, err := a.progress(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("wait: gave up after %s: %d of %d ranges done", timeout, last.Done, last.Ranges)
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
			return fmt.Errorf("wait: gave up after %s: %d of %d ranges done", timeout, last.Done, last.Ranges)
		case <-time.After(every):
		}
	}
}

func (a *adminCmd) progress(ctx context.Context) (progressLine, error) {
	var p progressLine
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
	}
	return p, nil
}

func (a *adminCmd) printJSON(v any) error { return printJSON(a.stdout, v) }

// table prints n rows under head, aligned for people.
func (a *adminCmd) table(head []string, n int, row func(i int) []any) error {
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for i := range n {
		cells := row(i)
		s := make([]string, len(cells))
		for j, c := range cells {
			s[j] = fmt.Sprint(c)
		}
		fmt.Fprintln(w, strings.Join(s, "\t"))
	}
	return w.Flush()
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func seconds(s float64) time.Duration {
	return (time.Duration(s * float64(time.Second))).Round(time.Second)
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
