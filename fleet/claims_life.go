package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
)

// newLife names a life: random, so no two lives of a node share a name.
func newLife() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// begin starts a new life of this node. A life of its name that still
// stands, and is not one this process began, is left alone: it is an
// earlier run of this node that may still be running (a restart that
// overlaps the old process), or another node under the same name, and its
// claims stand until it lapses. That is a conflict, and this node holds
// nothing until then (at most a TTL after that life's last renewal); Start
// tries again every tick. first only makes the first attempt say so at
// info level.
func (c *Claims) begin(ctx context.Context, first bool) error {
	life := newLife()
	key := ClaimKey(c.node)
	from := c.now()
	val, err := c.lifeValue(life, from)
	if err != nil {
		return err
	}
	// Minted before it is written: a write whose answer is lost leaves it
	// in the key, and it must read as this process's own.
	c.mu.Lock()
	c.minted[life] = true
	c.mu.Unlock()
	rev, err := createOnly(ctx, c.lives, key, val)
	if err != nil && claimAnswered(err) {
		var st lifeRead
		st, err = c.readLife(ctx, c.node)
		switch {
		case err != nil:
		case !st.found:
			// None, or removed: written over the removal's marker, if any.
			rev, err = c.lives.Update(ctx, key, val, st.rev)
		case c.mintedLife(st.life.Life) || c.lapsedAt(st.at) || st.forged:
			// This process's own (given up past its margin, or a write
			// whose answer was lost), or past its TTL by the server's
			// timestamp though not yet removed, or not signed by this
			// node: nobody holds its claims.
			rev, err = c.lives.Update(ctx, key, val, st.rev)
		default:
			err := leasehold.Errorf(leasehold.KindConflict, "a life of node name %q stands (an earlier run still running or just stopped, or another node under this name): holding no groups until it lapses, at most %s", c.node, c.ttl+c.margin)
			if first {
				c.log.Info("claims: " + err.Error())
			}
			return err
		}
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "beginning node %q's life in the fleet: %v", c.node, err)
	}
	c.mu.Lock()
	c.life, c.lifeRev, c.lifeFrom, c.lifeBegan = life, rev, from, from
	c.mu.Unlock()
	return nil
}

// mintedLife reports whether life is one this process began.
func (c *Claims) mintedLife(life string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return life != "" && c.minted[life]
}

// lapsedAt reports whether a write the server stamped at ran past its
// TTL, plus the margin for the server's clock against ours: the server
// removes such keys by itself, only a little late.
func (c *Claims) lapsedAt(at time.Time) bool {
	return !c.now().Before(at.Add(c.ttl + c.margin))
}

// lifeRead is a node's life key as the lives stream's leader holds it.
type lifeRead struct {
	found bool
	life  Life
	rev   uint64    // the key's revision (a delete's, when not found)
	at    time.Time // the server's timestamp of the write
	// forged is a value not signed by the node it names (or not by the
	// node whose key it is): it stands for no life, and the node whose
	// key it is writes its own over it.
	forged bool
}

// readLife reads node's life key from the lives stream's leader (see
// lastOnLeader).
func (c *Claims) readLife(ctx context.Context, node string) (lifeRead, error) {
	m, err := c.lastOnLeader(ctx, LivesBucket, ClaimKey(node))
	if err != nil {
		return lifeRead{}, fmt.Errorf("reading the life of node %q: %w", node, err)
	}
	if !m.found || m.deleted {
		// None, deleted or purged: no life stands (rev is the marker's,
		// for a write over it).
		return lifeRead{rev: m.seq}, nil
	}
	st := lifeRead{found: true, rev: m.seq, at: m.at}
	subject := kvSubject(LivesBucket, ClaimKey(node))
	err = c.ring.openValue(subject, m.data, &st.life)
	if err == nil && st.life.Node != node {
		err = refused(refusedWrongOrigin, st.life.Node, "node %q wrote the life of node %q", st.life.Node, node)
	}
	if err != nil {
		// Unreadable, or not signed by the node it names: it stands for
		// no life.
		st.life = Life{}
		if _, ok := errors.AsType[*RefusedError](err); ok {
			c.ring.refuse("life", subject, err)
			st.forged = true
		}
	}
	return st, nil
}

