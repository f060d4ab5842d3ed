package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCompletion checks the scripts name every command, noun and verb.
// The tests below ask real shells what they complete.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, sh := range shells {
		script := completionScript(t, sh)
		for _, c := range commands {
			if !strings.Contains(script, c.name) {
				t.Errorf("%s completion lacks %s", sh, c.name)
			}
		}
		for _, v := range adminVerbs {
			if !strings.Contains(script, strings.TrimSpace("admin "+v.noun+" "+v.verb)) {
				t.Errorf("%s completion lacks admin %s %s", sh, v.noun, v.verb)
			}
		}
	}
}

func completionScript(t *testing.T, sh string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"completion", sh}, &out, &out); err != nil {
		t.Fatalf("completion %s: %v", sh, err)
	}
	return out.String()
}

// completionCases are command lines, completed at their end (a line
// ending in a space completes an empty word), and the words a shell must
// offer there, in any order: every command, every admin noun, each
// noun's verbs, and flags of the commands, of the admin operator (before
// the noun) and of a verb (after flags and their values).
func completionCases() map[string][]string {
	var names, nouns []string
	verbs := map[string][]string{}
	for _, c := range commands {
		names = append(names, c.name)
	}
	for _, v := range adminVerbs {
		if !slices.Contains(nouns, v.noun) {
			nouns = append(nouns, v.noun)
		}
		if v.verb != "" {
			verbs[v.noun] = append(verbs[v.noun], v.verb)
		}
	}
	cases := map[string][]string{
		"leasehold ":                                   append(names, "help"),
		"leasehold adm":                                {"admin"},
		"leasehold admin ":                             append(nouns, "--url", "--token", "--data", "--output", "--json", "--ca-file", "--client-cert", "--client-key"),
		"leasehold admin --u":                          {"--url"},
		"leasehold admin --url x g":                    {"groups"},
		"leasehold admin groups create --r":            {"--range-size"},
		"leasehold admin --url x nodes register --c":   {"--ca-file", "--capacity", "--client-cert", "--client-key"},
		"leasehold admin --url x nodes register --cap": {"--capacity"},
		"leasehold serve --tls-c":                      {"--tls-cert", "--tls-client-ca"},
		"leasehold admin nodes delete --url x --f":     {"--force"},
		"leasehold admin groups ranges alt.x --st":     {"--status"},
		"leasehold snapshot ":                          {"get", "put"},
		"leasehold snapshot put --f":                   {"--force"},
		"leasehold serve --nats-s":                     {"--nats-secret-file"},
		"leasehold completion ":                        {"bash", "zsh", "fish"},
		"leasehold admin wait --ev":                    {"--every"},
		"leasehold admin --url http://127.0.0.1:1 r":   {"ranges", "rotate-token", "rules"},
		"leasehold healthcheck --u":                    {"--url"},
		"leasehold admin groups unquarantine --outpu":  {"--output"},
	}
	for noun, vs := range verbs {
		cases["leasehold admin "+noun+" "] = vs
	}
	return cases
}

// checkCompletions compares what a shell offered for each line (got,
// line → words) with completionCases.
func checkCompletions(t *testing.T, sh string, got map[string][]string) {
	t.Helper()
	for line, want := range completionCases() {
		have := slices.Sorted(slices.Values(got[line]))
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(have, want) {
			t.Errorf("%s completes %q to %q, want %q", sh, line, have, want)
		}
	}
}

