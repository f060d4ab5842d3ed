package client

import (
	"maps"
	"slices"
)

// HeldGroups are the names of the groups the worker holds now, sorted:
// what a worker's metrics bound their per-group series to.
func (w *Worker) HeldGroups() []string {
	w.tenuresMu.Lock()
	defer w.tenuresMu.Unlock()
	return slices.Sorted(maps.Keys(w.tenures))
}
