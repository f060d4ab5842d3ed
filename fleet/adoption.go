package fleet

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// adoption is the fleet's Adoption: a group won from a peer is taken up
// with its newest replicated window, once this node has folded what the
// peer last published; a group's claim is let go only once everything of
// it has left this node.
type adoption struct {
	db        *store.DB
	js        jetstream.JetStream
	records   jetstream.KeyValue // the publish records
	snapshots *Replicator
	log       *slog.Logger
	ring      *Keyring // checks the publish records read
}

// Settled reports whether all of group has left this node: its events
// published and its newest snapshot replicated. Until then its claim is
// kept even when it is idle.
func (f *adoption) Settled(ctx context.Context, group string) bool {
	if f.snapshots.Pending(group) {
		return false
	}
	unsent, err := f.db.Unpublished(ctx, group)
	return err == nil && !unsent
}

// Adopt brings in the newest replicated snapshot of a peer's group this
// node just won, before it is owned here. Its only error that lets the
// group be owned all the same is a replicated window that can never be
// read; every other one (a publish record or the catalog not read now,
// the fold behind) is ErrBehind: the claim is let go and tried again. A
// short fault run once had a group owned with no window at all because
// the last owner's publish record could not be read in time (NATS
// electing leaders after a kill), though a worker had been answered its
// window kept (check 4).
func (f *adoption) Adopt(ctx context.Context, group string) error {
	err := f.adopt(ctx, group)
	if err == nil || errors.Is(err, ErrBehind) || errors.Is(err, errWindowUnreadable) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrBehind, err)
}

// errWindowUnreadable marks a replicated window that can never be read
// (not signed by the fleet, its metadata broken, over the size limit):
// the group is adopted without it.
var errWindowUnreadable = errors.New("its replicated window can never be read")

// adopt is Adopt, any error as it came.
func (f *adoption) adopt(ctx context.Context, group string) error {
	g, err := f.db.GroupByName(ctx, group)
	if err != nil {
		return err
	}
	origin, err := f.db.GroupOrigin(ctx, g.ID)
	if err != nil {
		return err
	}
	if origin == "" {
		// The catalog has the group as this node's own, but it may only
		// not have folded yet what happened to it since: handed to a peer
		// and on from there while this node's fold was behind (a
		// partition's heal), its newest window is a peer's in the bucket.
		if origin, err = f.movedOn(ctx, g); err != nil || origin == "" {
			return err
		}
	}
	if err := f.caughtUp(ctx, origin); err != nil {
		return err
	}
	snap, err := f.snapshots.Import(ctx, group)
	switch k := leasehold.KindOf(err); {
	case err == nil:
	case k == leasehold.KindUnprocessable || k == leasehold.KindTooLarge:
		// A replicated window that can never be read: adopted without it.
		return fmt.Errorf("%w: %w", errWindowUnreadable, err)
	default:
		// The window is there but cannot be read now (NATS unavailable,
		// a download past its allowance or stalled, see snapshotStall):
		// adopting without it would lose every id it holds from the
		// group's final window, so not now.
		return fmt.Errorf("%w: its replicated window could not be read: %v", ErrBehind, err)
	}
	if snap != nil {
		f.log.Info("peers: adopted a group with its replicated snapshot", "group", group, "from", origin, "next", snap.Next)
	}
	return nil
}

// caughtUpWait bounds how long an adoption waits for the fold to reach
// the last owner's publish record.
const caughtUpWait = 5 * time.Second

// caughtUp waits until this node has folded the stream through origin's
// publish record, so what it adopts is the state origin last published;
// ErrBehind if the fold does not get there within caughtUpWait. A record
// past the stream's end (the stream was made again) vouches for nothing
// and is not waited for.
func (f *adoption) caughtUp(ctx context.Context, origin string) error {
	e, err := f.records.Get(ctx, origin)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // origin never published
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnavailable, err, "reading %q's publish record: %v", origin, err)
	}
	// A record not signed by origin vouches for nothing, and is not
	// waited for.
	var rec PublishRecord
	if f.ring.openValue(kvSubject(PublishedBucket, origin), e.Value(), &rec) != nil || rec.Node != origin {
		return nil
	}
	deadline := time.Now().Add(caughtUpWait)
	for {
		_, mark, err := f.db.FoldMark(ctx)
		if err != nil {
			return err
		}
		if mark >= rec.Seq {
			return nil
		}
		if time.Now().After(deadline) {
			stream, err := f.js.Stream(ctx, StreamName)
			if err == nil {
				if info, err := stream.Info(ctx); err == nil && info.State.LastSeq < rec.Seq {
					return nil
				}
			}
			return ErrBehind
		}
		sleep(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// movedOn names the node whose window of group, this node's own in its
// catalog, is in the bucket and newer than this node's (ahead of it, or
// stored no earlier): the group went on there after this node had it,
// and a worker there may have been answered that window is kept, so the
// group is adopted from that node as from its owner. "" when the bucket
// holds no window, this node's own, one not newer, or one stored before
// the group was made here (a group of that name deleted before); a window
// not signed by a node of the fleet names no one (Import would refuse it).
// The bucket is read at its stream's leader (leaderInfo), not by the
// object store's direct get: this node's own replica, behind after a
// partition or a pause, showed no window or this node's own older one,
// and the group was owned here from that older window though a peer's
// worker had been answered a newer one kept (a short fault run, check 4).
// Errors: ErrBehind when the bucket cannot be read (owning the group
// without looking could resume it from an older window).
func (f *adoption) movedOn(ctx context.Context, g leasehold.Group) (string, error) {
	info, err := f.snapshots.leaderInfo(ctx, g.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: its replicated window could not be looked up: %v", ErrBehind, err)
	}
	origin := info.Metadata[SnapshotMetaOrigin]
	if origin == "" || origin == f.snapshots.node {
		return "", nil
	}
	next, digest, err := f.snapshots.windowMeta(info)
	if err != nil {
		return "", nil
	}
	at, err := time.Parse(time.RFC3339Nano, info.Metadata[SnapshotMetaAt])
	if err != nil || at.Before(g.CreatedAt) {
		return "", nil // of a group of that name deleted before this one was made
	}
	local, err := f.db.Snapshot(ctx, g.ID)
	if err != nil {
		return "", err
	}
	switch {
	case local == nil:
		return origin, nil
	case local.SHA256 == hex.EncodeToString(digest):
		return "", nil
	case next > local.Next || !at.Before(local.At):
		return origin, nil
	}
	return "", nil
}
