package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/web/client"
)

const healthcheckUsage = `Usage: leasehold healthcheck [--url U] [--timeout D]

Asks the node's /readyz once: exit 0 when it answers 200, 1 with the
reason otherwise (not ready, not answering). For a container's HEALTHCHECK
or a service manager. --url defaults to $LEASEHOLD_URL, else the local
node at $LEASEHOLD_LISTEN (the address serve reads), else %s.

`

func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, healthcheckUsage, client.DefaultURL); fs.PrintDefaults() }
	url := fs.String("url", localURL(), "the node's URL")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	quiet := fs.Bool("q", false, "print nothing when ready")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("healthcheck takes no arguments, got %q", fs.Args()))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	target := strings.TrimRight(*url, "/") + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return usageError(fmt.Errorf("--url %q: %v", *url, err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("not ready: %s did not answer within %s", target, *timeout)
		}
		return fmt.Errorf("not ready: %s: %v", target, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	if resp.StatusCode != http.StatusOK {
		reason := body.Reason
		if reason == "" {
			reason = resp.Status
		}
		return fmt.Errorf("not ready: %s answered %d: %s", target, resp.StatusCode, reason)
	}
	if !*quiet {
		fmt.Fprintf(stdout, "ready: %s\n", target)
	}
	return nil
}

// localURL is the URL of the node on this host: $LEASEHOLD_URL, else the
// one $LEASEHOLD_LISTEN serves on (as in the Docker image), else the
// default.
func localURL() string {
	if u := os.Getenv("LEASEHOLD_URL"); u != "" {
		return u
	}
	if l := os.Getenv("LEASEHOLD_LISTEN"); l != "" {
		if host, port, err := net.SplitHostPort(l); err == nil {
			return openableURL(host, port)
		}
	}
	return client.DefaultURL
}

// listenURL is the URL a person can open for a listener's address: an
// unspecified host (0.0.0.0, ::) becomes the loopback address, which it
// serves too.
func listenURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	return openableURL(host, port)
}

func openableURL(host, port string) string {
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
