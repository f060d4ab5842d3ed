package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// testPKI makes certificates with openssl in a temporary directory.
type testPKI struct {
	t   *testing.T
	dir string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	return &testPKI{t: t, dir: t.TempDir()}
}

func (p *testPKI) openssl(args ...string) {
	p.t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Dir = p.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ca makes a CA named name: name.pem and name.key.
func (p *testPKI) ca(name string) string {
	p.openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
		"-keyout", name+".key", "-out", name+".pem", "-days", "2", "-subj", "/CN="+name)
	return filepath.Join(p.dir, name+".pem")
}

// leaf makes a certificate for 127.0.0.1 (server and client use) with
// common name cn, signed by the CA ca: its cert and key files.
func (p *testPKI) leaf(ca, cn string) (cert, key string) {
	ext := filepath.Join(p.dir, "ext.cnf")
	if err := os.WriteFile(ext, []byte("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"), 0o600); err != nil {
		p.t.Fatal(err)
	}
	p.openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
		"-keyout", cn+".key", "-out", cn+".csr", "-subj", "/CN="+cn)
	p.openssl("x509", "-req", "-in", cn+".csr", "-CA", ca+".pem", "-CAkey", ca+".key", "-CAcreateserial",
		"-out", cn+".pem", "-days", "2", "-extfile", ext)
	return filepath.Join(p.dir, cn+".pem"), filepath.Join(p.dir, cn+".key")
}

// startNode serves a node alone (serveNodeWith) on a new data dir with
// args, until the test ends; its Main and its log are returned.
func startNode(t *testing.T, prepare func(*Main), args ...string) (*Main, *syncbuf.Buffer) {
	t.Helper()
	n := serveNodeWith(t, prepare, append([]string{"--data", t.TempDir(), "--nats", "off"}, args...)...)
	return n.m, n.log
}

// httpsClient trusts the CA in caFile only, and presents cert/key when
// given.
func httpsClient(t *testing.T, caFile, cert, key string) *http.Client {
	t.Helper()
	cfg, err := client.LoadTLS(caFile, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool() // not the system's: the test's CA only
	pem, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(pem)
	cfg.RootCAs = pool
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

// servedName is the common name of the certificate the node serves now.
func servedName(t *testing.T, hc *http.Client, u string) (string, error) {
	resp, err := hc.Get(u + "/healthz")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		return "", errors.New("not a 200 over TLS: " + resp.Status)
	}
	return resp.TLS.PeerCertificates[0].Subject.CommonName, nil
}

// waitServed polls until the node serves the certificate named cn.
func waitServed(t *testing.T, hc *http.Client, u, cn string, log *syncbuf.Buffer) {
	t.Helper()
	poll.Until(t, 20*time.Second, "the node to serve "+cn, func() error {
		got, err := servedName(t, hc, u)
		if got == cn {
			return nil
		}
		return fmt.Errorf("still served %q (%v)\n%s", got, err, log)
	})
}

// install copies a pair over the files the node serves, each by rename,
// as a certificate manager does.
func install(t *testing.T, cert, key, toCert, toKey string) {
	t.Helper()
	for from, to := range map[string]string{key: toKey, cert: toCert} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(to+".new", to); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServeTLSRotation serves HTTPS, then a certificate renewed on disk
// is served without a restart; a pair that does not match is refused
// with a warning and the last good one stays.
func TestServeTLSRotation(t *testing.T) {
	r := startRotating(t, 100*time.Millisecond)
	m, log, u, hc := r.m, r.log, r.url, r.hc
	first, second, secondKey, certFile, keyFile := r.first, r.second, r.secondKey, r.certFile, r.keyFile

	// Nothing is answered in clear.
	if resp, err := http.Get("http://" + m.Addr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain http got 200 from a node serving HTTPS")
		}
	}

	install(t, second, secondKey, certFile, keyFile)
	waitServed(t, hc, u, "second", log)

	// A certificate without its key: refused, the last good pair stays.
	install(t, first, secondKey, certFile, keyFile)
	poll.Eventually(t, 20*time.Second, "a warning about a bad pair", func() bool { return strings.Contains(log.String(), "does not load") })
	if got, err := servedName(t, hc, u); got != "second" {
		t.Fatalf("after a bad pair: served %q (%v), want the last good one", got, err)
	}
	if !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("the bad pair was not a warning:\n%s", log)
	}
}