// createOnly writes key in kv only if it holds no write (none, or
// removed by the bucket's TTL): the server's answer to a key that exists
// is a JetStream API error (claimAnswered), and the caller reads the key
// from the leader (lastOnLeader). KeyValue.Create is not used: on a key
// that exists it first reads the key by a direct get, which any replica
// may take, and a replica cut off without a FIN (a paused or partitioned
// node's server, its route not yet found dead) takes it and never
// answers: the read waited its whole timeout, 5 s, and Create gave the
// same answer after it. A fault run on a loaded machine showed a
// takeover's claims stalled 5 s each so.
func createOnly(ctx context.Context, kv jetstream.KeyValue, key string, val []byte) (uint64, error) {
	return kv.Update(ctx, key, val, 0)
}

// leaderEntry is a key's last write as a bucket's stream leader holds it.
type leaderEntry struct {
	found   bool      // a write of the key stands in the stream
	deleted bool      // that write is a delete or purge marker
	seq     uint64    // its revision
	data    []byte    // its value
	at      time.Time // the server's timestamp of the write
}

// lastOnLeader reads key's last write in bucket from the bucket stream's
// leader. A key-value Get is a direct get, which any replica may answer,
// and the nearest one answers first: a lagging replica (a node just
// resumed, or one an election left behind) shows an older write of a live
// node's life, or none, so the node would look lapsed; and an older
// revision of a claim, so a takeover written over it is refused as a
// revision mismatch every time. The leader has every write it
// acknowledged.
//
// It waits at most lifeReadTimeout, whatever ctx allows: a request the
// server takes and never answers (its leader lost in an election, a route
// cut) would otherwise hold a caller without a deadline, such as the offer
// of disowned groups, for good, and the node would never take a group on
// again.
func (c *Claims) lastOnLeader(ctx context.Context, bucket, key string) (leaderEntry, error) {
	return leaderLast(ctx, c.nc, "KV_"+bucket, "$KV."+bucket+"."+key)
}

