package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/web"
)

// checkTLSFlags refuses TLS flags that cannot work together.
func (m *Main) checkTLSFlags() error {
	switch {
	case (m.TLSCert == "") != (m.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: the certificate and its private key")
	case m.TLSClientCA != "" && m.TLSCert == "":
		return errors.New("--tls-client-ca asks clients for certificates over TLS; it needs --tls-cert and --tls-key")
	}
	return nil
}

// loadCertificates reads --tls-cert, --tls-key and --tls-client-ca; nil
// without them (the node serves plain HTTP).
func (m *Main) loadCertificates(log *slog.Logger) (*web.Certificates, error) {
	if m.TLSCert == "" {
		return nil, nil
	}
	return web.LoadCertificates(m.TLSCert, m.TLSKey, m.TLSClientCA, log)
}

// serveTLS wraps ln in TLS when certs are given, and reads them again on
// SIGHUP (m.hup) and when their files change, until the returned stop is
// called. Without certs, ln is returned as it is, and a SIGHUP is logged
// as having nothing to reload.
func (m *Main) serveTLS(ctx context.Context, log *slog.Logger, ln net.Listener, certs *web.Certificates) (net.Listener, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if certs == nil {
		go func() {
			defer close(done)
			for {
				select {
				case <-ctx.Done():
					return
				case <-m.hup:
					if (m.NATSSecretFile != "" || m.natsTLS() != nil) && m.NATS != "off" {
						continue // the fleet's files are reloaded, and say so (watchSecret)
					}
					log.Info("SIGHUP: nothing to reload, the node serves plain HTTP (SIGHUP reloads --tls-cert and --tls-key); still serving")
				}
			}
		}()
		return ln, func() {
			cancel()
			<-done
		}
	}
	go func() {
		defer close(done)
		certs.Run(ctx, m.certEvery, m.hup)
	}()
	return web.HTTPSListener(ln, certs), func() {
		cancel()
		<-done
	}
}

// url is the URL a person can open for the node listening on addr.
func (m *Main) url(addr net.Addr) string {
	u := listenURL(addr)
	if m.TLSCert != "" {
		u = "https://" + strings.TrimPrefix(u, "http://")
	}
	return u
}

// proxyList is --trusted-proxy: CIDRs or addresses, repeated or
// comma-separated. The flag on the command line replaces what
// $LEASEHOLD_TRUSTED_PROXY said, as every flag does.
type proxyList struct {
	list    []netip.Prefix
	fromEnv bool
}

func (p *proxyList) String() string {
	if p == nil {
		return ""
	}
	var s []string
	for _, x := range p.list {
		s = append(s, x.String())
	}
	return strings.Join(s, ",")
}

func (p *proxyList) Set(v string) error {
	got, err := web.ParseTrustedProxies(v)
	if err != nil {
		return err
	}
	if p.fromEnv {
		p.list, p.fromEnv = nil, false
	}
	p.list = append(p.list, got...)
	return nil
}

// clientTLS is what every client command (admin, snapshot, backup,
// worker, healthcheck) speaks https with.
type clientTLS struct {
	caFile, certFile, keyFile string
}

// flags registers --ca-file, --client-cert and --client-key, defaulting
// to $LEASEHOLD_CA_FILE, $LEASEHOLD_CLIENT_CERT and $LEASEHOLD_CLIENT_KEY.
func (t *clientTLS) flags(fs *flag.FlagSet) {
	fs.StringVar(&t.caFile, "ca-file", envOr("LEASEHOLD_CA_FILE", t.caFile), "PEM certificates of the CA that signed the node's HTTPS certificate, trusted besides the system's ($LEASEHOLD_CA_FILE)")
	fs.StringVar(&t.certFile, "client-cert", envOr("LEASEHOLD_CLIENT_CERT", t.certFile), "a client certificate (PEM) for a node started with --tls-client-ca ($LEASEHOLD_CLIENT_CERT)")
	fs.StringVar(&t.keyFile, "client-key", envOr("LEASEHOLD_CLIENT_KEY", t.keyFile), "the private key (PEM) of --client-cert ($LEASEHOLD_CLIENT_KEY)")
}

// config is the TLS configuration of the flags; nil when none is given
// (the system's CAs, no client certificate). A bad file is a usage error.
func (t *clientTLS) config() (*tls.Config, error) {
	if t.caFile == "" && t.certFile == "" && t.keyFile == "" {
		return nil, nil
	}
	cfg, err := client.LoadTLS(t.caFile, t.certFile, t.keyFile)
	if err != nil {
		return nil, usageError(err)
	}
	return cfg, nil
}

// apply makes c speak https as the flags say.
func (t *clientTLS) apply(c *client.Client) (*client.Client, error) {
	cfg, err := t.config()
	if err != nil {
		return nil, err
	}
	c.TLSConfig = cfg
	return c, nil
}