// TestServeTLSSighup reads the pair again on SIGHUP, without waiting for
// the files to be looked at.
func TestServeTLSSighup(t *testing.T) {
	r := startRotating(t, time.Hour)
	install(t, r.second, r.secondKey, r.certFile, r.keyFile)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitServed(t, r.hc, r.url, "second", r.log)
}

// rotating is a node serving the certificate "first" from files that a
// test may replace, and "second", the renewal it may put there.
type rotating struct {
	m                        *Main
	log                      *syncbuf.Buffer
	url                      string
	hc                       *http.Client
	first, second, secondKey string
	certFile, keyFile        string
}

// startRotating starts a node that looks at its certificate files every
// `every`, once it serves "first".
func startRotating(t *testing.T, every time.Duration) *rotating {
	t.Helper()
	pki := newPKI(t)
	ca := pki.ca("ca")
	r := &rotating{certFile: filepath.Join(t.TempDir(), "node.pem"), keyFile: filepath.Join(t.TempDir(), "node.key")}
	var firstKey string
	r.first, firstKey = pki.leaf("ca", "first")
	r.second, r.secondKey = pki.leaf("ca", "second")
	install(t, r.first, firstKey, r.certFile, r.keyFile)
	r.m, r.log = startNode(t, func(m *Main) { m.certEvery = every }, "--tls-cert", r.certFile, "--tls-key", r.keyFile)
	r.url = "https://" + r.m.Addr().String()
	r.hc = httpsClient(t, ca, "", "")
	waitServed(t, r.hc, r.url, "first", r.log)
	return r
}

// TestServeTLSClients: a client without the node's CA is refused; the
// CLI, the healthcheck and the Go client get through with --ca-file or
// $LEASEHOLD_CA_FILE.
func TestServeTLSClients(t *testing.T) {
	pki := newPKI(t)
	ca := pki.ca("ca")
	cert, key := pki.leaf("ca", "node")
	m, _ := startNode(t, nil, "--tls-cert", cert, "--tls-key", key)
	u := "https://" + m.Addr().String()
	token := readAdminToken(t, m)

	var out bytes.Buffer
	err := runAdmin(context.Background(), []string{"--url", u, "--token", token, "groups", "list"}, &out, &out)
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) && !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("admin without the CA: %v, want an unknown authority", err)
	}
	out.Reset()
	if err := runAdmin(context.Background(), []string{"--url", u, "--token", token, "--ca-file", ca, "groups", "list"}, &out, &out); err != nil {
		t.Fatalf("admin with --ca-file: %v\n%s", err, out.String())
	}
	t.Setenv("LEASEHOLD_CA_FILE", ca)
	if err := runAdmin(context.Background(), []string{"--url", u, "--token", token, "groups", "list"}, &out, &out); err != nil {
		t.Fatalf("admin with $LEASEHOLD_CA_FILE: %v\n%s", err, out.String())
	}
	if err := runHealthcheck(context.Background(), []string{"--url", u, "-q"}, &out, &out); err != nil {
		t.Fatalf("healthcheck with $LEASEHOLD_CA_FILE: %v", err)
	}
	t.Setenv("LEASEHOLD_CA_FILE", "")
	if err := runHealthcheck(context.Background(), []string{"--url", u, "-q"}, &out, &out); err == nil {
		t.Fatal("healthcheck without the CA got through")
	}

	// The worker: its node client is the one --verify uses.
	if err := runWorker(context.Background(), []string{"--verify", "--url", u, "--admin-token", token}, &out, &out); err == nil {
		t.Fatal("worker without the CA got through")
	}
	if err := runWorker(context.Background(), []string{"--verify", "--url", u, "--admin-token", token, "--ca-file", ca}, &out, &out); err != nil {
		t.Fatalf("worker with --ca-file: %v", err)
	}

	// The image's healthcheck: the local node, which must serve the
	// certificate $LEASEHOLD_TLS_CERT names.
	t.Setenv("LEASEHOLD_URL", "")
	t.Setenv("LEASEHOLD_LISTEN", m.Addr().String())
	t.Setenv("LEASEHOLD_TLS_CERT", cert)
	if err := runHealthcheck(context.Background(), []string{"-q"}, &out, &out); err != nil {
		t.Fatalf("healthcheck of the local node serving $LEASEHOLD_TLS_CERT: %v", err)
	}
	other, _ := pki.leaf("ca", "other")
	t.Setenv("LEASEHOLD_TLS_CERT", other)
	if err := runHealthcheck(context.Background(), []string{"-q"}, &out, &out); err == nil {
		t.Fatal("healthcheck passed a node serving another certificate than $LEASEHOLD_TLS_CERT")
	}

	cfg, err := client.LoadTLS(ca, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(u, token)
	c.TLSConfig = cfg
	if _, err := c.Groups(context.Background(), "", 10); err != nil {
		t.Fatalf("the Go client with TLSConfig: %v", err)
	}
}

