#!/usr/bin/env bash
# bench.sh: leasehold's benchmark suite. It prints the machine, then one
# table row per measurement:
#   1. lease cycles (lease → next → finish → release) over HTTP against a real
#      `leasehold serve` (synchronous=FULL), 32 workers each a registered node,
#      at 1,000 / 100,000 / 1,000,000 groups seeded through the store's bulk
#      path, with group commit and (at 100,000) with one commit per write;
#      then the worker's steady pattern (ranges finished with next) at
#      BENCH_STEADY_GROUPS groups (default 5,000), each row with its target:
#      `serve` with its defaults (target >= 3,000 ranges/s), `--nats off`
#      (the lone node's moonshot, >= 5,000) and a fleet of one (embedded
#      NATS, peer sync on) beside them;
#   2. the same cycle in process (Go benchmark, no HTTP);
#   3. this machine's limits: raw SQLite commits/s (1 and 64 updates per
#      transaction, FULL and NORMAL) and echo answering a fixed JSON body
#      under the same load generator;
#   4. snapshots through curl and client (scripts/bench-snapshot.sh),
#      1 GiB and 4 GiB (4 GiB when the disk has room), unless
#      BENCH_SNAPSHOT_MIB is set to other sizes or to "" to skip;
#   5. the reference worker indexing a synthetic catalog end to end
#      (scripts/bench-worker.sh) with 1, 4 and 16 workers, unless
#      BENCH_WORKER_COUNTS is set to other counts or to "" to skip;
#   6. what operators poll at scale (scripts/bench-poll.sh): findings, the
#      dashboard's overview, a prefix search, /metrics, and 10 open
#      dashboards' CPU, at 1,000,000 groups with 10,000,000 ranges, unless
#      BENCH_POLL_GROUPS is set to another count or to "" to skip;
#   7. peer sync (scripts/bench-peers.sh): a joining node's catch-up of a
#      peer's 1,000,000 groups (target at most 30 s), and the events one
#      node folds a second, alone and while it serves 16 workers of its
#      own (target: they keep at least 50% of their cycles alone),
#      unless BENCH_CATCHUP_GROUPS is set to another count or to "" to
#      skip;
#   8. scale-out (scripts/bench-scaleout.sh): fleets of 1, 3 and 5 nodes
#      on loopback beside a lone node, each node driven on its own groups:
#      ranges/s, node CPU a range and its ratio to the lone node's (target
#      for three, issue 45: at most 2x), fold lag, time to converge,
#      unless BENCH_SCALEOUT_SIZES is set to other sizes or to "" to skip;
#   9. the Usenet worker against INN (scripts/bench-usenet.sh: 100,015
#      articles, beside one raw OVER connection reading the same group;
#      target at least 10,413 headers/s, 1.5x round 3's 6,942), needing
#      root for INN (a line says it was skipped otherwise), in
#      BENCH_USENET_ROUNDS rounds (default 1; "" to skip).
# Environment: BENCH_SIZES (groups, default "1000 100000 1000000"),
# BENCH_SECONDS (per HTTP run, default 10), BENCH_WORKERS (default 32),
# BENCH_STEADY_GROUPS (default 5000);
# bench-worker.sh also reads BENCH_WORKER_SECONDS and BENCH_WORKER_GROUPS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sizes=${BENCH_SIZES:-1000 100000 1000000}
secs=${BENCH_SECONDS:-10}
workers=${BENCH_WORKERS:-32}
snap_sizes=${BENCH_SNAPSHOT_MIB-1024 4096}
worker_counts=${BENCH_WORKER_COUNTS-1 4 16}
poll_groups=${BENCH_POLL_GROUPS-1000000}
catchup_groups=${BENCH_CATCHUP_GROUPS-1000000}
usenet_rounds=${BENCH_USENET_ROUNDS-1}
scaleout_sizes=${BENCH_SCALEOUT_SIZES-1 3 5}
steady_groups=${BENCH_STEADY_GROUPS:-5000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "bench: $(nproc) cores, $(go version | cut -d' ' -f3-), $(uname -sr), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo "bench: building"
(cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold && go build -o "$tmp/benchload" ./internal/benchload)

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user+system of a process
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }    # time the VM's host ran others

row() { printf '%-44s %12s %9s %9s %9s %9s %10s %8s\n' "$@"; }
row "measurement" "cycles/s" "lease50" "lease99" "next99" "finish99" "commits/s" "batch"

