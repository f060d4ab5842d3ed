package web

import (
	"context"

	"github.com/leasehold/leasehold"
)

// snapshotStored is a snapshot upload's answer: what the node stored and,
// on a node in a fleet, whether the fleet's object store has it, where a
// node taking the group over resumes from (appliance.WindowKeeper).
type snapshotStored struct {
	leasehold.SnapshotRef
	Replicated *bool `json:"replicated,omitempty"`
	// ReplicatedInS, when not replicated, estimates the seconds until it is.
	ReplicatedInS *int64 `json:"replicated_in_s,omitempty"`
}

// keptAnswer is the answer to the upload that stored snap as group
// groupID's window: in a fleet only once the window is replicated, or the
// wait for it has passed.
func (s *Server) keptAnswer(ctx context.Context, groupID int64, snap leasehold.Snapshot) snapshotStored {
	out := snapshotStored{SnapshotRef: leasehold.SnapshotRef{Next: snap.Next, Size: snap.Size, SHA256: snap.SHA256}}
	kept := s.node.Snapshots.KeepWindow(ctx, groupID, snap)
	if kept == nil {
		return out
	}
	out.Replicated = &kept.Replicated
	if !kept.Replicated && kept.In > 0 {
		secs := int64(kept.In.Seconds())
		out.ReplicatedInS = &secs
	}
	return out
}
