package natstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Certs are PEM files a test made with openssl: a CA of its own and, for
// each name asked, a certificate it signed (for 127.0.0.1 and localhost,
// good as server and as client) with its key.
type Certs struct {
	Dir string
	CA  string // the CA's certificate
	// Cert and Key by name.
	Cert, Key map[string]string
}

// MakeCerts makes a CA named ca under t.TempDir() and a certificate for
// each of names, by running openssl as an operator would.
func MakeCerts(t testing.TB, ca string, names ...string) Certs {
	t.Helper()
	dir := t.TempDir()
	c := Certs{Dir: dir, CA: filepath.Join(dir, ca+".pem"), Cert: map[string]string{}, Key: map[string]string{}}
	caKey := filepath.Join(dir, ca+".key")
	openssl(t, dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		"-keyout", caKey, "-out", c.CA, "-days", "2", "-subj", "/CN="+ca)
	ext := filepath.Join(dir, "ext.cnf")
	if err := os.WriteFile(ext, []byte("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		key, csr, cert := filepath.Join(dir, n+".key"), filepath.Join(dir, n+".csr"), filepath.Join(dir, n+".pem")
		openssl(t, dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
			"-keyout", key, "-out", csr, "-subj", "/CN="+n)
		openssl(t, dir, "x509", "-req", "-in", csr, "-CA", c.CA, "-CAkey", caKey, "-CAcreateserial",
			"-out", cert, "-days", "2", "-extfile", ext)
		c.Cert[n], c.Key[n] = cert, key
	}
	return c
}

func openssl(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openssl %v: %v\n%s", args, err, out)
	}
}
