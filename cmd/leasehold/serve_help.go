package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// serveFlagGroups are serve's flags by what they are about, in the order
// serve -h prints them. A flag not named here is printed under "Other".
var serveFlagGroups = []struct {
	title string
	flags []string
}{
	{"The node", []string{"data", "listen", "admin-token", "name"}},
	{"HTTPS", []string{"tls-cert", "tls-key", "tls-client-ca", "trusted-proxy"}},
	{"Leasing and windows", []string{"lease-ttl", "max-attempts", "snapshot-max-bytes", "snapshot-max-age", "history-min-free-bytes", "node-unseen"}},
	{"Peer sync (a fleet over NATS JetStream)", []string{"nats", "nats-listen", "nats-cluster-listen", "nats-routes", "nats-secret-file", "nats-insecure", "nats-tls-cert", "nats-tls-key", "nats-tls-ca", "nats-user", "nats-password-file", "nats-nkey-file", "nats-creds-file", "nats-replicas", "fleet-roster", "fleet-accept-unsigned", "claim-ttl", "stream-max-age", "stream-max-bytes"}},
	{"Tokens and limits", []string{"admin-token-file", "max-connections", "max-connections-per-remote", "max-unauthenticated-connections", "unauthenticated-idle-timeout", "snapshot-max-expanded-bytes", "snapshot-upload-timeout"}},
	{"Logging and stopping", []string{"log-level", "log-format", "shutdown-timeout"}},
	{"Measuring (not for production)", []string{"synchronous", "no-group-commit"}},
}

// envName is the environment variable that sets the serve flag name.
func envName(name string) string {
	return "LEASEHOLD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// serveUsage prints serve -h: the flags in groups, each with the
// LEASEHOLD_* variable that sets it and its default.
func serveUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: leasehold serve [flags]

Runs a node: the catalog and window snapshots under --data, the JSON API
and dashboard on --listen, and peer sync with the fleet. Every flag can be
given in the environment as the variable named beside it; a flag on the
command line wins. SIGINT or SIGTERM stops it cleanly.

A node runs alone by default: no NATS, no outbox, about half the CPU a
range. To start a fleet, give each node the fleet's flags; it then runs
the embedded NATS server and joins, keeping the catalog it had alone:
  leasehold serve --name a --nats-secret-file FILE \
    --nats-cluster-listen 10.0.0.1:6222 --nats-routes nats://10.0.0.2:6222,nats://10.0.0.3:6222
(--nats nats://… joins through an external NATS instead.)
`)
	seen := map[string]bool{}
	group := func(title string, names []string) {
		var fl []*flag.Flag
		for _, n := range names {
			if f := fs.Lookup(n); f != nil && !seen[n] {
				fl = append(fl, f)
				seen[n] = true
			}
		}
		if len(fl) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, f := range fl {
			typ, use := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if typ != "" {
				line += " " + typ
			}
			meta := envName(f.Name)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
				meta += ", default " + f.DefValue
			}
			fmt.Fprintf(w, "%s    (%s)\n        %s\n", line, meta, use)
		}
	}
	for _, g := range serveFlagGroups {
		group(g.title, g.flags)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !seen[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	slices.Sort(rest)
	group("Other", rest)
}
