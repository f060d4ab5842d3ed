package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// A worker of a fleet may know several of its nodes. It leases at the
// first one it can reach, in the order given, and passes over a node that
// cannot be reached (connection refused or reset, a timeout, 502, 503 or
// 504) for Worker.Reprobe, after which leases try it again: the worker
// comes back to the node it prefers once it is up. A group is always
// worked at the node that granted it: its fence and id are that node's
// catalog's, so every holder call of the group goes there, and a node that
// stays unreachable for a lease TTL ends the hold (the group is forgotten,
// as a lost lease is). The node that takes the group over grants it anew,
// and a grant of a group the worker still holds from another node ends
// that older hold first, so a group is never worked twice at once.

// DefaultReprobe is how long a node that could not be reached is passed
// over before leases try it again.
const DefaultReprobe = 15 * time.Second

// maxNodeURLs bounds the node URLs a worker takes: a fleet is a few nodes.
const maxNodeURLs = 32

// ParseURLs reads a comma-separated list of node URLs (--url, or
// $LEASEHOLD_URL): each http:// or https:// with a host, trailing slashes
// dropped. Blank entries are errors, as are duplicates.
func ParseURLs(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	if len(parts) > maxNodeURLs {
		return nil, fmt.Errorf("%d node URLs; at most %d", len(parts), maxNodeURLs)
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		raw := strings.TrimSpace(p)
		if raw == "" {
			return nil, fmt.Errorf("URL %d of %d is empty: give node URLs separated by commas, e.g. http://10.0.0.1:8080,http://10.0.0.2:8080", i+1, len(parts))
		}
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%q is not a URL (%v): give the node's URL, e.g. http://127.0.0.1:8080", raw, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("%q has no http:// or https:// scheme: give the node's URL, e.g. http://127.0.0.1:8080", raw)
		case u.Host == "":
			return nil, fmt.Errorf("%q names no host: give the node's URL, e.g. http://127.0.0.1:8080", raw)
		}
		raw = strings.TrimRight(raw, "/")
		if seen[raw] {
			return nil, fmt.Errorf("%q is given twice", raw)
		}
		seen[raw] = true
		out = append(out, raw)
	}
	return out, nil
}

// Unreachable reports whether err says the node could not serve the call
// at all, so another node of the fleet should be asked: no connection, a
// timeout, or 502, 503 or 504 (a node not ready, or a proxy in front of a
// dead one).
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		switch he.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return leasehold.KindOf(err) == leasehold.KindUnavailable
}

// fleetNode is one node a worker leases at, and until when it is passed
// over.
type fleetNode struct {
	c     *Client
	lease *Client // c with fewer retries: another node is asked instead
	down  time.Time
}

// nodes are the nodes a worker leases at, in order of preference.
type nodes struct {
	log     *slog.Logger
	reprobe time.Duration

	mu   sync.Mutex
	all  []*fleetNode
	last *fleetNode // the node the last lease was answered by
}

func newNodes(first *Client, more []*Client, reprobe time.Duration, log *slog.Logger) *nodes {
	ns := &nodes{log: log, reprobe: reprobe}
	for _, c := range append([]*Client{first}, more...) {
		lc := *c
		if len(more) > 0 {
			// One retry, not five: the next node is the better retry.
			lc.Retry.Attempts = min(max(c.Retry.Attempts, 1), 2)
		}
		ns.all = append(ns.all, &fleetNode{c: c, lease: &lc})
	}
	return ns
}

// lease asks the nodes in order, passing over those marked down, for a
// grant; every holder call of the grant goes to the node returned with it. Nil, nil is nothing to lease at
// the node that answered. When every node is down it tries them all
// anyway, since passing over all of them would lease nothing.
func (ns *nodes) lease(ctx context.Context) (*Grant, *Client, error) {
	ns.mu.Lock()
	now := time.Now()
	var order []*fleetNode
	for _, n := range ns.all {
		if !now.Before(n.down) {
			order = append(order, n)
		}
	}
	if len(order) == 0 {
		order = ns.all
	}
	ns.mu.Unlock()
	var lerr error
	for _, n := range order {
		g, err := n.lease.Lease(ctx)
		if ctx.Err() != nil {
			return nil, nil, context.Cause(ctx)
		}
		if Unreachable(err) {
			ns.markDown(n, err, "node unreachable; leasing at the next node of the fleet")
			lerr = err
			continue
		}
		if len(ns.all) > 1 && (errors.Is(err, leasehold.ErrUnauthorized) || errors.Is(err, leasehold.ErrForbidden)) {
			// A token registered at one node of a fleet is let in at
			// another once that one has folded it: a node behind (or
			// rebuilding, or holding another node of the name) is passed
			// over too. Refused by every node, the token is refused.
			ns.markDown(n, err, "node refuses the token; leasing at the next node of the fleet")
			lerr = err
			continue
		}
		ns.answered(n)
		return g, n.c, err
	}
	return nil, nil, lerr
}

// markDown passes n over for the reprobe time, saying why once per outage.
func (ns *nodes) markDown(n *fleetNode, err error, why string) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	wasUp := n.down.IsZero()
	n.down = time.Now().Add(ns.reprobe)
	if wasUp && len(ns.all) > 1 {
		ns.log.Warn(why, "url", n.c.URL, "retry_after", ns.reprobe, "err", err)
	}
}

// answered notes that n answered a lease: a node back from an outage is
// said so once, and so is a move to another node.
func (ns *nodes) answered(n *fleetNode) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if !n.down.IsZero() {
		n.down = time.Time{}
		ns.log.Info("node reachable again; leasing there", "url", n.c.URL)
	}
	if ns.last != nil && ns.last != n && len(ns.all) > 1 {
		ns.log.Info("leasing at another node of the fleet", "url", n.c.URL, "was", ns.last.c.URL)
	}
	ns.last = n
}
