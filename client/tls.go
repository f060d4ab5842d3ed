package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
)

// LoadTLS is the TLS configuration of a client of a node that serves
// HTTPS: caFile (PEM), when not "", adds the CAs that may have signed the
// node's certificate to the system's; certFile and keyFile (PEM), when
// given, are the client certificate a node started with --tls-client-ca
// asks for.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--client-cert %s, --client-key %s: %v", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case certFile != "" || keyFile != "":
		return nil, errors.New("--client-cert and --client-key go together: the certificate and its private key")
	}
	return cfg, nil
}

// tlsClients are the HTTP clients made for Clients' TLSConfig, one per
// configuration, so that every Client with it shares its connections.
var tlsClients sync.Map // *tls.Config → *http.Client

// HTTPClientFor is an HTTP client that speaks TLS with cfg: the default
// transport's settings with cfg as its TLS configuration. The same cfg
// gets the same client.
func HTTPClientFor(cfg *tls.Config) *http.Client {
	if hc, ok := tlsClients.Load(cfg); ok {
		return hc.(*http.Client)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	hc, _ := tlsClients.LoadOrStore(cfg, &http.Client{Transport: tr})
	return hc.(*http.Client)
}