func readAdminToken(t *testing.T, m *Main) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.DataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestServeTLSClientCA asks clients for a certificate signed by
// --tls-client-ca: none, or one from another CA, is refused.
func TestServeTLSClientCA(t *testing.T) {
	pki := newPKI(t)
	ca := pki.ca("ca")
	clientCA := pki.ca("clients")
	pki.ca("stranger")
	cert, key := pki.leaf("ca", "node")
	okCert, okKey := pki.leaf("clients", "operator")
	badCert, badKey := pki.leaf("stranger", "mallory")
	m, _ := startNode(t, nil, "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clientCA)
	u := "https://" + m.Addr().String()

	for name, hc := range map[string]*http.Client{
		"NoCertificate":    httpsClient(t, ca, "", ""),
		"AnotherCAsClient": httpsClient(t, ca, badCert, badKey),
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := servedName(t, hc, u); err == nil {
				t.Fatalf("served %q to a client without a certificate from --tls-client-ca", got)
			}
		})
	}
	if _, err := servedName(t, httpsClient(t, ca, okCert, okKey), u); err != nil {
		t.Fatalf("a client certificate from --tls-client-ca: %v", err)
	}
	var out bytes.Buffer
	if err := runAdmin(context.Background(), []string{"--url", u, "--token", readAdminToken(t, m), "--ca-file", ca,
		"--client-cert", okCert, "--client-key", okKey, "groups", "list"}, &out, &out); err != nil {
		t.Fatalf("admin with --client-cert: %v\n%s", err, out.String())
	}
}

// TestServeTLSBadStart: a wrong path or a key that is not the
// certificate's stops serve at once with one line and exit 2, before the
// data dir is touched.
func TestServeTLSBadStart(t *testing.T) {
	pki := newPKI(t)
	pki.ca("ca")
	cert, key := pki.leaf("ca", "node")
	_, otherKey := pki.leaf("ca", "other")
	for name, tc := range map[string]struct {
		args    []string
		mention string
	}{
		"MissingCert":         {[]string{"--tls-cert", cert + ".nope", "--tls-key", key}, "node.pem.nope"},
		"KeyMismatch":         {[]string{"--tls-cert", cert, "--tls-key", otherKey}, "private key does not match"},
		"NoKey":               {[]string{"--tls-cert", cert}, "--tls-key"},
		"ClientCAWithoutCert": {[]string{"--tls-client-ca", cert}, "--tls-cert"},
		"EmptyClientCA":       {[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", "/dev/null"}, "no PEM certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0", "--nats", "off"}, tc.args...)
			err := run(context.Background(), args, &stdout, &stderr)
			code := exitCode(err, &stderr)
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.mention) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line naming %q", code, stderr.String(), tc.mention)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the data dir was made: %v", err)
			}
		})
	}
	// A bad --trusted-proxy is a bad flag value: the flag's usage, then
	// the line.
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--trusted-proxy", "10.0.0/8"}, io.Discard, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(err.Error(), "want a CIDR") {
		t.Fatalf("--trusted-proxy 10.0.0/8: exit %d, %v", code, err)
	}
}

