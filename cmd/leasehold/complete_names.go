package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// completeCommand is the hidden command the completion scripts run at Tab
// time: `leasehold __complete WORD...`, the words typed after "leasehold"
// up to the cursor, the last being the one completed ("" after a space).
// Where a group name, a node name or a kind goes, it asks the node (as
// --url, --token, --data and the TLS flags typed on the line say, else as
// admin would) and prints the names that start with the word, one a line.
// Elsewhere, or when the node does not answer within completeTimeout, it
// prints nothing and exits 0: the shell then offers its words as before.
const completeCommand = "__complete"

// completeTimeout bounds the node's answer: a Tab must not hang.
const completeTimeout = time.Second

// What a position on the command line names.
const (
	namesGroups = "groups"
	namesNodes  = "nodes"
	namesKinds  = "kinds"
)

func runComplete(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		return nil
	}
	words, cur := args[:len(args)-1], args[len(args)-1]
	what, o := completionTarget(words)
	if what == "" || strings.HasPrefix(cur, "-") {
		return nil
	}
	// A list of kinds (K,K): the one after the last comma is completed.
	done := ""
	if what == namesKinds {
		if i := strings.LastIndex(cur, ","); i >= 0 {
			done, cur = cur[:i+1], cur[i+1:]
		}
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	names, err := nodeNames(ctx, o, what)
	if err != nil {
		return nil // nothing printed: the shell falls back to its own words
	}
	for _, n := range names {
		if strings.HasPrefix(n, cur) && !slices.Contains(strings.Split(done, ","), n) {
			fmt.Fprintln(stdout, done+n)
		}
	}
	return nil
}

// completionTarget reads the words before the one completed: what goes
// where the cursor is (namesGroups, namesNodes, namesKinds, or "" for
// none of them) and the operator the line's flags describe.
func completionTarget(words []string) (string, *operator) {
	o := newOperator()
	if len(words) == 0 {
		return "", o
	}
	switch words[0] {
	case "admin":
	case "snapshot":
		// snapshot get|put GROUP ...: the group is the first argument.
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		o.flags(fs)
		fs.Bool("quiet", false, "")
		fs.Bool("force", false, "")
		fs.String("o", "", "")
		fs.String("next", "", "")
		pos, _, prev := positionals(fs, words[1:])
		if prev == nil && len(pos) == 1 && (pos[0] == "get" || pos[0] == "put") {
			return namesGroups, o
		}
		return "", o
	default:
		return "", o
	}
	// admin [operator flags] NOUN VERB [flags and arguments]
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	o.flags(fs)
	pos, at, _ := positionals(fs, words[1:])
	if len(pos) < 2 {
		return "", o
	}
	v, ok := lookupVerb(pos[0], pos[1])
	if !ok {
		return "", o
	}
	vf := flag.NewFlagSet("", flag.ContinueOnError)
	o.flags(vf)
	v.flags(&adminCmd{op: o, stdout: io.Discard, stderr: io.Discard}, vf)
	// The words after the noun and verb, the operator's flags among them.
	args, _, prev := positionals(vf, words[1+at[1]+1:])
	if prev != nil {
		switch prev.Name {
		case "kind", "kinds":
			return namesKinds, o
		case "failed":
			return namesGroups, o
		}
		return "", o
	}
	switch {
	case v.noun == "groups" && v.verb != "create" && v.verb != "list" && len(args) == 0:
		return namesGroups, o
	case v.noun == "nodes" && v.verb != "register" && v.verb != "list" && len(args) == 0:
		return namesNodes, o
	case v.noun == "nodes" && v.verb == "kinds" && len(args) == 1:
		return namesKinds, o
	}
	return "", o
}

// positionals sets the flags of fs that words give (each as it is
// written: a bad value is left unset) and returns the other words with
// their indexes in words, and the flag whose value the next word is (nil
// when it is not one).
func positionals(fs *flag.FlagSet, words []string) (pos []string, at []int, pending *flag.Flag) {
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			for j := i + 1; j < len(words); j++ {
				pos, at = append(pos, words[j]), append(at, j)
			}
			return pos, at, nil
		}
		if !strings.HasPrefix(w, "-") || w == "-" {
			pos, at = append(pos, w), append(at, i)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if !hasValue {
			if i+1 == len(words) {
				return pos, at, f
			}
			i++
			value = words[i]
		}
		_ = f.Value.Set(value)
	}
	return pos, at, nil
}

// nodeNames asks the node for the names of what.
func nodeNames(ctx context.Context, o *operator, what string) ([]string, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if what == namesGroups || what == namesKinds {
		gs, err := c.AllGroups(ctx)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			if what == namesGroups {
				add(g.Name)
			} else {
				add(g.Kind)
			}
		}
	}
	if what == namesNodes || what == namesKinds {
		ns, err := c.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range ns {
			if what == namesNodes {
				add(n.Name)
			} else {
				for _, k := range n.Kinds {
					add(k)
				}
			}
		}
	}
	if what == namesKinds {
		add(leasehold.DefaultSourceKind)
	}
	slices.Sort(names)
	return names, nil
}
