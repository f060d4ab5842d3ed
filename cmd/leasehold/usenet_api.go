package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/source/newznab"
	"github.com/leasehold/leasehold/web"
)

// defaultAPIListen is where `leasehold usenet api` listens by default:
// loopback, so a key-holding downloader on the same box reaches it and
// nobody else until the operator says so.
const defaultAPIListen = "127.0.0.1:7575"

const usenetAPIUsage = `Usage: leasehold usenet api --index postgres://… [--listen ADDR] [flags]
       leasehold usenet api keys add NAME --index postgres://…
       leasehold usenet api keys list|revoke NAME --index postgres://…

Serves the newznab API (/api?t=caps|search|tvsearch|movie|get|details)
over the shared PostgreSQL index the Usenet workers write (--out
postgres://…), read only: start as many as you like over one index.
Every call but t=caps takes an API key (&apikey=): "keys add NAME"
prints a new one (stored hashed in the index database, shown once),
"keys list" shows them, "keys revoke NAME" ends one. The index's
password may come from $PGPASSWORD instead of the URL.

`

// runUsenetCommands is `leasehold usenet …`: api here, the rest in
// runUsenet.
func runUsenetCommands(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "api" {
		return runUsenetAPI(ctx, args[1:], stdout, stderr)
	}
	return runUsenet(ctx, args, stdout, stderr)
}

// runUsenetAPI is `leasehold usenet api`.
func runUsenetAPI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "keys" {
		return runAPIKeys(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("usenet api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usenetAPIUsage); fs.PrintDefaults() }
	index := fs.String("index", "", "the index database's URL (postgres://user@host/db)")
	listen := fs.String("listen", defaultAPIListen, "the address to serve the API on")
	public := fs.String("public-url", "", "where clients reach the API, for the links in answers (default: the scheme and host each request came with)")
	title := fs.String("title", "leasehold", "the API's name in caps and feeds")
	cert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	key := fs.String("tls-key", "", "the PEM private key of --tls-cert")
	conns := fs.Int("max-connections", web.DefaultMaxConnections(), "the most HTTP connections open at once")
	perRemote := fs.Int("max-connections-per-remote", 64, "the most HTTP connections open at once from one address")
	dbConns := fs.Int("index-connections", 8, "the most connections to the index at once")
	stmt := fs.Duration("statement-timeout", newznab.DefaultStatementTimeout, "how long one query of a call may run")
	failures := fs.Int("max-key-failures", 10, "wrong API keys one address may send a minute before its calls are refused for the rest of it")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError(fmt.Errorf("usenet api: unknown arguments %q", fs.Args()))
	case *index == "":
		return usageError(errors.New("usenet api: --index postgres://… is required"))
	case (*cert == "") != (*key == ""):
		return usageError(errors.New("usenet api: --tls-cert and --tls-key go together"))
	case *conns < 1 || *perRemote < 1 || *dbConns < 1 || *failures < 1 || *stmt <= 0:
		return usageError(errors.New("usenet api: the connection caps, --max-key-failures and --statement-timeout must be positive"))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	pool, err := newznab.OpenIndex(ctx, *index, int32(*dbConns), *stmt)
	if err != nil {
		return err
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("usenet api: --listen %s: %w", *listen, err)
	}
	ln = web.LimitConnections(ln, *conns, *perRemote, web.NewMetrics())
	scheme := "http"
	if *cert != "" {
		certs, err := web.LoadCertificates(*cert, *key, "", log)
		if err != nil {
			ln.Close()
			return err
		}
		ln, scheme = web.HTTPSListener(ln, certs), "https"
	}
	api := newznab.New(newznab.Options{Index: pool, Title: *title, PublicURL: *public, Logger: log, MaxFailures: *failures})
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	fmt.Fprintf(stderr, "leasehold usenet api: serving the newznab API on %s://%s/api\n", scheme, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	<-served
	return ctx.Err()
}

// runAPIKeys is `leasehold usenet api keys add|list|revoke`.
func runAPIKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usenet api keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usenetAPIUsage); fs.PrintDefaults() }
	index := fs.String("index", "", "the index database's URL (postgres://user@host/db)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return usageError(errors.New("usenet api keys: add, list or revoke?"))
	}
	verb, pos := pos[0], pos[1:]
	switch verb {
	case "add", "revoke":
		if err := wantArgs(pos, "NAME"); err != nil {
			return err
		}
	case "list":
		if err := wantArgs(pos); err != nil {
			return err
		}
	default:
		return usageError(fmt.Errorf("usenet api keys: unknown verb %q (add, list or revoke)", verb))
	}
	if *index == "" {
		return usageError(errors.New("usenet api keys: --index postgres://… is required"))
	}
	db, err := pgx.Connect(ctx, *index)
	if err != nil {
		return fmt.Errorf("usenet api keys: --index: %w", err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	now := time.Now()
	switch verb {
	case "add":
		key, err := newznab.AddKey(ctx, db, pos[0], now)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, key)
	case "revoke":
		if err := newznab.RevokeKey(ctx, db, pos[0], now); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "key %s revoked\n", pos[0])
	case "list":
		keys, err := newznab.ListKeys(ctx, db)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if k.Revoked != nil {
				revoked = k.Revoked.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Name, k.Created.UTC().Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	}
	return nil
}
