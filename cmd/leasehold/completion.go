package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

var shells = []string{"bash", "zsh", "fish"}

const completionUsage = `Usage: leasehold completion bash|zsh|fish

Prints a completion script for the shell: commands, admin nouns and verbs,
snapshot verbs and every command's flags, and the names of groups, nodes
and kinds where a command takes them, which the script asks the node for
at Tab time (as --url, --token and --data on the line say, else as admin
would; within 1 s, and nothing when it does not answer). Load it with
  bash:  source <(leasehold completion bash)     (or save it in /etc/bash_completion.d/leasehold)
  zsh:   leasehold completion zsh > "${fpath[1]}/_leasehold"
  fish:  leasehold completion fish > ~/.config/fish/completions/leasehold.fish
`

func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || isHelp(args[0]) {
		fmt.Fprint(stderr, completionUsage)
		if len(args) == 1 {
			return errHelp
		}
		return usageError(fmt.Errorf("completion: want one of %s", strings.Join(shells, ", ")))
	}
	tree, err := completionTree(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "bash":
		return writeBash(stdout, tree)
	case "zsh":
		return writeZsh(stdout, tree)
	case "fish":
		return writeFish(stdout, tree)
	}
	fmt.Fprint(stderr, completionUsage)
	return usageError(fmt.Errorf("completion: no shell %q; want one of %s", args[0], strings.Join(shells, ", ")))
}

// completionTree maps each command path ("", "admin", "admin groups",
// "admin groups create", ...) to the words that may follow it: the next
// words of the path, then flags. It is made from commands and adminVerbs,
// and each command's flags are read from its own -h, so a new command,
// verb or flag is completed without touching this file.
func completionTree(ctx context.Context) (map[string][]string, error) {
	tree := map[string][]string{}
	add := func(key string, words ...string) {
		for _, w := range words {
			if !slices.Contains(tree[key], w) {
				tree[key] = append(tree[key], w)
			}
		}
	}
	add("")
	for _, c := range commands {
		add("", c.name)
		switch {
		case c.name == "admin":
			for _, v := range adminVerbs {
				path := strings.TrimSpace("admin " + v.noun + " " + v.verb)
				add("admin", v.noun)
				if v.verb != "" {
					add("admin "+v.noun, v.verb)
				}
				add(path, flagsOf(ctx, append(strings.Fields(path), "-h")...)...)
			}
			// Before the noun only the operator's flags are taken; admin -h
			// names them in its usage line, where flagsOf does not look.
			add("admin", operatorFlags()...)
		case c.name == "completion":
			add(c.name, c.words...)
		case len(c.words) > 0:
			add(c.name, c.words...)
			for _, w := range c.words {
				add(c.name+" "+w, flagsOf(ctx, c.name, w, "-h")...)
			}
		default:
			add(c.name, flagsOf(ctx, c.name, "-h")...)
		}
	}
	add("", "help")
	return tree, nil
}

// operatorFlags are the flags every operator command takes, as --name.
func operatorFlags() []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	newOperator().flags(fs)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, "--"+f.Name) })
	return flags
}

var flagLine = regexp.MustCompile(`(?m)^\s+(--?[a-z][a-z0-9-]*)`)

// flagsOf runs the command args (ending in -h) and returns the flags its
// help lists, as --name.
func flagsOf(ctx context.Context, args ...string) []string {
	var out bytes.Buffer
	_ = run(ctx, args, &out, &out)
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		f := "--" + strings.TrimLeft(m[1], "-")
		if len(f) == 3 {
			f = f[1:] // -q, -o: one letter, one dash
		}
		if f == "-h" || slices.Contains(flags, f) {
			continue
		}
		flags = append(flags, f)
	}
	return flags
}

