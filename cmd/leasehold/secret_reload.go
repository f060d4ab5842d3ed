package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/fleet"
)

// readSecretFile reads a fleet secret file: the first line is the secret
// this node presents, each further line one it accepts too (the other
// secret while the fleet's rolls); blank lines and surrounding spaces do
// not count. Errors: unreadable, or a secret under natsSecretMin bytes.
func readSecretFile(path string) (string, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("--nats-secret-file: %w", err)
	}
	var secrets []string
	for i, line := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(line)
		if s == "" && i > 0 {
			continue
		}
		if len(s) < natsSecretMin {
			return "", nil, fmt.Errorf("--nats-secret-file %s: the secret on line %d is %d bytes, want at least %d (for example: head -c 32 /dev/urandom | base64 > %s)",
				path, i+1, len(s), natsSecretMin, path)
		}
		secrets = append(secrets, s)
	}
	return secrets[0], secrets[1:], nil
}

// watchSecret rereads --nats-secret-file and the NATS TLS files on
// SIGHUP and when one changes (looked at every m.certEvery), and gives the
// fleet what they hold (fleet.Fleet.RotateSecret, ReloadTLS), until the
// returned stop is called. Files that cannot be read, or hold no usable
// secret or certificate, change nothing and are said in the log. Without
// a fleet, or with neither, it does nothing.
func (m *Main) watchSecret(ctx context.Context, log *slog.Logger, peers *fleet.Fleet) (stop func()) {
	if peers == nil || (m.NATSSecretFile == "" && m.natsTLS() == nil) {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	secretStamp := func() string { return fileStamp(m.NATSSecretFile) }
	tlsStamp := func() string {
		return fileStamp(m.NATSTLSCert) + " " + fileStamp(m.NATSTLSKey) + " " + fileStamp(m.NATSTLSCA)
	}
	reloadSecret := func(why string) {
		if m.NATSSecretFile == "" {
			return
		}
		present, also, err := readSecretFile(m.NATSSecretFile)
		if err != nil {
			log.Error(why+": the fleet secret file could not be read; the secrets stay as they were", "err", err)
			return
		}
		if err := peers.RotateSecret(present, also); err != nil {
			log.Error(why+": the fleet secret could not be changed", "err", err)
			return
		}
		log.Info(why+": the fleet secret file reloaded", "file", m.NATSSecretFile, "accepting", 1+len(also))
	}
	reloadTLS := func(why string) {
		if m.natsTLS() == nil {
			return
		}
		if err := peers.ReloadTLS(); err != nil {
			log.Error(why+": the NATS TLS files could not be reloaded; the ones in use stay", "err", err)
			return
		}
		log.Info(why+": the NATS TLS files reloaded", "cert", m.NATSTLSCert)
	}
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		tick := time.NewTicker(m.certEvery)
		defer tick.Stop()
		seenSecret, seenTLS := secretStamp(), tlsStamp()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				seenSecret, seenTLS = secretStamp(), tlsStamp()
				reloadSecret("SIGHUP")
				reloadTLS("SIGHUP")
			case <-tick.C:
				if now := secretStamp(); now != seenSecret {
					seenSecret = now
					reloadSecret("the fleet secret file changed")
				}
				if now := tlsStamp(); now != seenTLS {
					seenTLS = now
					reloadTLS("a NATS TLS file changed")
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// fileStamp is what tells a file changed: its modification time, size
// and inode ("" when it cannot be read).
func fileStamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d/%d/%d", fi.ModTime().UnixNano(), fi.Size(), ino)
}
