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
	cert *tls.Certificate // nil for a client without a certificate
	ca   *x509.CertPool
}

// load reads the files, each error naming the flag to fix. The embedded
// server needs its certificate (needCert); a client of an external NATS
// needs only the CA that signed the servers', and a certificate of its own
// only if that NATS asks for one. Errors: KindInvalid.
func (t TLS) load(needCert bool) (tlsFiles, error) {
	if needCert && (t.CertFile == "" || t.KeyFile == "" || t.CAFile == "") {
		return tlsFiles{}, leasehold.Errorf(leasehold.KindInvalid, "NATS TLS needs all of --nats-tls-cert, --nats-tls-key and --nats-tls-ca")
	}
	if t.CAFile == "" || (t.CertFile == "") != (t.KeyFile == "") {
		return tlsFiles{}, leasehold.Errorf(leasehold.KindInvalid, "TLS to an external NATS needs --nats-tls-ca, and --nats-tls-cert with --nats-tls-key if it asks for a client certificate")
	}
	var files tlsFiles
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return tlsFiles{}, leasehold.Wrap(leasehold.KindInvalid, err, "--nats-tls-cert %s, --nats-tls-key %s: %v", t.CertFile, t.KeyFile, err)
		}
		files.cert = &cert
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return tlsFiles{}, leasehold.Wrap(leasehold.KindInvalid, err, "--nats-tls-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tlsFiles{}, leasehold.Errorf(leasehold.KindInvalid, "--nats-tls-ca %s: no PEM certificate in it", t.CAFile)
	}
	files.ca = pool
	return files, nil
}

// Check reads the files as StartServer and the fleet's join will, so that
// a wrong path or a key that does not match its certificate stops the
// node at start.
// Errors: KindInvalid, naming the flag.
func (t TLS) Check() error {
	_, err := t.load(true)
	return err
}

// CheckClient is Check for a client of an external NATS, where the CA
// alone will do. Errors: KindInvalid, naming the flag.
func (t TLS) CheckClient() error {
	_, err := t.load(false)
	return err
}

// serverConfig is the embedded server's side, for its client port and its
// routes (a route is both server and client, so the CA is both pools): a
// peer without a certificate the CA signed is refused in the handshake,
// and TLS 1.2 offers AEAD suites only (leasehold.ServerCipherSuites).
func (t TLS) serverConfig() (*tls.Config, error) {
	f, err := t.load(true)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12, CipherSuites: leasehold.ServerCipherSuites(), Certificates: []tls.Certificate{*f.cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: f.ca, RootCAs: f.ca,
	}, nil
}

// clientConfig is this node's connection to NATS: it presents the node's
// certificate and verifies the server's against the CA (the server's
// certificate must name the address the node dials, 127.0.0.1 for its own
// embedded server on loopback). Without a certificate (an external NATS
// that asks for none) it only verifies the server.
func (t TLS) clientConfig() (*tls.Config, error) {
	f, err := t.load(false)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: f.ca}
	if f.cert != nil {
		tc.Certificates = []tls.Certificate{*f.cert}
	}
	return tc, nil
}
