#!/usr/bin/env bash
# bench-worker.sh: the reference worker (`leasehold worker`, the synthetic
# source of client/synthetic) indexing a synthetic catalog end to end
# against one `leasehold serve`: for each worker count (BENCH_WORKER_COUNTS,
# default "1 4 16"; each worker is its own process and registered node,
# holding one group at a time), ranges finished per second and ids indexed
# per second over BENCH_WORKER_SECONDS (default 10) after a second of
# warm-up. The catalog: BENCH_WORKER_GROUPS groups (default 32) of
# 1,000-id ranges, far more planned than any run finishes. Ranges are
# counted by the node (/metrics: answered finish calls), ids as ranges ×
# 1,000. LEASEHOLD_BIN reuses a built binary (scripts/bench.sh passes its
# own).
set -euo pipefail

counts=${BENCH_WORKER_COUNTS:-1 4 16}
secs=${BENCH_WORKER_SECONDS:-10}
groups=${BENCH_WORKER_GROUPS:-32}
range_size=1000
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")
pid=""
workers=()
stop_workers() {
	for w in "${workers[@]}"; do kill -INT "$w" 2>/dev/null || true; done
	for w in "${workers[@]}"; do wait "$w" 2>/dev/null || true; done
	workers=()
}
cleanup() {
	stop_workers
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

bin=${LEASEHOLD_BIN:-}
if [ -z "$bin" ]; then
	(cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold)
	bin=$tmp/leasehold
fi

# finished is the count of finish calls the node has answered 200.
finished() {
	curl -fs "$B/metrics" | awk '/^leasehold_http_requests_total\{/ && /route="\/api\/v1\/ranges\/:id\/finish"/ && /status="200"/ {n += $NF} END {printf "%d\n", n}'
}

printf '%-40s %10s %12s %8s\n' "reference worker, synthetic source" "ranges/s" "ids/s" "ranges"
for n in $counts; do
	# A new node and catalog for each count, so every run starts from the
	# same backlog.
	data=$tmp/data-$n
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$bin" serve --data "$data" --listen "127.0.0.1:$port" --history-min-free-bytes 0 --log-level error --nats off >"$tmp/node.log" 2>&1 &
	pid=$!
	B=http://127.0.0.1:$port
	U=$B/api/v1
	for _ in $(seq 1 200); do curl -fs "$B/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
	H="Authorization: Bearer $(cat "$data/admin.token")"
	for g in $(seq 1 "$groups"); do
		curl -fs -XPUT -H "$H" "$U/groups/synth.$g" -d "{\"range_size\":$range_size}" >/dev/null
		curl -fs -XPOST -H "$H" "$U/groups/synth.$g/tail" -d '{"high":10000000}' >/dev/null
	done
	for w in $(seq 1 "$n"); do
		tok=$(curl -fs -XPOST -H "$H" "$U/nodes" -d "{\"name\":\"worker-$w\"}" | jq -r .token)
		LEASEHOLD_TOKEN=$tok "$bin" worker --url "$B" --capacity 1 --log-level error >>"$tmp/workers.log" 2>&1 &
		workers+=($!)
	done
	sleep 1
	r0=$(finished)
	t0=$(date +%s.%N)
	sleep "$secs"
	r1=$(finished)
	t1=$(date +%s.%N)
	stop_workers
	kill "$pid" && wait "$pid" 2>/dev/null || true
	pid=""
	rm -rf "$data"
	awk -v n="$n" -v r="$((r1 - r0))" -v s="$(echo "$t1 - $t0" | bc -l)" -v z="$range_size" 'BEGIN {
		printf "%-40s %10.1f %12.0f %8d\n", sprintf("%d worker%s", n, n == 1 ? "" : "s"), r / s, r * z / s, r }'
done
