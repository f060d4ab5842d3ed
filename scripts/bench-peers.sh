#!/usr/bin/env bash
# bench-peers.sh: what peer sync costs, as two Go benchmarks against a
# real nats-server in process (fleet), on this machine's cores:
#   - catch-up: a joining node rebuilds a peer's part from its dump,
#     BENCH_CATCHUP_GROUPS groups (default 1,000,000) of two ranges each,
#     seeded through the bulk path; the dump is served (as staged SQLite
#     files, fleet/dumpstage.go) and folded on the same cores. Target
#     (issue 35): 1,000,000 groups in at most 30 s (issue 19's was 60).
#   - the fold rate, the fleet's ceiling (every node folds every peer's
#     events): 3,000 four-call cycles on one node, then a second node folds
#     their events alone ("fold-after"), and again while it serves 16
#     workers of its own at full speed ("fold-serving": its own cycles a
#     second alone and meanwhile; target, issue 35: meanwhile at least
#     50% of alone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
groups=${BENCH_CATCHUP_GROUPS:-1000000}
cd "$root/fleet"
go test -c -o "${TMPDIR:-/tmp}/leasehold-bench-peers.test" . >/dev/null
bin=${TMPDIR:-/tmp}/leasehold-bench-peers.test
trap 'rm -f "$bin"' EXIT
field() { awk -v u="$1" '{for (i = 2; i <= NF; i++) if ($i == u) print $(i-1)}'; }

out=$(LEASEHOLD_BENCH_REBUILD_GROUPS=$groups /usr/bin/time -f 'cpu %U %S' "$bin" -test.run '^$' -test.bench RebuildGroups -test.benchtime 1x 2>&1)
ns=$(echo "$out" | field ns/op)
rate=$(echo "$out" | field groups/s)
cpu=$(echo "$out" | awk '/^cpu / {printf "%.1f", $2 + $3}')
printf '%-58s %10s %12s %14s\n' "peer sync" "seconds" "groups/s" "CPU s (all)"
printf '%-58s %10.1f %12.0f %14s\n' "  catch-up: rebuild a peer's $groups groups (target <= 30 s)" "$(awk -v n="$ns" 'BEGIN {print n / 1e9}')" "$rate" "$cpu"
own=$(echo "$out" | field cpu-s/op)
echo "  (CPU includes seeding the peer's catalog; the seconds do not; the rebuild's own: ${own:-?} CPU s, the dump and the fold together)"

out=$("$bin" -test.run '^$' -test.bench 'PeerSync/peer=fold-(after|serving)$' -test.benchtime 3000x 2>&1)
after=$(echo "$out" | grep 'peer=fold-after' | field events-folded/s)
serving=$(echo "$out" | grep 'peer=fold-serving' | field events-folded/s)
alone=$(echo "$out" | grep 'peer=fold-serving' | field b-alone-cycles/s)
beside=$(echo "$out" | grep 'peer=fold-serving' | field b-cycles/s)
printf '%-58s %12s %24s\n' "fold rate (the fleet's ceiling)" "events/s" "own cycles/s"
printf '%-58s %12.0f %24s\n' "  one node folding a peer's events, nothing else" "$after" "-"
printf '%-58s %12.0f %24s\n' "  the same while serving 16 workers of its own" "$serving" "$(printf '%.0f (alone: %.0f)' "$beside" "$alone")"
awk -v b="$beside" -v a="$alone" 'BEGIN { if (a > 0) printf "  (fold share: its own workers keep %.0f%% of their cycles alone while it folds; target >= 50%%: %s)\n", 100 * b / a, (b >= a / 2) ? "met" : "not met" }'
