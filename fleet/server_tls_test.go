package fleet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/internal/nodetest/natstest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestServerClientToken: a server given no fleet secret but the node's own
// token (a node alone, as serve runs it by default) refuses a client with
// no credentials or another token, and takes one with the token.
func TestServerClientToken(t *testing.T) {
	t.Parallel()
	const token = "node-own-token-0123456789"
	s := serverStart(t, ServerConfig{Name: "node-1", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClientToken: token})
	wantRefused(t, s.ClientURL(), "the node's token", nil, nats.Token("another-token-0123456789"))
	nc, err := nats.Connect(s.ClientURL(), nats.Token(token), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("a client with the node's token: %v", err)
	}
	nc.Close()
}

// wantRefused connects to url once with each of opts (nil: no
// credentials) and wants each refused as an authorization violation:
// what is what the client lacks.
func wantRefused(t *testing.T, url, what string, opts ...nats.Option) {
	t.Helper()
	for _, opt := range opts {
		o := []nats.Option{nats.Timeout(2 * time.Second)}
		if opt != nil {
			o = append(o, opt)
		}
		nc, err := nats.Connect(url, o...)
		if err == nil {
			nc.Close()
			t.Fatalf("a client without %s was let in", what)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("a client without %s: %v, want an authorization violation", what, err)
		}
	}
}

// TestLocalSecret: the node's own NATS token is made once, 0600, and read
// back the same on every start; a file holding no usable secret is an
// error, not a fresh secret nobody asked for.
func TestLocalSecret(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	first, err := LocalSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, LocalSecretFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("%s is %v, want 0600", LocalSecretFile, got)
	}
	if len(first) < 40 {
		t.Fatalf("secret %d bytes, want 32 random bytes in base64", len(first))
	}
	again, err := LocalSecret(dir)
	if err != nil || again != first {
		t.Fatalf("second start read %q, %v; want the first start's secret", again, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data dir holds %d files, want only %s (no temporary file left)", len(entries), LocalSecretFile)
	}
	if err := os.WriteFile(filepath.Join(dir, LocalSecretFile), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalSecret(dir); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("a short secret file: %v, want an error saying to delete it", err)
	}
}

// tlsClient is a client TLS config trusting ca, presenting cert/key if
// given.
func tlsClient(t *testing.T, ca, cert, key string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}

// TestServerTLS: servers given the fleet's certificates route to each
// other over TLS and take a client that presents a certificate the CA
// signed; a client in clear, or over TLS without a certificate, is
// refused, and a server whose certificate another CA signed never routes
// in, even knowing the secret.
func TestServerTLS(t *testing.T) {
	t.Parallel()
	const secret = "fleet-secret-0123456789"
	certs := natstest.MakeCerts(t, "fleet-ca", "node-a", "node-b")
	other := natstest.MakeCerts(t, "other-ca", "node-x")
	tlsOf := func(c natstest.Certs, n string) *TLS {
		return &TLS{CertFile: c.Cert[n], KeyFile: c.Key[n], CAFile: c.CA}
	}
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))}
	a := serverStart(t, ServerConfig{Name: "node-a", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: addrs[0],
		Routes: []string{"nats://" + addrs[1]}, Secret: secret, TLS: tlsOf(certs, "node-a")})
	b := serverStart(t, ServerConfig{Name: "node-b", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: addrs[1],
		Routes: []string{"nats://" + addrs[0]}, Secret: secret, TLS: tlsOf(certs, "node-b")})
	poll.Eventually(t, 20*time.Second, "the two servers route to each other over TLS", func() bool {
		return a.NumRoutes() > 0 && b.NumRoutes() > 0
	})

	for name, opt := range map[string]nats.Option{
		"InClear":       nil,
		"NoClientCert":  nats.Secure(tlsClient(t, certs.CA, "", "")),
		"OtherCAClient": nats.Secure(tlsClient(t, certs.CA, other.Cert["node-x"], other.Key["node-x"])),
	} {
		opts := []nats.Option{nats.Token(secret), nats.Timeout(2 * time.Second)}
		if opt != nil {
			opts = append(opts, opt)
		}
		if nc, err := nats.Connect(a.ClientURL(), opts...); err == nil {
			nc.Close()
			t.Fatalf("%s: a client was let in", name)
		}
	}
	nc, err := nats.Connect(a.ClientURL(), nats.Token(secret), nats.Timeout(2*time.Second),
		nats.Secure(tlsClient(t, certs.CA, certs.Cert["node-b"], certs.Key["node-b"])))
	if err != nil {
		t.Fatalf("a client with the fleet's certificate: %v", err)
	}
	if !nc.TLSRequired() {
		t.Fatal("the server does not require TLS of its clients")
	}
	nc.Close()

	serverStart(t, ServerConfig{Name: "node-x", Dir: t.TempDir(), Listen: "127.0.0.1:0",
		ClusterListen: fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), Routes: []string{"nats://" + addrs[0]},
		Secret: secret, TLS: tlsOf(other, "node-x")})
	strangerKeptOut(t, a, "node-x")
}

