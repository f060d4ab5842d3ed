package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client"
)

const healthcheckUsage = `Usage: leasehold healthcheck [--url U] [--timeout D]

Asks the node's /readyz once: exit 0 when it answers 200, 1 with the
reason otherwise (not ready, not answering). For a container's HEALTHCHECK
or a service manager. --url defaults to $LEASEHOLD_URL, else the local
node at $LEASEHOLD_LISTEN (the address serve reads; https:// when
$LEASEHOLD_TLS_CERT is set, and then the node must serve that very
certificate), else %s. Any other node whose certificate a CA of your own
signed needs --ca-file ($LEASEHOLD_CA_FILE).

`

func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, healthcheckUsage, client.DefaultURL); fs.PrintDefaults() }
	url := fs.String("url", localURL(), "the node's URL")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	quiet := fs.Bool("q", false, "print nothing when ready")
	var node clientTLS
	node.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := node.config()
	if err != nil {
		return err
	}
	if cfg == nil && *url == localURL() && os.Getenv("LEASEHOLD_URL") == "" && os.Getenv("LEASEHOLD_TLS_CERT") != "" {
		if cfg, err = pinnedTLS(os.Getenv("LEASEHOLD_TLS_CERT")); err != nil {
			return err
		}
	}
	hc := http.DefaultClient
	if cfg != nil {
		hc = client.HTTPClientFor(cfg)
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
	resp, err := hc.Do(req)
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
			u := openableURL(host, port)
			if os.Getenv("LEASEHOLD_TLS_CERT") != "" {
				u = "https://" + strings.TrimPrefix(u, "http://")
			}
			return u
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

// pinnedTLS trusts exactly the certificate in certFile (PEM, the first
// one): the local node's own, as serve reads it from $LEASEHOLD_TLS_CERT.
// Its names need not include 127.0.0.1, which the healthcheck dials.
func pinnedTLS(certFile string) (*tls.Config, error) {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, usageError(fmt.Errorf("LEASEHOLD_TLS_CERT: %v", err))
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, usageError(fmt.Errorf("LEASEHOLD_TLS_CERT %s: no PEM certificate in it", certFile))
	}
	want := block.Bytes
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and names are not checked: the one certificate is.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], want) {
				return errors.New("the node does not serve the certificate in LEASEHOLD_TLS_CERT")
			}
			return nil
		},
	}, nil
}