// sortedKeys are tree's paths in order, the empty one (the command line
// with no command yet) as ".", since shells' maps take no empty key.
func sortedKeys(tree map[string][]string) []string {
	keys := make([]string, 0, len(tree))
	for k := range tree {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func rootKey(k string) string {
	if k == "" {
		return "."
	}
	return k
}

const bashScript = `# bash completion for leasehold (leasehold completion bash)
_leasehold() {
	local -A words=(
%s	)
	local cur=${COMP_WORDS[COMP_CWORD]} key="" w k i
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		[[ $w == -* ]] && continue
		k="${key:+$key }$w"
		[[ -n ${words[$k]+set} ]] && key=$k
	done
	# Where a group, node or kind name goes, the node names them (within
	# 1 s; nothing when it does not answer, and the words above stand).
	# The line is split again from COMP_LINE: COMP_WORDS splits URLs at ':'.
	if [[ $cur != -* ]]; then
		local -a line names
		read -ra line <<<"${COMP_LINE:0:COMP_POINT}"
		[[ ${COMP_LINE:0:COMP_POINT} == *" " || ${#line[@]} -eq 1 ]] && line+=("")
		mapfile -t names < <("${line[0]}" __complete "${line[@]:1}" 2>/dev/null)
		if ((${#names[@]} > 0)); then
			COMPREPLY=("${names[@]}")
			return
		fi
	fi
	COMPREPLY=($(compgen -W "${words[${key:-.}]}" -- "$cur"))
}
complete -o default -F _leasehold leasehold
`

func writeBash(w io.Writer, tree map[string][]string) error {
	var b strings.Builder
	for _, k := range sortedKeys(tree) {
		fmt.Fprintf(&b, "\t\t[%q]=%q\n", rootKey(k), strings.Join(tree[k], " "))
	}
	_, err := fmt.Fprintf(w, bashScript, b.String())
	return err
}

const zshScript = `#compdef leasehold
# zsh completion for leasehold (leasehold completion zsh)
_leasehold() {
	local -A lh_words
	lh_words=(
%s	)
	local key="" w k i
	for ((i = 2; i < CURRENT; i++)); do
		w=${words[i]}
		[[ $w == -* ]] && continue
		k="${key:+$key }$w"
		(( ${+lh_words[$k]} )) && key=$k
	done
	# Where a group, node or kind name goes, the node names them (within
	# 1 s; nothing when it does not answer, and the words above stand).
	if [[ $PREFIX != -* ]]; then
		local -a names
		names=(${(f)"$(${words[1]} __complete "${(@)words[2,CURRENT-1]}" "$PREFIX" 2>/dev/null)"})
		if (( $#names )); then
			compadd -- $names
			return
		fi
	fi
	compadd -- ${=lh_words[${key:-.}]}
}
# Autoloaded from $fpath, this file is _leasehold's body: its first call
# only defines the function, so it must complete too, or the first Tab
# offers nothing. Sourced, it registers the function with compinit.
if [[ $funcstack[1] == _leasehold ]]; then
	_leasehold "$@"
else
	compdef _leasehold leasehold
fi
`

func writeZsh(w io.Writer, tree map[string][]string) error {
	var b strings.Builder
	for _, k := range sortedKeys(tree) {
		fmt.Fprintf(&b, "\t\t%q %q\n", rootKey(k), strings.Join(tree[k], " "))
	}
	_, err := fmt.Fprintf(w, zshScript, b.String())
	return err
}

const fishScript = `# fish completion for leasehold (leasehold completion fish)
function __leasehold_words
	switch $argv[1]
%s	end
end
function __leasehold_complete
	set -l key ""
	for w in (commandline -opc)[2..-1]
		string match -q -- '-*' $w; and continue
		set -l k (string trim -- "$key $w")
		if __leasehold_words $k >/dev/null
			set key $k
		end
	end
	test -n "$key"; or set key .
	# Where a group, node or kind name goes, the node names them (within
	# 1 s; nothing when it does not answer, and the words above stand).
	set -l cur (commandline -ct)
	if not string match -q -- '-*' "$cur"
		set -l line (commandline -opc)
		set -l names (command $line[1] __complete $line[2..-1] "$cur" 2>/dev/null)
		if test (count $names) -gt 0
			printf '%%s\n' $names
			return
		end
	end
	__leasehold_words $key
end
complete -c leasehold -f -a '(__leasehold_complete)'
`

func writeFish(w io.Writer, tree map[string][]string) error {
	var b strings.Builder
	for _, k := range sortedKeys(tree) {
		fmt.Fprintf(&b, "\t\tcase '%s'\n\t\t\tprintf '%%s\\n' %s\n", rootKey(k), strings.Join(tree[k], " "))
	}
	b.WriteString("\t\tcase '*'\n\t\t\treturn 1\n")
	_, err := fmt.Fprintf(w, fishScript, b.String())
	return err
}
