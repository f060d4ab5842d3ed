package fleet

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/internal/nodetest/natstest"
)

// authFile writes a secret to a file of its own, 0600, as an operator
// would hand it to a node.
func authFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// authOperator puts opts in operator mode, as an nsc-run NATS is: an
// operator, one account with JetStream, and a user of it, whose .creds
// file it returns; and the .creds of a user another account signed, which
// the server does not know.
func authOperator(t *testing.T, opts *server.Options) (creds, stranger string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// key makes a key pair and its public key.
	key := func(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
		kp, err := create()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		return kp, pub
	}
	okp, opub := key(nkeys.CreateOperator)
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	must(err)
	oc, err = jwt.DecodeOperatorClaims(ojwt)
	must(err)
	resolver := &server.MemAccResolver{}
	// The system account, which an operator's NATS runs on.
	_, spub := key(nkeys.CreateAccount)
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	must(err)
	must(resolver.Store(spub, sjwt))
	opts.SystemAccount = spub
	user := func(register bool) string {
		akp, apub := key(nkeys.CreateAccount)
		ac := jwt.NewAccountClaims(apub)
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		ajwt, err := ac.Encode(okp)
		must(err)
		if register {
			must(resolver.Store(apub, ajwt))
		}
		ukp, upub := key(nkeys.CreateUser)
		useed, err := ukp.Seed()
		must(err)
		ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
		must(err)
		b, err := jwt.FormatUserConfig(ujwt, useed)
		must(err)
		return authFile(t, "user.creds", b)
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.AccountResolver = resolver
	return user(true), user(false)
}

// TestFleetExternalAuth: a node authenticates to an external NATS as its
// operators set it up: a user and password, an nkey seed file, a .creds
// file, or TLS verified against a CA alone; with wrong credentials it
// stops joining at once, naming the flag to fix, instead of waiting.
func TestFleetExternalAuth(t *testing.T) {
	t.Parallel()
	certs := natstest.MakeCerts(t, "nats-ca", "nats-server")
	nkey, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	npub, _ := nkey.PublicKey()
	nseed, _ := nkey.Seed()
	other, _ := nkeys.CreateUser()
	oseed, _ := other.Seed()
	for _, tc := range []struct {
		name        string
		setup       func(o *server.Options) (good, bad Config)
		scheme      string
		refusedFlag string
	}{
		{name: "UserPassword", refusedFlag: "--nats-user", setup: func(o *server.Options) (Config, Config) {
			o.Users = []*server.User{{Username: "leasehold", Password: "pass-0123456789abcdef"}}
			return Config{Auth: Auth{User: "leasehold", Password: "pass-0123456789abcdef"}},
				Config{Auth: Auth{User: "leasehold", Password: "wrong-0123456789abcdef"}}
		}},
		{name: "NKey", refusedFlag: "--nats-nkey-file", setup: func(o *server.Options) (Config, Config) {
			o.Nkeys = []*server.NkeyUser{{Nkey: npub}}
			return Config{Auth: Auth{NKeyFile: authFile(t, "nkey.seed", nseed)}},
				Config{Auth: Auth{NKeyFile: authFile(t, "other.seed", oseed)}}
		}},
		{name: "Creds", refusedFlag: "--nats-creds-file", setup: func(o *server.Options) (Config, Config) {
			creds, stranger := authOperator(t, o)
			return Config{Auth: Auth{CredsFile: creds}}, Config{Auth: Auth{CredsFile: stranger}}
		}},
		{name: "TLSWithCAOnly", scheme: "tls", refusedFlag: "--nats-tls-ca", setup: func(o *server.Options) (Config, Config) {
			tc, err := (&TLS{CertFile: certs.Cert["nats-server"], KeyFile: certs.Key["nats-server"], CAFile: certs.CA}).serverConfig()
			if err != nil {
				t.Fatal(err)
			}
			tc.ClientAuth = 0 // the server asks no client certificate
			o.TLSConfig, o.TLS = tc, true
			// A CA that did not sign the server's certificate: refused.
			wrongCA := natstest.MakeCerts(t, "other-ca")
			return Config{TLS: &TLS{CAFile: certs.CA}}, Config{TLS: &TLS{CAFile: wrongCA.CA}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := natstest.Options(t)
			good, bad := tc.setup(opts)
			s := natstest.Start(t, opts)
			t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
			url := s.ClientURL()
			if tc.scheme != "" {
				url = strings.Replace(url, "nats://", tc.scheme+"://", 1)
			}
			good.Name, good.NATS, good.ClaimTTL = "node-a", url, fleetTTL
			n := fleetJoinWith(t, good)
			fleetReplicas(t, n, "joined a standalone server", 1)

			bad.Name, bad.NATS, bad.ClaimTTL = "node-b", url, fleetTTL
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			began := time.Now()
			_, _, _, err := joinNode(ctx, appliance.Config{DataDir: t.TempDir(), Logger: discard}, withLogger(bad))
			if err == nil {
				t.Fatal("a node with wrong credentials joined")
			}
			if ctx.Err() != nil {
				t.Fatalf("a node with wrong credentials went on trying for %s: %v", time.Since(began).Round(time.Millisecond), err)
			}
			if tc.refusedFlag != "" && (leasehold.KindOf(err) != leasehold.KindInvalid || !strings.Contains(err.Error(), tc.refusedFlag)) {
				t.Fatalf("refused: %v (kind %s); want invalid, naming %s", err, leasehold.KindOf(err), tc.refusedFlag)
			}
			t.Logf("refused in %s: %v", time.Since(began).Round(time.Millisecond), err)
		})
	}
}

// TestFleetExternalAuthInvalid: credentials that cannot work together are
// refused before anything starts.
func TestFleetExternalAuthInvalid(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"TwoWays":          {NATS: "nats://127.0.0.1:4222", Secret: "token-0123456789abcdef", Auth: Auth{CredsFile: "/dev/null"}},
		"UserWithout":      {NATS: "nats://127.0.0.1:4222", Auth: Auth{User: "leasehold"}},
		"NoSuchSeed":       {NATS: "nats://127.0.0.1:4222", Auth: Auth{NKeyFile: filepath.Join(t.TempDir(), "none")}},
		"EmbeddedWithUser": {Auth: Auth{User: "leasehold", Password: "pass-0123456789abcdef"}},
		"TooManyReplicas":  {NATS: "nats://127.0.0.1:4222", Replicas: 5},
		"CertWithoutKey":   {NATS: "nats://127.0.0.1:4222", TLS: &TLS{CertFile: "/dev/null", CAFile: "/dev/null"}},
	} {
		cfg.Name = "node-a"
		if _, err := NewGate(cfg); leasehold.KindOf(err) != leasehold.KindInvalid {
			t.Errorf("%s: NewGate = %v; want invalid", name, err)
		}
	}
}

// discard is a logger of nothing, for a node expected to fail.
var discard = slog.New(slog.DiscardHandler)

// withLogger is cfg logging nothing.
func withLogger(cfg Config) Config {
	cfg.Logger = discard
	return cfg
}
