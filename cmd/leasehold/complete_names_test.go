package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// asBinaryEnv makes this test binary run as leasehold itself, its
// arguments as the command line: the completion scripts run it as
// `leasehold __complete …` from $PATH.
const asBinaryEnv = "LEASEHOLD_TEST_AS_BINARY"

func init() {
	if os.Getenv(asBinaryEnv) == "1" {
		os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
	}
}

// TestCompletionNames: at Tab time the three shells offer the node's
// group names, node names and kinds where a command takes them, asking
// the node named on the line; flags are still completed from the script,
// and a node that does not answer leaves the script's words.
func TestCompletionNames(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.one")
	admin(t, n, "groups", "create", "alt.two", "--kind", "nntp")
	admin(t, n, "groups", "create", "misc.x")
	admin(t, n, "nodes", "register", "w1", "--kinds", "default,rss", "-q")
	admin(t, n, "nodes", "register", "w2", "-q")

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "leasehold")); err != nil {
		t.Fatal(err)
	}
	// The token comes from the environment, the node's URL from the line;
	// without --url the default one is a port nobody listens on.
	env := []string{asBinaryEnv + "=1", "LEASEHOLD_ADMIN_TOKEN=" + n.AdminToken,
		"LEASEHOLD_URL=http://127.0.0.1:1", "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	at := "leasehold admin --url " + n.URL + " "
	cases := map[string][]string{
		at + "groups show ":                            {"alt.one", "alt.two", "misc.x"},
		at + "groups show alt.":                        {"alt.one", "alt.two"},
		at + "groups delete --json m":                  {"misc.x"},
		at + "groups create new --kind ":               {"default", "nntp", "rss"},
		at + "groups update alt.one --kind n":          {"nntp"},
		at + "nodes pause ":                            {"w1", "w2"},
		at + "nodes kinds w2 ":                         {"default", "nntp", "rss"},
		at + "ranges retry --failed alt.o":             {"alt.one"},
		at + "nodes register w3 --kinds rss,n":         {"rss,nntp"},
		at + "groups show --outp":                      {"--output"},
		"leasehold snapshot --url " + n.URL + " get a": {"alt.one", "alt.two"},
		// No node answers: the script's own words (the verb's flags).
		"leasehold admin groups show --st": nil,
		"leasehold admin nodes pause --b":  {"--by"},
	}
	var lines []string
	for l := range cases {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	check := func(sh string, got map[string][]string) {
		t.Helper()
		for _, line := range lines {
			have := slices.Sorted(slices.Values(got[line]))
			want := slices.Sorted(slices.Values(cases[line]))
			if !slices.Equal(have, want) {
				t.Errorf("%s completes %q to %q, want %q", sh, line, have, want)
			}
		}
	}
	t.Run("bash", func(t *testing.T) { check("bash", bashCompletions(t, env, lines)) })
	t.Run("zsh", func(t *testing.T) {
		autoloaded, sourced := zshCompletions(t, env, lines)
		check("zsh (autoloaded)", autoloaded)
		check("zsh (sourced)", sourced)
	})
	t.Run("fish", func(t *testing.T) { check("fish", fishCompletions(t, bin, env, lines)) })
}

// TestCompleteSilentOnFailure: `leasehold __complete` prints nothing and
// succeeds when the node cannot be reached, does not answer within its
// timeout, or refuses the token, so that a Tab never shows an error.
func TestCompleteSilentOnFailure(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.one")
	// A listener that takes connections and never answers.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for name, args := range map[string][]string{
		"refused":     {"admin", "--url", "http://127.0.0.1:1", "--token", "x", "groups", "show", ""},
		"mute":        {"admin", "--url", "http://" + mute.Addr().String(), "--token", "x", "groups", "show", ""},
		"bad token":   {"admin", "--url", n.URL, "--token", "wrong", "groups", "show", ""},
		"no token":    {"admin", "--url", n.URL, "--data", t.TempDir(), "groups", "show", ""},
		"not a name":  {"admin", "--url", n.URL, "--token", n.AdminToken, "groups", "list", ""},
		"a flag":      {"admin", "--url", n.URL, "--token", n.AdminToken, "groups", "show", "--"},
		"no command":  {""},
		"no words":    {},
		"unknown":     {"admin", "--url", n.URL, "--token", n.AdminToken, "nope", "show", ""},
		"worker flag": {"worker", "--url", n.URL, ""},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{completeCommand}, args...), &stdout, &stderr)
		if err != nil || stdout.Len() > 0 || stderr.Len() > 0 {
			t.Errorf("%s: __complete %q: %v, printed %q and %q; want nothing", name, args, err, stdout.String(), stderr.String())
		}
	}
	// The same command with the right token does name the group.
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{completeCommand, "admin", "--url", n.URL, "--token", n.AdminToken, "groups", "show", ""}, &stdout, &stdout); err != nil ||
		strings.TrimSpace(stdout.String()) != "alt.one" {
		t.Errorf("__complete groups show: %v, %q; want alt.one", err, stdout.String())
	}
}