// strangerKeptOut checks, across two seconds (routes retry every second,
// so the stranger knocks at least twice), that member admits no route
// from the server named stranger. Route counts are no measure: pooled
// routes come and go, and a knocking stranger is counted for a moment
// after the INFO, before its CONNECT is refused.
func strangerKeptOut(t *testing.T, member *server.Server, stranger string) {
	t.Helper()
	claimThroughout(t, 2*time.Second, 50*time.Millisecond, func() error {
		rz, err := member.Routez(nil)
		if err != nil {
			return err
		}
		for _, r := range rz.Routes {
			if r.RemoteName == stranger {
				return fmt.Errorf("%s routes into the fleet", stranger)
			}
		}
		return nil
	})
}

// TestServerRefusedLogged: a client refused for want of the token is
// logged, as a warning naming its remote and never the token it tried;
// one remote knocking again and again gets one line a minute, not one a
// knock, so the port cannot be used to fill the node's log.
func TestServerRefusedLogged(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := serverStart(t, ServerConfig{Name: "node-1", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClientToken: "node-own-token-0123456789", Logger: log})
	for range 5 {
		if nc, err := nats.Connect(s.ClientURL(), nats.Token("guessed-token-0123456789"), nats.Timeout(2*time.Second)); err == nil {
			nc.Close()
			t.Fatal("a client with a wrong token was let in")
		}
	}
	poll.Eventually(t, 5*time.Second, "the refusal is logged", func() bool {
		return strings.Contains(buf.String(), "NATS refused a connection")
	})
	lines := strings.Count(buf.String(), "NATS refused a connection")
	if lines != 1 || !strings.Contains(buf.String(), "remote=127.0.0.1") || strings.Contains(buf.String(), "guessed-token") {
		t.Fatalf("%d lines for 5 refusals from one remote, want 1 naming the remote and not the token:\n%s", lines, buf.String())
	}
	// A minute on, the remote's next refusal is logged with the count.
	l := &serverLogger{log: log}
	l.refusedConn("10.0.0.9:1234 - cid:1 - authentication error", time.Unix(0, 0))
	l.refusedConn("10.0.0.9:1235 - cid:2 - authentication error", time.Unix(10, 0))
	l.refusedConn("10.0.0.9:1236 - cid:3 - authentication error", time.Unix(61, 0))
	if got := strings.Count(buf.String(), "remote=10.0.0.9"); got != 2 || !strings.Contains(buf.String(), "remote=10.0.0.9 refused=2") {
		t.Fatalf("refusals a minute apart: %d lines, want 2, the second counting 2:\n%s", got, buf.String())
	}
}

// TestServerInsecureRoutes is --nats-insecure on a fleet: no shared
// secret, so the routes are open and two nodes with tokens of their own
// cluster, while each one's client port still asks for its own token.
func TestServerInsecureRoutes(t *testing.T) {
	t.Parallel()
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))}
	a := serverStart(t, ServerConfig{Name: "node-a", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: addrs[0],
		Routes: []string{"nats://" + addrs[1]}, ClientToken: "token-of-node-a-0123456789"})
	b := serverStart(t, ServerConfig{Name: "node-b", Dir: t.TempDir(), Listen: "127.0.0.1:0", ClusterListen: addrs[1],
		Routes: []string{"nats://" + addrs[0]}, ClientToken: "token-of-node-b-0123456789"})
	poll.Eventually(t, 20*time.Second, "the two servers route to each other", func() bool {
		return a.NumRoutes() > 0 && b.NumRoutes() > 0
	})
	// Only a's port: a client would otherwise go on to b, which a's INFO
	// advertises, and be let in there with b's token.
	if nc, err := nats.Connect(a.ClientURL(), nats.Token("token-of-node-b-0123456789"), nats.Timeout(2*time.Second),
		nats.IgnoreDiscoveredServers(), nats.DontRandomize()); err == nil {
		nc.Close()
		t.Fatal("node-a's client port took node-b's token")
	}
}
