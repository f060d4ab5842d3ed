// Command pgserver runs a private PostgreSQL for scripts (pgtest.Start):
// it makes a cluster in a new temporary directory, creates the database
// named by its argument, prints that database's URL on standard output
// and runs until SIGTERM or SIGINT, then stops the server and removes the
// directory.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/pgtest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pgserver DATABASE")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "leasehold-pg-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := pgtest.Start(ctx, dir)
	if err != nil {
		cancel()
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	defer srv.Stop()
	url, err := srv.CreateDatabase(ctx, os.Args[1])
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		return
	}
	fmt.Println(url)
	stop, done := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer done()
	<-stop.Done()
}
