package nntp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/source/nntp"
)

// testRoots is a pool holding the test CA of scripts/inn.sh.
func testRoots(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	if caFile == "" {
		t.Fatal("no CA in the environment (scripts/inn.sh start prints LEASEHOLD_TEST_NNTPS_CA)")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	return roots
}

// plainBeforeTLS is what a client sent before its STARTTLS command and
// the command itself; the bytes after it are TLS records.
func plainBeforeTLS(sent string) (string, bool) {
	i := strings.Index(sent, "STARTTLS\r\n")
	if i < 0 {
		return sent, false
	}
	return sent[:i+len("STARTTLS\r\n")], true
}

// TestStartTLSAgainstINN upgrades INN's plain reader port with STARTTLS
// (nnrpd offers it in reader mode when inn.conf names a certificate),
// logs in over the upgraded connection and reads GROUP and OVER. What
// crossed the wire in plain text is STARTTLS and what came before it,
// never AUTHINFO or the password. Without the test CA the certificate
// does not verify: permanent, and still no AUTHINFO sent.
func TestStartTLSAgainstINN(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	ctx := context.Background()
	pw, err := s.Password()
	if err != nil || s.User == "" {
		t.Fatalf("the test login: %q, %v (scripts/inn.sh start makes it)", s.User, err)
	}
	roots := testRoots(t, s.CAFile)

	t.Run("OK", func(t *testing.T) {
		p := newProxy(t, s.Addr, nil)
		cfg, err := nntp.ParseURL("nntp://" + s.User + "@" + p.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		cfg.StartTLS, cfg.Password, cfg.Connections = true, pw, 1
		cfg.TLSConfig = &tls.Config{RootCAs: roots}
		c := nntp.New(cfg)
		defer c.Close()
		if gi, err := c.Group(ctx, prefix+".a"); err != nil || gi.High != 15 {
			t.Fatalf("GROUP after STARTTLS: %+v, %v", gi, err)
		}
		hs, _, err := c.Overview(ctx, prefix+".a", 1, 15)
		if err != nil || len(hs) != 15 || hs[0].From != "alice <alice@example.org>" {
			t.Fatalf("OVER after STARTTLS: %d headers, %v; want 15", len(hs), err)
		}
		sent := p.clientSent()
		plain, upgraded := plainBeforeTLS(sent)
		if !upgraded {
			t.Fatalf("no STARTTLS sent; the client sent:\n%q", sent)
		}
		if strings.Contains(plain, "AUTHINFO") || strings.Contains(sent, pw) || strings.Contains(sent, "GROUP ") {
			t.Errorf("in plain text before TLS:\n%q", plain)
		}
		if len(sent) < len(plain)+200 {
			t.Errorf("%d bytes after STARTTLS: the session did not go on over TLS", len(sent)-len(plain))
		}
	})

	t.Run("Untrusted", func(t *testing.T) {
		p := newProxy(t, s.Addr, nil)
		c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), StartTLS: true, User: s.User, Password: pw, Connections: 1})
		defer c.Close()
		_, err := c.Group(ctx, prefix+".a")
		var cert *tls.CertificateVerificationError
		if !errors.As(err, &cert) || !nntp.Permanent(err) {
			t.Fatalf("STARTTLS to a certificate no trusted CA signed: %v; want a permanent certificate verification error", err)
		}
		if sent := p.clientSent(); strings.Contains(sent, "AUTHINFO") || strings.Contains(sent, pw) {
			t.Errorf("the login was sent to an unverified server:\n%q", sent)
		}
	})
}

// TestStartTLSNotOffered: a server whose CAPABILITIES do not list
// STARTTLS (the real INN behind a relay that drops that line) is a
// permanent ErrStartTLS, and the client does not carry on in plain text:
// no AUTHINFO, no GROUP is sent.
func TestStartTLSNotOffered(t *testing.T) {
	t.Parallel()
	s, prefix := fixture(t)
	pw, err := s.Password()
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, s.Addr, func(fromServer bool, line []byte) []byte {
		if fromServer && bytes.EqualFold(bytes.TrimSpace(line), []byte("STARTTLS")) {
			return nil
		}
		return line
	})
	c := nntp.New(nntp.Config{Addr: p.ln.Addr().String(), StartTLS: true, User: s.User, Password: pw, Connections: 1,
		TLSConfig: &tls.Config{RootCAs: testRoots(t, s.CAFile)}})
	defer c.Close()
	_, err = c.Group(context.Background(), prefix+".a")
	if !errors.Is(err, nntp.ErrStartTLS) || !nntp.Permanent(err) {
		t.Fatalf("STARTTLS not offered: %v; want a permanent ErrStartTLS", err)
	}
	sent := p.clientSent()
	if strings.Contains(sent, "AUTHINFO") || strings.Contains(sent, "GROUP") || strings.Contains(sent, "STARTTLS") {
		t.Errorf("the client went on in plain text:\n%q", sent)
	}
	if !strings.Contains(sent, "CAPABILITIES") {
		t.Errorf("the client never asked CAPABILITIES:\n%q", sent)
	}
}
