package fleet

import (
	"crypto/tls"
	"sync/atomic"

	"github.com/leasehold/leasehold"
)

// clientCert is the certificate this node presents to NATS, as last read:
// a reload (ReloadTLS) replaces it for the connections made after.
type clientCert struct {
	cur atomic.Pointer[tls.Certificate]
}

// get is tls.Config.GetClientCertificate: the certificate read last, or
// none.
func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if cert := c.cur.Load(); cert != nil {
		return cert, nil
	}
	return &tls.Certificate{}, nil
}

// reloadable makes tc present the certificate c holds, read at each
// handshake, starting with tc's own.
func (c *clientCert) reloadable(tc *tls.Config) *tls.Config {
	if len(tc.Certificates) > 0 {
		c.cur.Store(&tc.Certificates[0])
	}
	tc.Certificates = nil
	tc.GetClientCertificate = c.get
	return tc
}

// ReloadTLS reads the NATS TLS files again (--nats-tls-cert, -key, -ca)
// and puts them to use without a restart: the embedded server's client
// port and routes take the new certificate and CA for the connections
// made after (established ones stay up), and this node presents the new
// certificate at its next connection to NATS. Files that do not load
// change nothing. The CA this node verifies NATS servers against is the
// one read at start. Errors: invalid (the files), unavailable (the
// server refused the reload); nil without TLS.
func (f *Fleet) ReloadTLS() error {
	if f.cfg.TLS == nil {
		return nil
	}
	client, err := f.cfg.TLS.clientConfig()
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil && f.srvOpts != nil {
		next := f.srvOpts.Clone()
		if next.TLSConfig, err = f.cfg.TLS.serverConfig(); err != nil {
			return err
		}
		if next.Cluster.TLSConfig != nil {
			if next.Cluster.TLSConfig, err = f.cfg.TLS.serverConfig(); err != nil {
				return err
			}
		}
		if next.Cluster.Port == 0 {
			next.Cluster.Port = -1 // the port the server took (ReloadOptions)
		}
		keep := next.Clone()
		if err := f.srv.ReloadOptions(next); err != nil {
			return leasehold.Wrap(leasehold.KindUnavailable, err, "reloading the embedded NATS server's TLS files: %v", err)
		}
		f.srvOpts = keep
	}
	if len(client.Certificates) > 0 {
		f.tlsCert.cur.Store(&client.Certificates[0])
	}
	return nil
}