serve_and_load() { # label groups extra-serve-flags...
	local label=$1 groups=$2
	shift 2
	local data="$tmp/data-$groups-$RANDOM"
	"$tmp/benchload" seed -data "$data" -groups "$groups" ${seed_ranges:+-ranges "$seed_ranges"} >"$tmp/seed.log"
	echo "bench: $(cat "$tmp/seed.log")" >&2
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	# No --nats flag: serve's default, a node alone (rows that want peer
	# sync or --nats off say so in their flags).
	"$tmp/leasehold" serve --data "$data" --listen "127.0.0.1:$port" --history-min-free-bytes 0 --log-level error "$@" >"$tmp/node.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 400); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
	local cpu0 steal0 cpu1 steal1
	cpu0=$(cpu_ticks "$pid")
	steal0=$(steal_ticks)
	"$tmp/benchload" cycle -url "http://127.0.0.1:$port" -admin-token "$(cat "$data/admin.token")" \
		-workers "$workers" -duration "${secs}s" -pattern "${pattern:-four}" >"$tmp/r.json"
	cpu1=$(cpu_ticks "$pid")
	steal1=$(steal_ticks)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
	rm -rf "$data"
	jq -r --arg l "$label" '[$l, (.cycles_per_s|floor), .p50_ms.lease, .p99_ms.lease, .p99_ms.next, .p99_ms.finish, (.commits_per_s|floor), (.batch_mean*10|floor/10), .errors, (.first_error // "")] | @tsv' "$tmp/r.json" |
		while IFS=$'\t' read -r l c a b n f cm bm e fe; do
			row "$l" "$c" "$a" "$b" "$n" "$f" "$cm" "$bm"
			[ "$e" = 0 ] || echo "  ($e failed cycles: $fe)"
		done
	# CPU a cycle is steadier than cycles/s on a shared VM: steal and the
	# load generator's share move the rate, much less the cost of a cycle.
	jq -r '"\(.cycles) \(.seconds) \(.loadgen_cpu_us_per_cycle)"' "$tmp/r.json" |
		awk -v n="$((cpu1 - cpu0))" -v st="$((steal1 - steal0))" -v hz="$hz" -v cores="$(nproc)" '$1 > 0 {
			u = 1e6 * n / hz / $1
			printf "  (node %.0f µs of CPU a cycle, load generator %.0f: %d cores allow at most %d cycles/s at that cost; steal %.0f%% of the machine)\n", u, $3, cores, cores * 1e6 / (u + $3), 100 * st / (hz * $2 * cores) }'
	if [ "${pattern:-four}" = steady ]; then
		jq -r '"\(.ranges) \(.seconds) \(.loadgen_cpu_us_per_cycle) \(.cycles)"' "$tmp/r.json" |
			awk -v n="$((cpu1 - cpu0))" -v hz="$hz" -v target="${target:-0}" -v load="$(cut -d' ' -f1 /proc/loadavg)" '$1 > 0 {
				r = $1 / $2
				t = target > 0 ? sprintf("; target >= %d: %s", target, r >= target ? "met" : "not met") : ""
				printf "  (%.0f ranges/s%s; node %.0f µs of CPU a range, load generator %.0f; load average %s)\n", r, t, 1e6 * n / hz / $1, $3 * $4 / $1, load }'
	fi
	jq -r .cycles_per_s "$tmp/r.json" >"$tmp/last"
}

for g in $sizes; do
	serve_and_load "http, FULL, group commit, $g groups" "$g"
	cp "$tmp/last" "$tmp/http-$g"
done
mid=$(echo "$sizes" | awk '{print $(NF>1?2:1)}')
# A worker's steady pattern: a range costs one call (next with finished);
# cycles/s here counts leases, each finishing up to ten ranges.
# The default node and the lone node side by side, then a fleet of one:
# what peer sync costs a node that turns it on.
seed_ranges=12 pattern=steady target=3000 serve_and_load "steady, serve's defaults, $steady_groups groups" "$steady_groups"
seed_ranges=12 pattern=steady target=5000 serve_and_load "steady, --nats off (lone node), $steady_groups groups" "$steady_groups" --nats off
seed_ranges=12 pattern=steady serve_and_load "steady, fleet of one (peer sync on), $steady_groups" "$steady_groups" --nats-listen 127.0.0.1:0 --name bench
serve_and_load "http, FULL, commit per write, $mid groups" "$mid" --no-group-commit
cp "$tmp/last" "$tmp/http-nogc"
# A fleet member: peer sync on (embedded NATS), publishing every event,
# keeping a claim on every group in work.
serve_and_load "http, FULL, peer sync on, 1000 groups" 1000 --nats-listen 127.0.0.1:0 --name bench
[ "$mid" = 1000 ] || serve_and_load "http, FULL, peer sync on, $mid groups" "$mid" --nats-listen 127.0.0.1:0 --name bench

