package fleet

import (
	"cmp"
	"crypto/subtle"
	"fmt"
	"net/url"
	"slices"
	"sync"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leasehold/leasehold"
)

// A fleet's transport secret changes without a restart, node by node.
// Each node holds the secret it presents (to its peers' routes and its
// own NATS) and the secrets it accepts (the one it presents, and during a
// roll the other): a node that accepts both old and new lets in peers
// not rolled yet and peers rolled already, so no route is refused while
// the roll goes through the fleet, and established routes and clients
// stay connected throughout (a secret is asked only when a connection is
// made). The roll, in two passes over the nodes, each a SIGHUP after the
// secret file changed (see the README):
//
//  1. "OLD\nNEW": present the old secret, accept the new one too;
//  2. "NEW": present the new one, accept it only. Every node accepts the
//     new one since pass 1, and a node not rolled yet still presents the
//     old one, which a rolled node refuses: its routes come from the
//     rolled side (routes are made from both sides), and its own NATS is
//     its own server.

// Secrets is the fleet's transport secret as a node holds it while it
// rolls: the one it presents and the ones it accepts. Safe for concurrent
// use.
type Secrets struct {
	mu      sync.RWMutex
	present string
	accept  []string
}

// NewSecrets holds present, and accepts it and also.
func NewSecrets(present string, also ...string) *Secrets {
	s := &Secrets{}
	s.set(present, also)
	return s
}

// Present is the secret this node presents.
func (s *Secrets) Present() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.present
}

// Accepted are the secrets this node accepts, the presented one first.
func (s *Secrets) Accepted() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.accept)
}

// accepts reports whether given is one of the secrets accepted, in time
// that does not tell how much of one it matched.
func (s *Secrets) accepts(given string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ok := 0
	for _, a := range s.accept {
		ok |= subtle.ConstantTimeCompare([]byte(a), []byte(given))
	}
	return ok == 1 && given != ""
}

// set holds present and accepts it and also, and reports whether the
// presented secret changed.
func (s *Secrets) set(present string, also []string) bool {
	accept := []string{present}
	for _, a := range also {
		if a != "" && !slices.Contains(accept, a) {
			accept = append(accept, a)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.present != present
	s.present, s.accept = present, accept
	return changed
}

// secretClients admits NATS clients that present an accepted secret as
// their token (server.Authentication).
type secretClients struct{ s *Secrets }

func (a secretClients) Check(c server.ClientAuthentication) bool {
	return a.s.accepts(c.GetOpts().Token)
}

// secretRoutes admits routes that present user RouteUser with an
// accepted secret (server.Authentication).
type secretRoutes struct{ s *Secrets }

func (a secretRoutes) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	return subtle.ConstantTimeCompare([]byte(o.Username), []byte(RouteUser)) == 1 && a.s.accepts(o.Password)
}

// rollingAuth sets the server's authentication from cfg: a fixed token
// without Secrets; with them, routes and (unless cfg.ClientToken)
// clients are checked against the secrets as they are when each
// connection is made.
func rollingAuth(opts *server.Options, cfg ServerConfig) {
	if cfg.Secrets == nil {
		if token := cmp.Or(cfg.ClientToken, cfg.Secret); token != "" {
			opts.Authorization = token
		}
		return
	}
	if cfg.ClusterListen != "" {
		opts.CustomRouterAuthentication = secretRoutes{cfg.Secrets}
	}
	if cfg.ClientToken != "" {
		opts.Authorization = cfg.ClientToken
	} else {
		opts.CustomClientAuthentication = secretClients{cfg.Secrets}
	}
}

// withRoutePassword is opts with its routes presenting secret: the route
// URLs' password and the cluster's (for routes learned from peers).
func withRoutePassword(opts *server.Options, secret string) *server.Options {
	o := opts.Clone()
	if o.Cluster.Username == "" {
		return o
	}
	o.Cluster.Password = secret
	if o.Cluster.Port == 0 {
		o.Cluster.Port = -1 // the port the server took (ReloadOptions)
	}
	for i, r := range o.Routes {
		u := *r
		u.User = url.UserPassword(RouteUser, secret)
		o.Routes[i] = &u
	}
	return o
}

// RotateSecret changes the fleet's transport secret this node presents
// and accepts, while it runs: present is what it presents from now on
// (to its peers' routes as they are made, and to NATS at its next
// connection) and accepts, with also. Established connections stay up.
// On an external NATS it is only the token presented at the next
// connection. Errors: invalid (a node started without a fleet secret),
// unavailable (the embedded server refused the reload).
func (f *Fleet) RotateSecret(present string, also []string) error {
	if f.secrets == nil {
		return leasehold.Errorf(leasehold.KindInvalid, "this node started without a fleet secret (--nats-secret-file): restart it to give one")
	}
	if present == "" {
		return leasehold.Errorf(leasehold.KindInvalid, "the fleet secret to present is empty")
	}
	if !f.secrets.set(present, also) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv == nil || f.srvOpts == nil || f.srvOpts.Cluster.Username == "" {
		return nil
	}
	next := withRoutePassword(f.srvOpts, present)
	// The reload takes next as its own; the next rotation starts from a
	// copy of it.
	keep := next.Clone()
	if err := f.srv.ReloadOptions(next); err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "reloading the embedded NATS server's routes with the new secret: %v", err)
	}
	f.srvOpts = keep
	return nil
}

// String says which secrets a node holds, without them: for the log.
func (s *Secrets) String() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return fmt.Sprintf("presenting 1, accepting %d", len(s.accept))
}

// present is the secret this node presents now, "" without one.
func (f *Fleet) present() string {
	if f.secrets == nil {
		return ""
	}
	return f.secrets.Present()
}