// shellFor finds a shell to run a completion script in. Without it the
// test is skipped, saying how to get it, unless CI=true: then it fails.
func shellFor(t *testing.T, sh string) string {
	t.Helper()
	path, err := exec.LookPath(sh)
	if err == nil {
		return path
	}
	msg := sh + " is not installed: run scripts/test.sh, which installs the Debian package " + sh
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runShell runs a shell, bounded in time: a completion that hangs fails
// the test rather than the run.
func runShell(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// parseCompletions reads "== LINE" headers each followed by the words
// offered for LINE, one a line (fish adds a tab and a description).
func parseCompletions(out string) map[string][]string {
	got := map[string][]string{}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if h, ok := strings.CutPrefix(l, "== "); ok {
			line = h
			got[line] = nil
			continue
		}
		if w, _, _ := strings.Cut(l, "\t"); w != "" {
			got[line] = append(got[line], w)
		}
	}
	return got
}

func completionLines() []string {
	var lines []string
	for line := range completionCases() {
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return lines
}

// TestCompletionBash sources the bash script and calls its function as
// bash's programmable completion does, with COMP_WORDS and COMP_CWORD.
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	checkCompletions(t, "bash", bashCompletions(t, nil, completionLines()))
}

// bashCompletions completes each line in a real bash, with env added to
// the test's environment.
func bashCompletions(t *testing.T, env, lines []string) map[string][]string {
	t.Helper()
	bash := shellFor(t, "bash")
	file := filepath.Join(t.TempDir(), "leasehold.bash")
	if err := os.WriteFile(file, []byte(completionScript(t, "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	const probe = `source "$1"; shift
for line; do
	read -ra COMP_WORDS <<<"$line"
	[[ $line == *" " ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMP_LINE=$line COMP_POINT=${#line}
	COMPREPLY=()
	_leasehold
	printf '== %s\n' "$line"
	printf '%s\n' "${COMPREPLY[@]}"
done`
	return parseCompletions(runShell(t, env, bash, append([]string{"--norc", "--noprofile", "-c", probe, "bash", file}, lines...)...))
}

// zshProbe types each line into an interactive zsh on a pseudo-terminal
// (zpty), presses Tab, and prints the words the completion system was
// given. compadd is wrapped to print its matches (those that fit the word
// being completed) between two NUL lines that compinit's pre- and
// post-functions write; the post-function exits the shell. $1 is put
// first in $fpath, $2 is sourced when set. compinit keeps its dump, as in
// a user's shell: the first shell scans $fpath, the others read the dump.
const zshProbe = `zmodload zsh/zpty || exit 3
fp=$1 src=$2
shift 2
setup='PROMPT= RPROMPT= PS2=
fpath=("$LH_FPATH" $fpath)
autoload -U compinit; compinit -u -d "$LH_DUMP"
[[ -n $LH_SOURCE ]] && source "$LH_SOURCE"
lh-null() { echo -E - $'"'\0'"' }
compprefuncs=(lh-null)
comppostfuncs=(lh-null exit)
compadd() {
	local -a hits; local h
	builtin compadd -A hits "$@"
	for h in $hits; do echo -E - "<<$h>>"; done
	builtin compadd "$@"
}
bindkey "^M" undefined; bindkey "^J" undefined; bindkey "^I" complete-word'
export LH_FPATH=$fp LH_SOURCE=$src LH_DUMP=$TMPDIR/zcompdump-${fp:t}
print -r -- "$setup" > "$TMPDIR/lh-setup.zsh"
for line; do
	print -r -- "== $line"
	zpty lh zsh -f -i
	zpty -w lh "source ${(q)TMPDIR}/lh-setup.zsh"
	zpty -w -n lh "$line"$'\t'
	nul=0
	while zpty -r lh out; do
		if [[ $out == *$'\0'* ]]; then
			(( ++nul == 2 )) && break
		elif (( nul == 1 )) && [[ $out == *'<<'*'>>'* ]]; then
			out=${out#*<<}
			print -r -- "${out%%>>*}"
		fi
	done
	zpty -d lh
done`

// TestCompletionZsh completes in a real zsh with compinit, the script
// installed as the usage says (as _leasehold in $fpath, autoloaded on the
// first Tab) and sourced.
func TestCompletionZsh(t *testing.T) {
	t.Parallel()
	autoloaded, sourced := zshCompletions(t, nil, completionLines())
	checkCompletions(t, "zsh (autoloaded)", autoloaded)
	checkCompletions(t, "zsh (sourced)", sourced)
}

// zshCompletions completes each line in a real zsh, with env added to the
// test's environment: the script autoloaded from $fpath, then sourced.
func zshCompletions(t *testing.T, env, lines []string) (autoloaded, sourced map[string][]string) {
	t.Helper()
	zsh := shellFor(t, "zsh")
	dir := t.TempDir()
	fp := filepath.Join(dir, "functions")
	if err := os.Mkdir(fp, 0o700); err != nil {
		t.Fatal(err)
	}
	script := completionScript(t, "zsh")
	if err := os.WriteFile(filepath.Join(fp, "_leasehold"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "leasehold.zsh")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append([]string{"TMPDIR=" + dir, "HOME=" + dir}, env...)
	autoloaded = parseCompletions(runShell(t, env, zsh, append([]string{"-f", "-c", zshProbe, "zsh", fp, ""}, lines...)...))
	sourced = parseCompletions(runShell(t, env, zsh, append([]string{"-f", "-c", zshProbe, "zsh", filepath.Join(dir, "none"), file}, lines...)...))
	return autoloaded, sourced
}

// TestCompletionFish completes in a real fish with the script installed as
// the usage says (~/.config/fish/completions/leasehold.fish), which fish
// loads when it first completes leasehold, found on $PATH.
func TestCompletionFish(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "leasehold"), []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	checkCompletions(t, "fish", fishCompletions(t, bin, nil, completionLines()))
}

// fishCompletions completes each line in a real fish, with the leasehold
// in bin first on $PATH and env added to the test's environment.
func fishCompletions(t *testing.T, bin string, env, lines []string) map[string][]string {
	t.Helper()
	fish := shellFor(t, "fish")
	home := t.TempDir()
	comp := filepath.Join(home, ".config", "fish", "completions")
	if err := os.MkdirAll(comp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(comp, "leasehold.fish"), []byte(completionScript(t, "fish")), 0o600); err != nil {
		t.Fatal(err)
	}
	env = append([]string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"), "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}, env...)
	const probe = `for line in $argv
	echo "== $line"
	complete -C $line
end`
	return parseCompletions(runShell(t, env, fish, append([]string{"-c", probe, "--"}, lines...)...))
}