# In process, durable and not: equal rates mean the writer is bound by its
# own CPU (the cpu-µs/cycle figure), not by fsync.
(cd "$root" && go test -run '^$' -bench 'BenchmarkCycle/sync=(FULL|NORMAL)/groups=1000$' -benchtime 10000x ./appliance) |
	awk '/cycles\/s/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "cycles/s") c = $i; if ($(i+1) == "commits/s") m = $i; if ($(i+1) == "writes/commit") w = $i; if ($(i+1) == "cpu-µs/cycle") u = $i }
		mode = ($1 ~ /NORMAL/) ? "NORMAL (not durable)" : "FULL"
		printf "%-44s %12d %9s %9s %9s %9s %10d %8s\n", "in process, " mode ", 1000 groups", c, "-", "-", "-", "-", m, w
		printf "  (%.0f µs of CPU a cycle, nearly all in the one writer: at most %d cycles/s on its core)\n", u, 1000000 / u }'

"$tmp/benchload" echo -workers "$workers" -duration "${secs}s" >"$tmp/echo.json"
jq -r '["echo, fixed JSON, 4 requests a cycle", (.cycles_per_s|floor), .p50_ms.lease, .p99_ms.lease, .p99_ms.next, .p99_ms.finish, "-", "-"] | @tsv' "$tmp/echo.json" |
	while IFS=$'\t' read -r l c a b n f cm bm; do row "$l" "$c" "$a" "$b" "$n" "$f" "$cm" "$bm"; done

"$tmp/benchload" sqlite -dir "$tmp" -duration 3s >"$tmp/sqlite.json"
echo
printf '%-44s %12s %12s\n' "raw SQLite on this disk" "commits/s" "updates/s"
jq -r '.[] | ["sqlite, \(.synchronous), \(.updates_per_tx) update(s) a transaction", (.commits_per_s|floor), (.updates_per_s|floor)] | @tsv' "$tmp/sqlite.json" |
	while IFS=$'\t' read -r l c u; do printf '%-44s %12s %12s\n' "$l" "$c" "$u"; done

echo
first=$(echo "$sizes" | awk '{print $1}')
last=$(echo "$sizes" | awk '{print $NF}')
echo64=$(jq '.cycles_per_s' "$tmp/echo.json")
full64=$(jq '.[] | select(.synchronous == "FULL" and .updates_per_tx == 64) | .updates_per_s' "$tmp/sqlite.json")
awk -v a="$(cat "$tmp/http-$first")" -v b="$(cat "$tmp/http-$last")" -v m="$(cat "$tmp/http-$mid")" -v n="$(cat "$tmp/http-nogc")" -v e="$echo64" -v s="$full64" -v f="$first" -v l="$last" -v md="$mid" 'BEGIN {
	printf "ratios: slowdown at %d groups against %d: %.2fx (target <= 1.5; below 1 is faster)\n", l, f, a / b
	printf "ratios: group commit is %.1fx one commit per write at %d groups (target >= 5)\n", m / n, md
	printf "ratios: the node at %d groups makes %.0f%% of echo'"'"'s fixed-JSON cycle rate\n", md, 100 * m / e
	printf "ratios: its 4 writes a cycle are %.0f%% of raw SQLite FULL updates at 64 a transaction\n", 100 * 4 * m / s
}'

if [ -n "$snap_sizes" ]; then
	echo
	# shellcheck disable=SC2086 # one argument a size
	LEASEHOLD_BIN=$tmp/leasehold BENCHLOAD_BIN=$tmp/benchload bash "$root/scripts/bench-snapshot.sh" $snap_sizes
fi

if [ -n "$worker_counts" ]; then
	echo
	BENCH_WORKER_COUNTS=$worker_counts LEASEHOLD_BIN=$tmp/leasehold bash "$root/scripts/bench-worker.sh"
fi

if [ -n "$poll_groups" ]; then
	echo
	BENCH_POLL_GROUPS=$poll_groups LEASEHOLD_BIN=$tmp/leasehold BENCHLOAD_BIN=$tmp/benchload bash "$root/scripts/bench-poll.sh"
fi

if [ -n "$catchup_groups" ]; then
	echo
	BENCH_CATCHUP_GROUPS=$catchup_groups bash "$root/scripts/bench-peers.sh"
fi

if [ -n "$scaleout_sizes" ]; then
	echo
	SCALEOUT_SIZES=$scaleout_sizes bash "$root/scripts/bench-scaleout.sh"
fi

if [ -n "$usenet_rounds" ]; then
	echo
	if [ "$(id -u)" = 0 ]; then
		BENCH_ROUNDS=$usenet_rounds bash "$root/scripts/bench-usenet.sh"
	else
		echo "usenet worker: skipped, INN needs root (sudo scripts/bench-usenet.sh; BENCH_USENET_ROUNDS=\"\" skips this line)"
	fi
fi

echo
echo "bench: to profile a node under load, take a CPU profile with the admin token (heap, allocs, goroutine, trace likewise under /debug/pprof/):"
echo "  curl -H \"Authorization: Bearer \$(cat DATA/admin.token)\" -o cpu.pprof 'http://127.0.0.1:8080/debug/pprof/profile?seconds=10' && go tool pprof -top cpu.pprof"
