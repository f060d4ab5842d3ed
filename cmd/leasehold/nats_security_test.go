package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold/fleet"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
)

// serveNATS serves a node (serveNode) with args and its NATS client
// port on a free port until the test ends, and waits until it has joined
// its fleet. It returns the node and its NATS client address.
func serveNATS(t *testing.T, args ...string) (*servedNode, string) {
	t.Helper()
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	n := serveNode(t, append([]string{"--nats-listen", natsAddr, "--claim-ttl", "2s"}, args...)...)
	pollReady(t, n.url, 90*time.Second)
	return n, natsAddr
}

// TestServeNATSClosedByDefault is the review's first finding: a node run
// with the defaults (embedded NATS on loopback, no --nats-secret-file)
// let any local process send admin writes on leasehold.admin.<node>
// around the HTTP API's tokens. Now its NATS asks for the node's own
// token, made 0600 into the data dir: a client with no credentials gets
// -ERR 'Authorization Violation' and its forged put_group changes
// nothing; a write carried with the token is refused unless a node signs
// it, and then is logged as an admin write, naming the peer that signed
// it.
func TestServeNATSClosedByDefault(t *testing.T) {
	dir := t.TempDir()
	n, natsAddr := serveNATS(t, "--data", dir, "--name", "node-a")
	url, log := n.url, n.log

	fi, err := os.Stat(filepath.Join(dir, "nats.secret"))
	if err != nil {
		t.Fatalf("no NATS secret made into the data dir: %v", err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("nats.secret is %v, want 0600", got)
	}

	// The attack as the review ran it: a raw client, no credentials, the
	// forged op straight onto the node's admin subject.
	op := `{"op":"put_group","group":"pwned-via-nats"}`
	c, err := net.DialTimeout("tcp", natsAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPUB leasehold.admin.node-a _INBOX.x %d\r\n%s\r\nPING\r\n", len(op), op)
	r := bufio.NewReader(c)
	var answer []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		answer = append(answer, strings.TrimSpace(line))
	}
	if !strings.Contains(strings.Join(answer, "\n"), "-ERR 'Authorization Violation'") {
		t.Fatalf("a client with no credentials was answered %q, want -ERR 'Authorization Violation'", answer)
	}
	if nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a NATS client with no credentials was let in")
	}
	adminToken, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	group := func(name string) int {
		req, _ := http.NewRequest("GET", url+"/api/v1/groups/"+name, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(adminToken)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := group("pwned-via-nats"); got != 404 {
		t.Fatalf("GET the forged group: %d, want 404 (the forged put_group changed the catalog)", got)
	}

	// With the node's token (what a peer or the operator holds), the write
	// is carried, and logged like an HTTP admin write.
	secret, err := os.ReadFile(filepath.Join(dir, "nats.secret"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+natsAddr, nats.Token(strings.TrimSpace(string(secret))), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("a client with the node's token: %v", err)
	}
	defer nc.Close()
	msg := nats.NewMsg("leasehold.admin.node-a")
	msg.Data = []byte(`{"op":"put_group","group":"carried"}`)
	msg.Header.Set("Leasehold-Node", "node-b")
	msg.Header.Set("Leasehold-Life", "life-b1")
	// Unsigned, the token alone does not make it a node's: refused.
	ans, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ans.Data), `"kind":"forbidden"`) {
		t.Fatalf("an unsigned carried put_group answered %s, want forbidden", ans.Data)
	}
	// Signed by node-b's key, pinned at first sight.
	b, err := fleet.LoadIdentity(t.TempDir(), "node-b")
	if err != nil {
		t.Fatal(err)
	}
	b.SignMsg(msg)
	ans, err = nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ans.Data), `"created":true`) {
		t.Fatalf("carried put_group answered %s", ans.Data)
	}
	if got := group("carried"); got != 200 {
		t.Fatalf("GET the carried group: %d, want 200", got)
	}
	var line string
	for l := range strings.SplitSeq(log.String(), "\n") {
		if strings.Contains(l, "admin write") && strings.Contains(l, "via=nats") {
			line = l
		}
	}
	if !strings.Contains(log.String(), "nats_auth="+filepath.Join(dir, "nats.secret")) {
		t.Errorf("the serving line does not say NATS asks for %s:\n%s", filepath.Join(dir, "nats.secret"), log.String())
	}
	for _, want := range []string{"op=put_group", "group=carried", "peer=node-b", "life=life-b1", "subject=leasehold.admin.node-a"} {
		if !strings.Contains(line, want) {
			t.Fatalf("carried admin write logged as %q, want it to name %s; log:\n%s", line, want, log.String())
		}
	}
}

