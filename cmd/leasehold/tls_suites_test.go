package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServeTLSCipherSuites: serve --tls-cert refuses a TLS 1.2 client
// that offers only a CBC suite (the review's ECDHE-ECDSA-AES128-SHA
// among them), and takes one that offers an ECDHE suite with AES-GCM or
// ChaCha20-Poly1305 (leasehold.ServerCipherSuites), and TLS 1.3.
func TestServeTLSCipherSuites(t *testing.T) {
	pki := newPKI(t)
	ca := pki.ca("ca")
	cert, key := pki.leaf("ca", "node")
	m, _ := startNode(t, nil, "--tls-cert", cert, "--tls-key", key)
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	token := readAdminToken(t, m)
	// dial asks the node for its nodes over TLS up to maxVersion offering
	// suites (Go's own when none): nil when it answers 200.
	dial := func(maxVersion uint16, suites ...uint16) error {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, MaxVersion: maxVersion, CipherSuites: suites}}}
		req, _ := http.NewRequest("GET", "https://"+m.Addr().String()+"/api/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("answered %s", resp.Status)
		}
		return nil
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256} {
		if err := dial(tls.VersionTLS12, suite); err == nil || !strings.Contains(err.Error(), "remote error: tls: handshake failure") {
			t.Errorf("TLS 1.2 offering only %s: %v, want the handshake refused", tls.CipherSuiteName(suite), err)
		}
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if err := dial(tls.VersionTLS12, suite); err != nil {
			t.Errorf("TLS 1.2 offering %s: %v, want it taken", tls.CipherSuiteName(suite), err)
		}
	}
	if err := dial(tls.VersionTLS13); err != nil {
		t.Errorf("TLS 1.3: %v", err)
	}
}
