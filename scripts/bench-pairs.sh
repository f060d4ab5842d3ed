#!/usr/bin/env bash
# bench-pairs.sh: interleaved pairs of the worker's steady pattern, the way
# BENCHMARKS.md compares two commits on a machine that drifts: before
# (BEFORE, a git revision) then after (AFTER), PAIRS times (default 3),
# each a fresh catalog of 5,000 groups seeded with 12 ranges and a `serve`
# of that revision's build with FLAGS (default none: serve's defaults,
# synchronous=FULL), 32 workers finishing ranges with `next` for 10 s.
# Prints ranges/s and the node's CPU a range (user+system from /proc) with
# the load average, one line a run.
# Usage: BEFORE=f8ad726 AFTER=HEAD [PAIRS=3] [FLAGS="--nats off"] scripts/bench-pairs.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
before=${BEFORE:?} after=${AFTER:?} pairs=${PAIRS:-3}
tmp=$(mktemp -d)
for c in $before $after; do
	mkdir -p $tmp/src-$c && git -C "$root" archive $c | tar -x -C $tmp/src-$c
	(cd $tmp/src-$c && go build -o $tmp/lh-$c ./cmd/leasehold && go build -o $tmp/bl-$c ./internal/benchload)
done
hz=$(getconf CLK_TCK)
run() { # commit label flags...
	local c=$1 label=$2; shift 2
	local data=$tmp/data-$RANDOM
	$tmp/bl-$c seed -data $data -groups 5000 -ranges 12 >/dev/null
	local port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	$tmp/lh-$c serve --data $data --listen 127.0.0.1:$port --history-min-free-bytes 0 --log-level error "$@" >$tmp/node.log 2>&1 &
	local pid=$!
	for _ in $(seq 1 400); do curl -fs http://127.0.0.1:$port/readyz >/dev/null 2>&1 && break; sleep 0.05; done
	local c0=$(awk '{print $14+$15}' /proc/$pid/stat)
	$tmp/bl-$c cycle -url http://127.0.0.1:$port -admin-token "$(cat $data/admin.token)" -workers 32 -duration 10s -pattern steady >$tmp/r.json
	local c1=$(awk '{print $14+$15}' /proc/$pid/stat)
	kill $pid; wait $pid 2>/dev/null || true
	rm -rf $data
	jq -r '"\(.ranges) \(.seconds)"' $tmp/r.json | awk -v n=$((c1-c0)) -v hz=$hz -v l="$label" -v load="$(cut -d' ' -f1 /proc/loadavg)" '{printf "%-40s %6.0f ranges/s  %4.0f µs node CPU a range  (load %s)\n", l, $1/$2, 1e6*n/hz/$1, load}'
}
for i in $(seq 1 $pairs); do
	run $before "before $before ${FLAGS_LABEL:-default}" ${FLAGS:-}
	run $after "after $after ${FLAGS_LABEL:-default}" ${FLAGS:-}
done
rm -rf $tmp