// TestServeNATSTLS: with --nats-tls-cert/key/ca the node's embedded NATS
// takes only TLS clients with a certificate its CA signed, and the node's
// own connection (which verifies the server against the CA) joins.
func TestServeNATSTLS(t *testing.T) {
	certs := natstest.MakeCerts(t, "fleet-ca", "node-a")
	_, natsAddr := serveNATS(t, "--data", t.TempDir(), "--name", "node-a",
		"--nats-tls-cert", certs.Cert["node-a"], "--nats-tls-key", certs.Key["node-a"], "--nats-tls-ca", certs.CA)

	if nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client in clear was let in")
	} else if !strings.Contains(err.Error(), "tls") {
		// nats.go, told TLS is required, tries it with the system's roots,
		// which do not know the fleet's CA.
		t.Fatalf("a client in clear: %v, want a TLS error", err)
	}
	pem, _ := os.ReadFile(certs.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	if nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(2*time.Second), nats.Secure(&tls.Config{RootCAs: pool})); err == nil {
		nc.Close()
		t.Fatal("a TLS client without a certificate was let in")
	}
}

// TestServeNATSTLSBadFiles: a wrong path or a key that is not the
// certificate's is one line and exit 2 at start, and nothing is made.
func TestServeNATSTLSBadFiles(t *testing.T) {
	certs := natstest.MakeCerts(t, "fleet-ca", "node-a", "node-b")
	missing := filepath.Join(t.TempDir(), "none.pem")
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"MissingCert", []string{"--nats-tls-cert", missing, "--nats-tls-key", certs.Key["node-a"], "--nats-tls-ca", certs.CA}, "--nats-tls-cert " + missing},
		{"MissingCA", []string{"--nats-tls-cert", certs.Cert["node-a"], "--nats-tls-key", certs.Key["node-a"], "--nats-tls-ca", missing}, "--nats-tls-ca"},
		{"CANotPEM", []string{"--nats-tls-cert", certs.Cert["node-a"], "--nats-tls-key", certs.Key["node-a"], "--nats-tls-ca", certs.Key["node-b"]}, "no PEM certificate"},
		{"KeyNotTheCerts", []string{"--nats-tls-cert", certs.Cert["node-a"], "--nats-tls-key", certs.Key["node-b"], "--nats-tls-ca", certs.CA}, "--nats-tls-key"},
		{"CertWithoutKey", []string{"--nats-tls-cert", certs.Cert["node-a"], "--nats-tls-ca", certs.CA}, "needs all of"},
		{"NATSOff", []string{"--nats", "off", "--nats-tls-cert", certs.Cert["node-a"], "--nats-tls-key", certs.Key["node-a"], "--nats-tls-ca", certs.CA}, "--nats off"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0"}, tc.args...)
			code := exitCode(run(context.Background(), args, &stdout, &stderr), &stderr)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], tc.msg) {
				t.Fatalf("stderr %q, want one line naming %q", stderr.String(), tc.msg)
			}
			if _, err := os.Stat(data); err == nil {
				t.Fatal("the data dir was made by a node that refused to start")
			}
		})
	}
}
