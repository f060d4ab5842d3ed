package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
)

// Auth is how this node authenticates to an external NATS, besides the
// token (Config.Secret): at most one of a user and password, an nkey seed
// file, or a .creds file (a user JWT and its seed). Secrets are read from
// files by the caller or by nats.go, never taken from the command line.
type Auth struct {
	User, Password string
	// NKeyFile is a file holding an nkey user's seed (SU…).
	NKeyFile string
	// CredsFile is a .creds file: a user JWT and its nkey seed, as nsc
	// makes them; it is read again at each reconnect, so a rotated file is
	// taken up.
	CredsFile string
}

// set reports whether any of a's ways is given.
func (a Auth) set() bool {
	return a.User != "" || a.Password != "" || a.NKeyFile != "" || a.CredsFile != ""
}

// check refuses an Auth that cannot be used: two ways at once, a user
// without a password, a file that cannot be read. Errors: KindInvalid,
// naming the flag.
func (a Auth) check(token string) error {
	ways := 0
	for _, s := range []string{token, a.User + a.Password, a.NKeyFile, a.CredsFile} {
		if s != "" {
			ways++
		}
	}
	switch {
	case ways > 1:
		return leasehold.Errorf(leasehold.KindInvalid, "NATS credentials: give one of --nats-secret-file (a token), --nats-user with --nats-password-file, --nats-nkey-file or --nats-creds-file")
	case (a.User == "") != (a.Password == ""):
		return leasehold.Errorf(leasehold.KindInvalid, "--nats-user and --nats-password-file go together")
	}
	for flag, file := range map[string]string{"--nats-nkey-file": a.NKeyFile, "--nats-creds-file": a.CredsFile} {
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			return leasehold.Wrap(leasehold.KindInvalid, err, "%s: %v", flag, err)
		}
	}
	return nil
}

// options are nats.go's options for a.
func (a Auth) options() ([]nats.Option, error) {
	switch {
	case a.User != "":
		return []nats.Option{nats.UserInfo(a.User, a.Password)}, nil
	case a.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, leasehold.Wrap(leasehold.KindInvalid, err, "--nats-nkey-file %s: %v", a.NKeyFile, err)
		}
		return []nats.Option{o}, nil
	case a.CredsFile != "":
		return []nats.Option{nats.UserCredentials(a.CredsFile)}, nil
	}
	return nil, nil
}

// MaxReplicas is the most copies the fleet keeps of its streams and
// buckets: a JetStream quorum of three survives the loss of one server,
// and more only cost writes.
const MaxReplicas = 3

// externalReplicas is how many copies to ask of an external NATS when
// Config.Replicas leaves it to the fleet: one on a standalone server (it
// can keep no more), MaxReplicas on a cluster. A cluster with fewer
// JetStream servers up gets as many as they can hold, at least a
// majority, and the copy raiser raises them as the servers come (place);
// with fewer than a majority up the join waits, saying so (see
// placementHint).
func (f *Fleet) externalReplicas() int {
	if f.nc.ConnectedClusterName() == "" {
		return 1
	}
	return MaxReplicas
}

// jsErrClusterNoPeers is JetStream's "no suitable peers for placement"
// (nats-server's JSClusterNoPeersErrF), which nats.go does not name.
const jsErrClusterNoPeers jetstream.ErrorCode = 10005

// placementHint names the way out of a refused placement, for the join's
// log: an external cluster with fewer JetStream servers than the copies
// asked.
func (f *Fleet) placementHint(err error) error {
	var apiErr *jetstream.APIError
	if f.cfg.NATS == "" || !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrClusterNoPeers {
		return err
	}
	return fmt.Errorf("%w (the NATS cluster has fewer than %d JetStream servers up to place a majority of the %d copies: start them, or give --nats-replicas)", err, majorityOf(f.cfg.Replicas), f.cfg.Replicas)
}

// engineStreams are the JetStream streams the fleet lives on: its events,
// the publish records, the claims, the lives, the snapshots and the
// removals.
var engineStreams = []string{StreamName, "KV_" + PublishedBucket, "KV_" + ClaimsBucket, "KV_" + LivesBucket, snapshotStream, "KV_" + RemovedBucket}

// engineProbeEvery bounds how often the streams are asked after; between
// probes the last answer stands. engineProbeWait bounds one probe: a
// stream without a leader may leave its info request unanswered.
const (
	engineProbeEvery = time.Second
	engineProbeWait  = 2 * time.Second
)

// engine is the last probe of the fleet's streams.
type engine struct {
	mu      sync.Mutex
	at      time.Time
	offline string
}

// Offline says which of the fleet's streams and buckets NATS cannot serve
// now (no leader, or no answer): "" when all can. While one cannot, writes
// that need it are refused (503) though the node has joined, so /readyz
// and GET /api/v1/peers tell it. At most one probe runs a engineProbeEvery;
// callers in between share its answer.
func (f *Fleet) Offline(ctx context.Context) string {
	if !f.isJoined() {
		return ""
	}
	e := &f.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Since(e.at) < engineProbeEvery {
		return e.offline
	}
	ctx, cancel := context.WithTimeout(ctx, engineProbeWait)
	defer cancel()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		off []string
	)
	for _, name := range engineStreams {
		wg.Go(func() {
			if why := f.streamOffline(ctx, name); why != "" {
				mu.Lock()
				off = append(off, name+": "+why)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil && len(off) == 0 {
		// The caller gave up (its request ended): no answer to keep.
		return e.offline
	}
	slices.Sort(off)
	e.at, e.offline = time.Now(), strings.Join(off, "; ")
	return e.offline
}

// streamOffline is why stream name cannot be served now, "" if it can.
func (f *Fleet) streamOffline(ctx context.Context, name string) string {
	if !f.nc.IsConnected() {
		return "not connected to NATS"
	}
	s, err := f.js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Sprintf("no answer within %s", engineProbeWait)
		}
		return err.Error()
	}
	info := s.CachedInfo()
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return "no leader"
	}
	return ""
}

// credentialFlags names the flag that gave this node's NATS credentials,
// for the line of a node NATS refused.
func (f *Fleet) credentialFlags() string {
	switch a := f.cfg.Auth; {
	case a.User != "":
		return "--nats-user " + a.User + ", --nats-password-file"
	case a.NKeyFile != "":
		return "--nats-nkey-file " + a.NKeyFile
	case a.CredsFile != "":
		return "--nats-creds-file " + a.CredsFile
	}
	return "--nats-secret-file"
}

// refusedTLS reports whether err is a NATS server's certificate this node
// cannot verify: a wrong CA or a certificate for another name, which
// trying again does not mend.
func refusedTLS(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host)
}