// signin signs in to the dashboard at u through hc, with extra headers,
// and returns the answer.
func signin(t *testing.T, hc *http.Client, u, token string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", u+"/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", u)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	noRedirect := *hc
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %s", resp.Status)
	}
	return resp
}

func sessionSecure(t *testing.T, resp *http.Response) bool {
	t.Helper()
	for _, ck := range resp.Cookies() {
		if ck.Name == "leasehold_session" {
			return ck.Secure
		}
	}
	t.Fatalf("no session cookie in %v", resp.Header["Set-Cookie"])
	return false
}

// TestSessionCookieSecure: the dashboard's cookie is Secure, with HSTS,
// under TLS and behind a trusted proxy that says https; the same header
// from anyone else changes nothing.
func TestSessionCookieSecure(t *testing.T) {
	t.Run("TLS", func(t *testing.T) {
		pki := newPKI(t)
		ca := pki.ca("ca")
		cert, key := pki.leaf("ca", "node")
		m, _ := startNode(t, nil, "--tls-cert", cert, "--tls-key", key)
		u := "https://" + m.Addr().String()
		resp := signin(t, httpsClient(t, ca, "", ""), u, readAdminToken(t, m))
		if !sessionSecure(t, resp) || resp.Header.Get("Strict-Transport-Security") == "" {
			t.Fatalf("under TLS: Set-Cookie %q, HSTS %q", resp.Header["Set-Cookie"], resp.Header.Get("Strict-Transport-Security"))
		}
	})
	for name, tc := range map[string]struct {
		proxies string
		proto   string
		secure  bool
	}{
		"TrustedProxyHTTPS":   {"127.0.0.0/8", "https", true},
		"TrustedAddress":      {"10.1.2.3,127.0.0.1", "https", true},
		"TrustedProxyHTTP":    {"127.0.0.0/8", "http", false},
		"UntrustedProxyHTTPS": {"10.0.0.0/8", "https", false},
		"NoProxyHTTPS":        {"", "https", false},
	} {
		t.Run(name, func(t *testing.T) {
			var args []string
			if tc.proxies != "" {
				args = []string{"--trusted-proxy", tc.proxies}
			}
			m, _ := startNode(t, nil, args...)
			u := "http://" + m.Addr().String()
			resp := signin(t, http.DefaultClient, u, readAdminToken(t, m), "X-Forwarded-Proto", tc.proto)
			hsts := resp.Header.Get("Strict-Transport-Security") != ""
			if got := sessionSecure(t, resp); got != tc.secure || hsts != tc.secure {
				t.Fatalf("Secure %v, HSTS %v; want both %v", got, hsts, tc.secure)
			}
		})
	}
}

// TestTrustedProxyFlag: repeated and comma-separated values add up, and
// the flag replaces $LEASEHOLD_TRUSTED_PROXY as every flag replaces its
// variable.
func TestTrustedProxyFlag(t *testing.T) {
	t.Setenv("LEASEHOLD_TRUSTED_PROXY", "10.0.0.0/8")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "10.0.0.0/8"},
		{[]string{"--trusted-proxy", "192.168.0.1,fd00::/8", "--trusted-proxy", "172.16.9.9/12"}, "192.168.0.1/32,fd00::/8,172.16.0.0/12"},
	} {
		m := NewMain(io.Discard, io.Discard)
		if err := m.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := m.TrustedProxies.String(); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.args, got, tc.want)
		}
	}
}
