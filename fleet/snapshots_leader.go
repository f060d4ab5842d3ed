package fleet

import (
	"context"
	"encoding/base64"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"
)

// leaderInfo is group's window info in the snapshots bucket as the
// bucket stream's leader holds it: what a node adopting the group must
// resume from. ObjectStore.GetInfo reads it by a direct get, which the
// nearest replica answers, and a replica behind (this node's own, just
// resumed from a pause or back from a partition) answers an older
// window: fault runs under CPU burners had a group adopted from a window
// older than one a worker had been answered kept (next 401 where 1,451
// was kept). Errors: jetstream.ErrObjectNotFound (none, or deleted),
// jetstream.ErrBadObjectMeta, NATS errors.
func (r *Replicator) leaderInfo(ctx context.Context, group string) (*jetstream.ObjectInfo, error) {
	subject := "$O." + SnapshotsBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(group))
	e, err := leaderLast(ctx, r.pub.Conn(), snapshotStream, subject)
	if err != nil {
		return nil, err
	}
	if !e.found {
		return nil, jetstream.ErrObjectNotFound
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(e.data, &info); err != nil {
		return nil, jetstream.ErrBadObjectMeta
	}
	if info.Deleted {
		return nil, jetstream.ErrObjectNotFound
	}
	info.ModTime = e.at
	return &info, nil
}
