// Command leasehold runs a leasehold node (serve), a worker against one
// (worker), and the operator's tools (snapshot, admin).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Version is the build's version; set with -ldflags "-X main.Version=…".
var Version = "dev"

const usage = `leasehold coordinates workers indexing sequential-id sources.

Usage:
  leasehold serve [flags]      run a node (leasehold serve -h for flags)
  leasehold worker [flags]     run a worker against a node
  leasehold snapshot get|put   move a group's window snapshot
  leasehold admin ...          groups, nodes, rules and findings
  leasehold version            print the version
`

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
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
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	return usageError(err)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError(errors.New("no command given"))
	}
	switch args[0] {
	case "serve":
		m := NewMain(stdout, stderr)
		if err := m.ParseFlags(args[1:]); err != nil {
			return err
		}
		return m.Run(ctx)
	case "worker":
		return runWorker(ctx, args[1:], stdout, stderr)
	case "snapshot":
		return runSnapshot(ctx, args[1:], stdout, stderr)
	case "admin":
		return runAdmin(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "leasehold", Version)
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError(fmt.Errorf("unknown command %q", args[0]))
}
