package fleet

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"github.com/leasehold/leasehold"
)

// TLS is a node's NATS certificate, its key and the fleet's CA: the
// embedded server's client port and routes speak TLS with them and ask
// every peer (client or route) for a certificate the CA signed, and this
// node's own connection to NATS presents the certificate and verifies the
// server against the CA. Without it NATS speaks in clear, and a route's
// CONNECT carries the fleet's secret as it is.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

// tlsFiles is TLS read: the key pair and the CA's pool.
type tlsFiles struct {
	cert tls.Certificate
	ca   *x509.CertPool
}

// load reads the files, each error naming the flag to fix. Errors:
// KindInvalid.
func (t TLS) load() (tlsFiles, error) {
	if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
		return tlsFiles{}, leasehold.Errorf(leasehold.KindInvalid, "NATS TLS needs all of --nats-tls-cert, --nats-tls-key and --nats-tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return tlsFiles{}, leasehold.Wrap(leasehold.KindInvalid, err, "--nats-tls-cert %s, --nats-tls-key %s: %v", t.CertFile, t.KeyFile, err)
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return tlsFiles{}, leasehold.Wrap(leasehold.KindInvalid, err, "--nats-tls-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tlsFiles{}, leasehold.Errorf(leasehold.KindInvalid, "--nats-tls-ca %s: no PEM certificate in it", t.CAFile)
	}
	return tlsFiles{cert: cert, ca: pool}, nil
}

// Check reads the files as StartServer and the fleet's join will, so that
// a wrong path or a key that does not match its certificate stops the
// node at start.
// Errors: KindInvalid, naming the flag.
func (t TLS) Check() error {
	_, err := t.load()
	return err
}

// serverConfig is the embedded server's side, for its client port and its
// routes (a route is both server and client, so the CA is both pools): a
// peer without a certificate the CA signed is refused in the handshake.
func (t TLS) serverConfig() (*tls.Config, error) {
	f, err := t.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{f.cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: f.ca, RootCAs: f.ca,
	}, nil
}

// clientConfig is this node's connection to NATS: it presents the node's
// certificate and verifies the server's against the CA (the server's
// certificate must name the address the node dials, 127.0.0.1 for its own
// embedded server on loopback).
func (t TLS) clientConfig() (*tls.Config, error) {
	f, err := t.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{f.cert}, RootCAs: f.ca}, nil
}
