package fleet

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
)

// TestServerTLSCipherSuites: the embedded server's client port and its
// route port refuse a TLS 1.2 client that offers only a CBC suite, and
// take one that offers an ECDHE suite with AES-GCM or ChaCha20-Poly1305
// (leasehold.ServerCipherSuites), and TLS 1.3.
func TestServerTLSCipherSuites(t *testing.T) {
	t.Parallel()
	certs := natstest.MakeCerts(t, "fleet-ca", "node-a", "node-b")
	route := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	s := serverStart(t, ServerConfig{Name: "node-a", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: route,
		Secret: "fleet-secret-0123456789", TLS: &TLS{CertFile: certs.Cert["node-a"], KeyFile: certs.Key["node-a"], CAFile: certs.CA}})
	client := s.Addr().String()
	for _, port := range []struct {
		name, addr string
		infoFirst  bool // the client port says INFO in clear before TLS; a route starts with TLS
	}{{"client", client, true}, {"route", route, false}} {
		for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256} {
			err := natsHandshake(t, port.addr, port.infoFirst, tls12Client(t, certs, suite))
			if err == nil || !strings.Contains(err.Error(), "remote error: tls: handshake failure") {
				t.Errorf("%s port, TLS 1.2 offering only %s: %v, want the handshake refused", port.name, tls.CipherSuiteName(suite), err)
			}
		}
		for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
			if err := natsHandshake(t, port.addr, port.infoFirst, tls12Client(t, certs, suite)); err != nil {
				t.Errorf("%s port, TLS 1.2 offering %s: %v, want it taken", port.name, tls.CipherSuiteName(suite), err)
			}
		}
		if err := natsHandshake(t, port.addr, port.infoFirst, tlsClient(t, certs.CA, certs.Cert["node-b"], certs.Key["node-b"])); err != nil {
			t.Errorf("%s port, TLS 1.3: %v", port.name, err)
		}
	}
}

// tls12Client is a client of the fleet (node-b's certificate) that speaks
// TLS 1.2 at most and offers suite alone.
func tls12Client(t *testing.T, certs natstest.Certs, suite uint16) *tls.Config {
	c := tlsClient(t, certs.CA, certs.Cert["node-b"], certs.Key["node-b"])
	c.MaxVersion, c.CipherSuites = tls.VersionTLS12, []uint16{suite}
	return c
}

// natsHandshake connects to a NATS port at addr and makes the TLS
// handshake with cfg, after reading the server's INFO when infoFirst: nil
// when the server took it.
func natsHandshake(t *testing.T, addr string, infoFirst bool, cfg *tls.Config) error {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if infoFirst {
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "INFO ") {
			t.Fatalf("%s: %q, %v; want the server's INFO", addr, line, err)
		}
	}
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1" // the certificates name it
	return tls.Client(conn, cfg).Handshake()
}
