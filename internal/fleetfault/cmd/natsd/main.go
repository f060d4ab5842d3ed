// Command natsd is a plain nats-server with JetStream, built from the
// module leasehold depends on, for the fault harness's external mode
// (fleetfault --nats external): the fleet's NATS as an operator runs it,
// a cluster of its own apart from the leasehold nodes, at nats-server's
// own defaults (pings, elections) but for what the flags set. It asks
// clients and routes for the token in -token-file, and stops on SIGTERM
// or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("natsd", flag.ContinueOnError)
	name := fs.String("name", "", "the server's name, unique in the cluster (required)")
	dir := fs.String("dir", "", "JetStream's store (required)")
	listen := fs.String("listen", "127.0.0.1:4222", "the client address")
	cluster := fs.String("cluster", "", "the route address (required)")
	routes := fs.String("routes", "", "the cluster's route URLs, nats://host:port, comma-separated")
	tokenFile := fs.String("token-file", "", "a file whose first line is the token clients and routes present (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *dir == "" || *cluster == "" || *tokenFile == "" {
		return fmt.Errorf("-name, -dir, -cluster and -token-file are required")
	}
	b, err := os.ReadFile(*tokenFile)
	if err != nil {
		return err
	}
	token, _, _ := strings.Cut(string(b), "\n")
	token = strings.TrimSpace(token)
	host, port, err := hostPort(*listen)
	if err != nil {
		return err
	}
	chost, cport, err := hostPort(*cluster)
	if err != nil {
		return err
	}
	opts := &server.Options{
		ServerName: *name, Host: host, Port: port, NoSigs: true, Logtime: true,
		JetStream: true, StoreDir: *dir, Authorization: token,
	}
	opts.Cluster.Name = "fleetfault-nats"
	opts.Cluster.Host, opts.Cluster.Port = chost, cport
	opts.Cluster.Username, opts.Cluster.Password = "route", token
	for _, r := range strings.Split(*routes, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		u, err := url.Parse(r)
		if err != nil {
			return fmt.Errorf("-routes %q: %v", r, err)
		}
		u.User = url.UserPassword("route", token)
		opts.Routes = append(opts.Routes, u)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("not ready for clients within 30s")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

// hostPort splits addr into nats-server's host and port.
func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("%q: want a port 1-65535", addr)
	}
	return h, int(n), nil
}
