#!/usr/bin/env bash
# bench-poll.sh: what an operator's tools poll, at scale. A catalog of
# BENCH_POLL_GROUPS groups (default 1,000,000) with BENCH_POLL_RANGES
# planned ranges each (default 10: 10,000,000 ranges), seeded through the
# store's bulk path, served by one `leasehold serve` (synchronous=FULL,
# peer sync off); then
#   - each polled read asked back to back for BENCH_POLL_SECONDS (default
#     3): GET /api/v1/findings, the dashboard's overview (as its live page
#     refetches it), a prefix search matching every group, and the
#     Prometheus scrape; p50, p99 and the worst, in ms;
#   - 10 open dashboards (each refetching its overview every 3 s, as
#     live.js does) for 20 s: the node's CPU as a share of one core.
# Targets (issue 19): findings and overview p99 under 10 ms, /metrics worst
# under 20 ms, 10 dashboards under 5% of a core; the whole run under two
# minutes, seeding included (issue 19). LEASEHOLD_BIN and
# BENCHLOAD_BIN reuse built binaries (scripts/bench.sh passes its own).
set -euo pipefail

groups=${BENCH_POLL_GROUPS:-1000000}
ranges=${BENCH_POLL_RANGES:-10}
secs=${BENCH_POLL_SECONDS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

bin=${LEASEHOLD_BIN:-}
load=${BENCHLOAD_BIN:-}
if [ -z "$bin" ] || [ -z "$load" ]; then
	(cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold && go build -o "$tmp/benchload" ./internal/benchload)
	bin=$tmp/leasehold load=$tmp/benchload
fi
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

data=$tmp/data
start=$(date +%s.%N)
"$load" seed -data "$data" -groups "$groups" -ranges "$ranges" >"$tmp/seed.log"
echo "bench-poll: $(cat "$tmp/seed.log")"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --data "$data" --listen "127.0.0.1:$port" --history-min-free-bytes 0 --log-level error --nats off >"$tmp/node.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || { echo "bench-poll: the node did not get ready: $(tail -3 "$tmp/node.log")" >&2; exit 1; }
url=http://127.0.0.1:$port
tok=$(cat "$data/admin.token")

printf '%-52s %8s %9s %9s %9s\n' "polled read ($groups groups, $((groups * ranges)) ranges)" "asked" "p50 ms" "p99 ms" "worst ms"
"$load" poll -url "$url" -admin-token "$tok" -duration "${secs}s" | jq -r '[.read, .n, .p50_ms, .p99_ms, .max_ms, (.error // "")] | @tsv' |
	while IFS=$'\t' read -r r n a b m e; do
		printf '%-52s %8s %9s %9s %9s\n' "  $r" "$n" "$a" "$b" "$m"
		[ -z "$e" ] || echo "  ($r failed: $e)"
	done
c0=$(cpu_ticks "$pid")
t0=$(date +%s.%N)
"$load" poll -url "$url" -admin-token "$tok" -dashboards 10 -duration 20s >"$tmp/dash.json"
c1=$(cpu_ticks "$pid")
t1=$(date +%s.%N)
jq -r '"\(.n) \(.p50_ms) \(.p99_ms) \(.error // "")"' "$tmp/dash.json" |
	awk -v n="$((c1 - c0))" -v hz="$hz" -v t0="$t0" -v t1="$t1" '{
		printf "  10 open dashboards, 20 s: %d pages, p50 %s ms, p99 %s ms; node CPU %.1f%% of a core\n", $1, $2, $3, 100 * n / hz / (t1 - t0)
		if ($4 != "") print "  (failed: " $4 ")" }'
echo "bench-poll: took $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.0f", b - a}') s, seeding included"
