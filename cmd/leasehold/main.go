// Command leasehold runs a leasehold node (serve), a worker against one
// (worker), and the operator's tools (snapshot, admin, backup, restore,
// healthcheck, completion).
package main

import (
	"github.com/leasehold/leasehold"

	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// command is one subcommand of leasehold: the usage text, the completion
// scripts and the dispatch are all made from commands, so they agree.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// words are the words that may follow the command (its verbs), for
	// completion; admin's come from adminVerbs.
	words []string
}

// commands are leasehold's subcommands, in the usage text's order.
var commands []command

func init() {
	commands = []command{
		{"serve", "[flags]", "run a node (leasehold serve -h: every flag and LEASEHOLD_* variable)", runServe, nil},
		{"worker", "[flags]", "run a worker against a node", runWorker, nil},
		{"usenet", "subject|nzb|api ...", "read Usenet subjects as the worker does; a release's NZB from the shared index; serve the newznab API over the index", runUsenetCommands, []string{"subject", "nzb", "api"}},
		{"snapshot", "get|put ...", "move a group's window snapshot", runSnapshot, []string{"get", "put"}},
		{"admin", "<noun> <verb> ...", "groups, nodes, rules and findings", runAdmin, nil},
		{"backup", "DIR", "take a consistent backup of a running node into DIR", runBackup, nil},
		{"restore", "--data DATA DIR", "restore the backup in DIR onto an empty data directory", runRestore, nil},
		{"healthcheck", "[--url U]", "exit 0 when the node answers /readyz 200", runHealthcheck, nil},
		{"completion", "bash|zsh|fish", "print a shell completion script", runCompletion, shells},
		{"version", "", "print the version", runVersion, nil},
	}
}

// usage is leasehold's help, from commands.
func usage() string {
	var b strings.Builder
	b.WriteString("leasehold coordinates workers indexing sequential-id sources.\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  leasehold %-30s %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	b.WriteString("\nEvery command takes -h. Ctrl-C stops one cleanly (exit code 130).\n")
	return b.String()
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	m := NewMain(stdout, stderr)
	if err := m.ParseFlags(args); err != nil {
		return err
	}
	return m.Run(ctx)
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, "Usage: leasehold version\n\nPrints this binary's version, the VCS revision and commit time it was\nbuilt from, and its Go version.")
		return errHelp
	}
	fmt.Fprintln(stdout, leasehold.Build())
	return nil
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// errUsage marks errors that are the caller's: bad flags or arguments.
type errUsage struct{ err error }

func (e errUsage) Error() string { return e.err.Error() }
func (e errUsage) Unwrap() error { return e.err }

// usageError marks err as a usage error (exit code 2).
func usageError(err error) error {
	if err == nil {
		return nil
	}
	return errUsage{err}
}

func main() {
	ctx, interrupted, stop := signalContext()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if interrupted() {
		// Ctrl-C: the command has stopped as it does on its own (released,
		// flushed, removed what it half wrote); say so the shell's way.
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errHelp) {
			fmt.Fprintln(os.Stderr, "leasehold:", err)
		}
		os.Exit(exitInterrupted)
	}
	os.Exit(exitCode(err, os.Stderr))
}

// exitInterrupted is the exit code after SIGINT (Ctrl-C): 128 + 2, as
// shells report a command that SIGINT ended.
const exitInterrupted = 130

// signalContext is a context that SIGINT or SIGTERM ends, and whether
// it was SIGINT that ended it. SIGTERM is a service manager's stop and
// leaves the exit code to the command (0 for a clean stop).
func signalContext() (ctx context.Context, interrupted func() bool, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var got atomic.Bool
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			got.Store(sig == os.Interrupt)
			cancel()
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, got.Load, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}

// exitCode prints err as one line and turns it into the process's exit code:
// 2 for usage errors, 1 for the rest.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "leasehold:", err)
	var u errUsage
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

var errHelp = errors.New("help shown")

// parseFlags parses args into fs: -h is errHelp (exit 0), anything else
// wrong a usage error (exit 2).
//
// The flag package prints a bad flag's error before the usage; the error
// is dropped there, as exitCode prints it once, last, where it is seen.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(out)
	said := buf.Bytes()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		said = bytes.TrimPrefix(said, []byte(err.Error()+"\n"))
	}
	out.Write(said)
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	return usageError(err)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return usageError(errors.New("no command given"))
	}
	switch args[0] {
	case "--version", "-version":
		return runVersion(ctx, nil, stdout, stderr)
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			if c, ok := lookupCommand(args[1]); ok {
				return c.run(ctx, append(args[2:], "-h"), stdout, stderr)
			}
		}
		fmt.Fprint(stdout, usage())
		return nil
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		fmt.Fprint(stderr, usage())
		return usageError(fmt.Errorf("unknown command %q", args[0]))
	}
	return c.run(ctx, args[1:], stdout, stderr)
}
