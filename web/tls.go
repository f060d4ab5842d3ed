package web

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// Certificates are the HTTPS listener's certificate, its key and, when
// given, the CA that clients' certificates must be signed by. They are
// read again on Reload, so a certificate from ACME or a CA rotates
// without a restart; a pair that does not load keeps the one in use.
type Certificates struct {
	certFile, keyFile, clientCAFile string
	log                             *slog.Logger

	// current is the TLS configuration handshakes get now.
	current atomic.Pointer[tls.Config]

	mu     sync.Mutex // serializes reloads
	stamps string     // the files' sizes and times when last read
}

// LoadCertificates reads the certificate and key (PEM) and, when
// clientCAFile is not "", the CA bundle (PEM) that clients must present a
// certificate from. A missing file, a key that does not match the
// certificate or a bundle with no certificate is an error naming the file.
func LoadCertificates(certFile, keyFile, clientCAFile string, log *slog.Logger) (*Certificates, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Certificates{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile, log: log}
	c.stamps = c.stamp()
	cfg, err := c.read()
	if err != nil {
		return nil, err
	}
	c.current.Store(cfg)
	return c, nil
}

// read builds a TLS configuration from the files as they are now.
func (c *Certificates) read() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %v", c.certFile, c.keyFile, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// TLS 1.2 offers AEAD suites only, as every TLS server the node
		// runs does.
		CipherSuites: leasehold.ServerCipherSuites(),
		// HTTP/1.1 only: the snapshot streams' idle deadlines are set on
		// the connection.
		NextProtos: []string{"http/1.1"},
	}
	if c.clientCAFile != "" {
		pem, err := os.ReadFile(c.clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", c.clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// stamp is the files' sizes and modification times: a change in it is a
// rotation on disk.
func (c *Certificates) stamp() string {
	var b strings.Builder
	for _, f := range []string{c.certFile, c.keyFile, c.clientCAFile} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

// Reload reads the files again. A pair that does not load (a key written
// before its certificate, a bad file) is logged as a warning and returned,
// and the pair in use stays.
func (c *Certificates) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stamps = c.stamp()
	cfg, err := c.read()
	if err != nil {
		c.log.Warn("the new TLS certificate does not load; still serving the previous one", "err", err)
		return err
	}
	c.current.Store(cfg)
	c.log.Info("TLS certificate loaded", "cert", c.certFile, "subject", subject(cfg), "not_after", notAfter(cfg))
	return nil
}

// reloadIfChanged reloads when the files' stamps moved since they were
// last read. A pair caught half-written is read again at the next change
// (the second file's write is one).
func (c *Certificates) reloadIfChanged() {
	c.mu.Lock()
	changed := c.stamp() != c.stamps
	c.mu.Unlock()
	if changed {
		_ = c.Reload()
	}
}

// Run reloads the files when they change on disk (looked at every
// `every`) and whenever reload receives, until ctx ends.
func (c *Certificates) Run(ctx context.Context, every time.Duration, reload <-chan os.Signal) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.reloadIfChanged()
		case <-reload:
			_ = c.Reload()
		}
	}
}

// Config is the listener's TLS configuration: every handshake takes the
// certificate loaded last.
func (c *Certificates) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current.Load(), nil
		},
	}
}

// HTTPSListener serves TLS with certs on ln: the only listener the node
// has once --tls-cert is given, so nothing is ever answered in clear.
func HTTPSListener(ln net.Listener, certs *Certificates) net.Listener {
	return tls.NewListener(ln, certs.Config())
}

func subject(cfg *tls.Config) string {
	if leaf := leafOf(cfg); leaf != nil {
		return leaf.Subject.String()
	}
	return ""
}

func notAfter(cfg *tls.Config) time.Time {
	if leaf := leafOf(cfg); leaf != nil {
		return leaf.NotAfter
	}
	return time.Time{}
}

func leafOf(cfg *tls.Config) *x509.Certificate {
	if len(cfg.Certificates) == 0 {
		return nil
	}
	if l := cfg.Certificates[0].Leaf; l != nil {
		return l
	}
	l, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return nil
	}
	return l
}

// hstsValue asks browsers to come back over HTTPS only, for a year. Not
// includeSubDomains: the node may share its domain with hosts it does not
// speak for.
const hstsValue = "max-age=31536000"

// overHTTPS reports whether the browser reached the node over HTTPS:
// served with TLS, or through a proxy the operator trusts
// (--trusted-proxy) that says so in X-Forwarded-Proto. Anyone else's
// X-Forwarded-Proto is ignored: it is only a header.
func (s *Server) overHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if len(s.trustedProxies) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !trusted(s.trustedProxies, ap.Addr().Unmap()) {
		return false
	}
	// The last value is the one the nearest proxy (the trusted one) set.
	vs := r.Header.Values("X-Forwarded-Proto")
	if len(vs) == 0 {
		return false
	}
	last := vs[len(vs)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.EqualFold(strings.TrimSpace(last), "https")
}

func trusted(proxies []netip.Prefix, a netip.Addr) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies reads CIDRs (or single addresses), comma-separated,
// as --trusted-proxy takes them.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, errors.New("want a CIDR like 10.0.0.0/8 or an address like 10.0.0.5")
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// transportSecurity tells a browser that reached the node over HTTPS to
// keep to it (HSTS).
func (s *Server) transportSecurity(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.overHTTPS(c.Request()) {
			c.Response().Header().Set("Strict-Transport-Security", hstsValue)
		}
		return next(c)
	}
}
