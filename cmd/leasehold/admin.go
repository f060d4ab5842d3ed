package main

import (
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
	} else if noun == "findings" && len(rest) > 0 && rest[0] == "list" {
		// findings is a command by itself; "findings list" reads as
		// "groups list" does and means the same.
		rest = rest[1:]
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
	{"groups", "create", "NAME [--kind K] [--range-size N] [--priority P] [--start S] [--inactive] [--update]", "", (*adminCmd).groupsCreate},
	{"groups", "update", "NAME [--kind K] [--range-size N] [--priority P] [--active=false]", "", (*adminCmd).groupsUpdate},
	{"groups", "tail", "NAME HIGH", "plan the tail up to HIGH", noFlags((*adminCmd).groupsTail)},
	{"groups", "history", "NAME LOW", "plan the history down to LOW", noFlags((*adminCmd).groupsHistory)},
	{"groups", "ranges", "NAME [--status S]", "the group's ranges", (*adminCmd).groupsRanges},
	{"groups", "unquarantine", "NAME", "lease a quarantined group again with its window", noFlags((*adminCmd).groupsUnquarantine)},
	{"groups", "drop-snapshot", "NAME", "drop the group's window and lift its quarantine", noFlags((*adminCmd).groupsDropSnapshot)},
	{"groups", "delete", "NAME [--yes]", "delete a group with its ranges and window, at every node of a fleet (asks first on a terminal); refused while held", (*adminCmd).groupsDelete},
	{"nodes", "list", "", "the worker nodes", noFlags((*adminCmd).nodesList)},
	{"nodes", "register", "NAME [--kinds K,K] [--capacity N] [--priority-min P] [--priority-max P] [-q]", "", (*adminCmd).nodesRegister},
	{"nodes", "kinds", "ID|NAME K[,K]", "set the kinds of group the node's worker reads", noFlags((*adminCmd).nodesKinds)},
	{"nodes", "pause", "ID|NAME [--by WHO]", "", (*adminCmd).nodesPause},
	{"nodes", "resume", "ID|NAME [--by WHO]", "", (*adminCmd).nodesResume},
	{"nodes", "delete", "ID|NAME [--force]", "asks first on a terminal when the node holds groups", (*adminCmd).nodesDelete},
	{"nodes", "rotate-token", "ID|NAME [-q]", "a new token for the node; the old one is refused at once", (*adminCmd).nodesRotateToken},
	{"fleet", "remove", "NAME [--force]", "remove a member from the fleet for good; --force for one running now", (*adminCmd).fleetRemove},
	{"fleet", "approve", "NAME", "undo a member's removal", noFlags((*adminCmd).fleetApprove)},
	{"ranges", "retry", "ID | --failed GROUP", "plan a failed range, or every failed range of GROUP, again", (*adminCmd).rangesRetry},
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
