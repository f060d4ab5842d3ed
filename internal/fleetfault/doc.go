// Package fleetfault is a Jepsen-style fault harness for a leasehold
// fleet: three `leasehold serve` processes, each in its own network
// namespace the harness makes (veth pairs to two bridges in a hub
// namespace: one network for HTTP, one for the NATS routes), recording
// workers driving each node's HTTP API, and faults one at a time — SIGKILL
// and a restart on the same data, SIGSTOP past the claim TTL and SIGCONT,
// a partition that takes one node's route link down while its HTTP stays
// up.
//
// Every call is recorded (node, worker, lease, group, fence, call, range,
// send and receive time on one monotonic clock, status), and Check holds
// the history and the fleet's final state to the promise "one group, one
// holder": no certain double holding (an acknowledged holder call of one
// lease between two acknowledged calls of another lease of the same
// group), no acknowledged finish lost, every node agreeing at the end, and
// windows that new holders resume from the newest acknowledged upload and
// that, at the end, cover every planned id as one uninterrupted pass
// would. It also figures each fault's takeover latency.
//
// The upgrade mode (Config.FromBin, upgrade.go) is a rolling upgrade
// under the same load and checks: the fleet starts on an older build,
// and each node in turn is stopped (SIGTERM, or SIGKILL), started on the
// new build with its data directory, and waited for (its /readyz, then
// every node ready and seeing every member up) before the next. Each
// replacement is held as a fault of kind "upgrade"; the summary adds how
// long each took, and the finishes acknowledged before the last one,
// none of which may be lost. The nodes' flags are the harness's, so both
// builds must know them.
//
// Config.Burners runs CPU burners (burners.go) beside the load until the
// faults are over, at the nodes' nice value, and every run but an
// upgrade checks that no node's timeline showed a member down while its
// life was renewed (CheckDowns, downs.go).
//
// scripts/fleetfault.sh builds the binary and runs the harness
// (internal/fleetfault/cmd/fleetfault); it needs root and `ip netns`.
package fleetfault