// leaderLast reads the last message on subject in stream from the
// stream's leader (see Claims.lastOnLeader), waiting at most
// lifeReadTimeout.
func leaderLast(ctx context.Context, nc *nats.Conn, stream, subject string) (leaderEntry, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return leaderEntry{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, lifeReadTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return leaderEntry{}, err
	}
	var resp struct {
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64    `json:"seq"`
			Hdrs []byte    `json:"hdrs"`
			Data []byte    `json:"data"`
			Time time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return leaderEntry{}, err
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == jsErrNoMessageFound {
			return leaderEntry{}, nil
		}
		return leaderEntry{}, fmt.Errorf("%s (%d)", resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return leaderEntry{}, errors.New("an empty answer")
	}
	return leaderEntry{
		found:   true,
		deleted: bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")),
		seq:     resp.Message.Seq,
		data:    resp.Message.Data,
		at:      resp.Message.Time,
	}, nil
}

// liveLocked reports whether this node's life is held at now: begun,
// renewed within TTL − Margin, and Claims not stopped. c.mu is held.
func (c *Claims) liveLocked(now time.Time) bool {
	return c.life != "" && !c.Stopped() && now.Before(c.lifeFrom.Add(c.ttl-c.margin))
}

// Renew writes this node's life again, so every claim it holds stands a
// TTL from the write's start. Start calls it every TTL/6. A life found
// lapsed or taken over has lost every claim: Losses is told of each and
// a new life begins. A node without a life (its last went past its margin)
// begins one. Errors: unavailable NATS (claims are held until the margin).
func (c *Claims) Renew(ctx context.Context) error {
	c.mu.Lock()
	life, rev := c.life, c.lifeRev
	c.mu.Unlock()
	if life == "" {
		return c.begin(ctx, false)
	}
	key := ClaimKey(c.node)
	from := c.now()
	val, err := c.lifeValue(life, from)
	if err != nil {
		return err
	}
	next, err := c.lives.Update(ctx, key, val, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A renewal of ours whose answer was lost moved the revision too;
		// only a life found gone or another's ends this one.
		st, rerr := c.readLife(ctx, c.node)
		switch {
		case rerr != nil:
			err = rerr
		case st.found && (st.life.Life == life || st.forged):
			// This life's own write whose answer was lost, or a forged
			// value written over it: this life goes on over it. Peers
			// took the forged value for no life and may have taken some
			// claims over; the watch drops those.
			next, err = c.lives.Update(ctx, key, val, st.rev)
		default:
			c.loseAll(life, "this node's life lapsed or was taken over")
			return c.begin(ctx, false)
		}
	}
	if err != nil {
		c.renewalFailures.Inc()
		return leasehold.Wrap(leasehold.KindUnavailable, err, "renewing node %q's life in the fleet: %v", c.node, err)
	}
	c.mu.Lock()
	if c.life == life {
		c.lifeRev, c.lifeFrom = next, from
	}
	c.mu.Unlock()
	return nil
}

// claimMarginMax caps the default margin: clocks kept by NTP agree to
// milliseconds, and a caller acts on Held within one catalog write, so a
// margin of a quarter of a long TTL would only delay takeovers (a cut-off
// node's groups are taken over TTL + margin after its last renewal).
const claimMarginMax = 2 * time.Second

// ClaimTTLFloor is the shortest claim TTL at which a leader election in
// the lives bucket costs no node its claims (see renewEvery).
const ClaimTTLFloor = 18 * time.Second

// renewEvery is how often the life is renewed, and how long one renewal
// may wait on NATS. A leader election in the lives bucket (its leader's
// node killed or cut off) blocks every write for 4–9 s; the life is held
// until TTL − margin (3/4 TTL) after its last renewal, so renewing every
// TTL/6 leaves 7/12 of the TTL for one to land after the election: an
// election costs no claim from a claim TTL of about 18 s (the default is
// 30 s). Writes are one small key a node, so the rate costs nothing.
func (c *Claims) renewEvery() time.Duration { return c.ttl / 6 }

// Peers is how many other nodes' lives stood in the fleet when last
// counted (every TTL/6): its live peers. The bucket's keys expire a TTL
// after their last renewal, so a dead peer stops counting by itself.
func (c *Claims) Peers() int { return int(c.peers.Load()) }

// countPeers counts the other nodes' lives every TTL/6 until ctx ends; a
// count that fails keeps the last one.
func (c *Claims) countPeers(ctx context.Context) {
	t := time.NewTicker(c.renewEvery())
	defer t.Stop()
	own := ClaimKey(c.node)
	for {
		lctx, cancel := context.WithTimeout(ctx, c.renewEvery())
		keys, err := c.lives.ListKeys(lctx)
		if err == nil {
			n := int64(0)
			for k := range keys.Keys() {
				if k != own {
					n++
				}
			}
			c.peers.Store(n)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lifeDue reports whether this node's life is due for renewal (its last
// write is TTL/6 old or more) or is to begin.
func (c *Claims) lifeDue() bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.life == "" || !now.Before(c.lifeFrom.Add(c.renewEvery()))
}

// tellLapsed ends this node's life once it went unrenewed past its
// margin: every claim is given up (Losses told of each) and the next
// renewal begins a new life. The claims written in the old one stand for
// no one from then on, so any node, this one too, may take them over.
func (c *Claims) tellLapsed() {
	now := c.now()
	c.mu.Lock()
	life := c.life
	lapsed := life != "" && !now.Before(c.lifeFrom.Add(c.ttl-c.margin))
	c.mu.Unlock()
	if lapsed {
		c.loseAll(life, "this node's life went unrenewed past its margin")
	}
}

// loseAll ends life, if it is still this node's, and gives up every
// claim held in it.
func (c *Claims) loseAll(life, why string) {
	c.mu.Lock()
	if c.life != life {
		c.mu.Unlock()
		return
	}
	c.life = ""
	groups := make([]string, 0, len(c.held))
	for g := range c.held {
		groups = append(groups, g)
	}
	c.held = map[string]*claimState{}
	c.mu.Unlock()
	c.log.Warn("claims: claims lost", "why", why, "claims", len(groups))
	c.lostCount.Add(float64(len(groups)))
	c.tellLost(groups...)
}

// lifeValue is this node's life, signed.
func (c *Claims) lifeValue(life string, at time.Time) ([]byte, error) {
	return c.id.signValue(kvSubject(LivesBucket, ClaimKey(c.node)), Life{Node: c.node, Life: life, At: at.UTC(), Key: c.id.PublicKey()})
}
