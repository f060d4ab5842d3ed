package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/leasehold/leasehold/fleet"
)

// natsClientFlags are how the node uses an external NATS (--nats URL):
// the credentials its operators give (beside the token of
// --nats-secret-file) and the copies of the fleet's streams. Secrets come
// from files only: the command line is readable by every user of the
// machine.
type natsClientFlags struct {
	User         string
	PasswordFile string
	NKeyFile     string
	CredsFile    string
	// Replicas of the fleet's streams and buckets; 0 takes what the NATS
	// can keep (three on a cluster, one on a standalone server).
	Replicas int
}

// register adds the flags to fs.
func (n *natsClientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.User, "nats-user", n.User, "the user this node authenticates as to an external NATS (with --nats-password-file)")
	fs.StringVar(&n.PasswordFile, "nats-password-file", n.PasswordFile, "a file holding the password of --nats-user (its first line)")
	fs.StringVar(&n.NKeyFile, "nats-nkey-file", n.NKeyFile, "a file holding the nkey seed (SU…) this node authenticates with to an external NATS")
	fs.StringVar(&n.CredsFile, "nats-creds-file", n.CredsFile, "a .creds file (user JWT and seed) this node authenticates with to an external NATS; read again at each reconnect")
	fs.IntVar(&n.Replicas, "nats-replicas", n.Replicas, "copies of the fleet's streams and buckets, 1-3 (0: the embedded servers' count, or for an external NATS three on a cluster and one on a standalone server)")
}

// set reports whether any credential flag is given.
func (n *natsClientFlags) set() bool {
	return n.User != "" || n.PasswordFile != "" || n.NKeyFile != "" || n.CredsFile != ""
}

// check refuses flags that cannot work together, for NATS as m gives it.
func (n *natsClientFlags) check(m *Main) error {
	if n.Replicas < 0 || n.Replicas > fleet.MaxReplicas {
		return fmt.Errorf("--nats-replicas %d: want 1 to %d, or 0 for what NATS can keep", n.Replicas, fleet.MaxReplicas)
	}
	external := m.NATS != "" && m.NATS != "off"
	if !n.set() {
		return nil
	}
	if !external {
		return fmt.Errorf("--nats-user, --nats-password-file, --nats-nkey-file and --nats-creds-file authenticate to an external NATS (--nats nats://…); the embedded server takes --nats-secret-file")
	}
	ways := 0
	for _, s := range []string{m.NATSSecretFile, n.User + n.PasswordFile, n.NKeyFile, n.CredsFile} {
		if s != "" {
			ways++
		}
	}
	switch {
	case ways > 1:
		return fmt.Errorf("NATS credentials: give one of --nats-secret-file (a token), --nats-user with --nats-password-file, --nats-nkey-file or --nats-creds-file")
	case (n.User == "") != (n.PasswordFile == ""):
		return fmt.Errorf("--nats-user and --nats-password-file go together")
	}
	for flag, file := range map[string]string{"--nats-password-file": n.PasswordFile, "--nats-nkey-file": n.NKeyFile, "--nats-creds-file": n.CredsFile} {
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// auth reads the credentials for fleet.Config, warning of a secret file
// others can read, and says where they come from, for the start line.
func (n *natsClientFlags) auth(log *slog.Logger) (fleet.Auth, string, error) {
	a := fleet.Auth{User: n.User, NKeyFile: n.NKeyFile, CredsFile: n.CredsFile}
	var file, from string
	switch {
	case n.PasswordFile != "":
		b, err := os.ReadFile(n.PasswordFile)
		if err != nil {
			return a, "", fmt.Errorf("--nats-password-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if a.Password = strings.TrimSpace(line); a.Password == "" {
			return a, "", fmt.Errorf("--nats-password-file %s: the first line is empty", n.PasswordFile)
		}
		file, from = n.PasswordFile, "user "+n.User+", --nats-password-file "+n.PasswordFile
	case n.NKeyFile != "":
		file, from = n.NKeyFile, "--nats-nkey-file "+n.NKeyFile
	case n.CredsFile != "":
		file, from = n.CredsFile, "--nats-creds-file "+n.CredsFile
	}
	if fi, err := os.Stat(file); file != "" && err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("a NATS credentials file can be read by other users: chmod 600 it", "file", file, "mode", fi.Mode().Perm().String())
	}
	return a, from, nil
}
