package appliance

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
)

// WindowKept is what a fleet says of a window snapshot just stored here:
// whether it is in the fleet's object store, where a node taking the
// group over reads it.
type WindowKept struct {
	// Replicated: the window, or a newer one of the group, is in the
	// fleet's object store at its copies.
	Replicated bool
	// In, when not replicated, is an estimate of how long until it is
	// (0: unknown, as for a node with no peer up).
	In time.Duration
	// Why, when not replicated, says why, for the log.
	Why string
}

// WindowKeeper is a Fleet that replicates windows: an upload is answered
// only once KeepWindow has said whether its window is kept.
type WindowKeeper interface {
	// KeepWindow waits, for a bounded time, until snap, the window of
	// group just stored here, is in the fleet's object store.
	KeepWindow(ctx context.Context, group string, snap leasehold.Snapshot) WindowKept
}

// KeepWindow asks the node's fleet whether snap, group groupID's window
// just stored here, is kept by the fleet (see WindowKeeper), waiting as it
// does; nil for a node alone, whose catalog is the only copy there is.
func (s *Snapshots) KeepWindow(ctx context.Context, groupID int64, snap leasehold.Snapshot) *WindowKept {
	k, ok := s.claims.fleet.(WindowKeeper)
	if !ok || s.claims.alone {
		return nil
	}
	g, err := s.db.GroupByID(ctx, groupID)
	if err != nil {
		return &WindowKept{Why: leasehold.ErrorMessage(err)}
	}
	kept := k.KeepWindow(ctx, g.Name, snap)
	if !kept.Replicated {
		s.log.Warn("snapshots: answering an upload whose window is not in the fleet's object store yet", "group", g.Name, "why", kept.Why, "estimate", kept.In)
	}
	return &kept
}
