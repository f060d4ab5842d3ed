package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/service"
)

// The fleet's copies. A fleet aims at Config.Replicas copies of each of
// its streams and buckets (its target, three on a fleet of three), but a
// JetStream cluster can place a copy only on a server that is up: two
// nodes of three up would wait for the third before they could serve. So the join places as many copies as the servers up
// can hold, never fewer than a majority of the target (two of three;
// one only when one is the target), and the copy raiser, a part of the
// fleet, raises them to the target as the servers come. No join changes
// the copies a stream has (keepCopies).
//
// A majority is safe: JetStream acknowledges a write (an event, a
// claim's compare-and-set) once a quorum of the stream's copies holds
// it, and the quorum of two copies is both. While the fleet runs on two,
// the loss of either server stops the stream (a 503, the claims'
// renewals unanswered) but loses nothing acknowledged; raised to three,
// the new copy catches up from the leader before it counts, and the
// stream then survives the loss of any one server. One copy of a
// three-server fleet is never placed: a write it acknowledged would be
// lost with that one server's disk.

// majorityOf is the fewest copies a fleet aiming at target places: a
// quorum of target's servers.
func majorityOf(target int) int { return target/2 + 1 }

// unplaced reports whether err is JetStream refusing copies it has no
// servers up to place (no suitable peers): fewer copies may do.
func unplaced(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrClusterNoPeers
}

// keepCopies is the copies to ask of stream: want for a new stream, and
// an existing stream's own, so that no join changes them: lowering them
// is nobody's, raising them the copy raiser's (which says so). Errors:
// the stream's info unanswered (not its absence).
func keepCopies(ctx context.Context, js jetstream.JetStream, stream string, want int) (int, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, nil
	}
	if err != nil {
		return 0, fmt.Errorf("copies of %s: %w", stream, err)
	}
	return s.CachedInfo().Config.Replicas, nil
}

// createBucket creates or updates the key-value bucket of cfg, with the
// copies it asks if new, else its own (keepCopies).
func createBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	copies, err := keepCopies(ctx, js, "KV_"+cfg.Bucket, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	cfg.Replicas = copies
	return js.CreateOrUpdateKeyValue(ctx, cfg)
}

// place calls create with the copies to ask, first the target, then one
// fewer at each refusal to place them, down to a majority of the target.
// Errors: create's last.
func place(ctx context.Context, target int, create func(ctx context.Context, copies int) error) error {
	for copies := target; ; copies-- {
		err := create(ctx, copies)
		if err == nil || !unplaced(err) || copies <= majorityOf(target) {
			return err
		}
	}
}

// copiesRaiseEvery is how often the copy raiser looks at the streams
// below the target: the servers missing may come at any time, and each
// look is one stream info request per stream.
const copiesRaiseEvery = 2 * time.Second

// copyRaiser is the fleet's part that raises its streams and buckets
// placed with fewer copies than the target (see place) once the
// servers are up to hold them; once every stream has them, it rests.
type copyRaiser struct {
	service.Base
	js      jetstream.JetStream
	streams []string
	target  int
	every   time.Duration
	log     *slog.Logger
}

// newCopyRaiser raises streams to target copies.
func newCopyRaiser(js jetstream.JetStream, streams []string, target int, log *slog.Logger) *copyRaiser {
	return &copyRaiser{js: js, streams: streams, target: target, every: copiesRaiseEvery, log: log}
}

// Start looks at the streams now, then every r.every until all have the
// target.
func (r *copyRaiser) Start(ctx context.Context) error { return r.Begin(ctx, r.run) }

func (r *copyRaiser) run(ctx context.Context) error {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for !r.raise(ctx) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// raise asks each stream below the target for the target's copies and
// reports whether every stream has them. A refusal to place them (the
// servers are not up yet) is waited out; other failures are told at
// debug, since the next look tries again.
func (r *copyRaiser) raise(ctx context.Context) bool {
	all := true
	raised := map[int][]string{} // by the copies a stream had
	for _, name := range r.streams {
		cctx, cancel := context.WithTimeout(ctx, engineProbeWait)
		from, err := r.raiseOne(cctx, name)
		cancel()
		switch {
		case err != nil:
			all = false
			if !unplaced(err) {
				r.log.Debug("peers: raising stream copies", "stream", name, "err", err)
			}
		case from > 0:
			raised[from] = append(raised[from], name)
		}
	}
	for _, from := range slices.Sorted(maps.Keys(raised)) {
		r.log.Info(fmt.Sprintf("peers: stream copies raised %d → %d", from, r.target), "streams", raised[from])
	}
	return all
}

// raiseOne raises stream name to the target, keeping the rest of its
// config, and returns the copies it had if it raised them (0 if it had
// the target or more).
func (r *copyRaiser) raiseOne(ctx context.Context, name string) (int, error) {
	s, err := r.js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	cfg := s.CachedInfo().Config
	from := cfg.Replicas
	if from >= r.target {
		return 0, nil
	}
	cfg.Replicas = r.target
	if _, err := r.js.UpdateStream(ctx, cfg); err != nil {
		return 0, err
	}
	return from, nil
}
