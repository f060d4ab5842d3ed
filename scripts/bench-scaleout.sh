#!/usr/bin/env bash
# bench-scaleout.sh: what a fleet adds, on loopback. For each fleet size
# in SCALEOUT_SIZES (default "1 3 5") it starts that many `leasehold serve` nodes
# clustered by their embedded NATS servers (synchronous=FULL, serve's
# defaults otherwise), each seeded alone with SCALEOUT_GROUPS groups of its own
# (default 5,000, 12 ranges of 100 ids each), waits until every node's
# catalog holds the whole fleet's groups, then drives every node on its
# own groups with its own load generator (SCALEOUT_WORKERS workers each, default
# 16, the worker's steady pattern) for SCALEOUT_SECONDS (default 10). Beside them,
# first, a lone node (no NATS) seeded and driven like a fleet of SCALEOUT_LONE
# (default 3) nodes put together, the price's reference. Per row:
#   - ranges/s, all nodes together;
#   - node CPU a range: user+system of every node process (from /proc)
#     over the ranges they finished, and its ratio to the lone node's,
#     the fleet's price (issue 45: at most 2x for three nodes);
#   - fold lag at the end: the stream messages the most behind node had
#     not folded when the load stopped (leasehold_peer_fold_lag_messages);
#   - time to converge: from the load's stop until every node counts the
#     same ranges done and has nothing left to fold;
#   - idle CPU: what all the nodes spend a second with no load, in the 5 s
#     before it (a fleet's renewals, heartbeats and polls);
#   - the load average, since the machine may be shared.
# Then the model: on N machines of C cores each (C = this one's), a node
# spends its CPU a range on its own ranges, so N nodes finish at most
# N*C / (CPU a range) ranges/s, against C / (lone CPU a range) alone.
#
# Usage: [SCALEOUT_SIZES="1 3 5"] [SCALEOUT_GROUPS=5000] [SCALEOUT_WORKERS=16]
#        [SCALEOUT_SECONDS=10] [SCALEOUT_LONE=3] [SCALEOUT_PAIRS=1] [SCALEOUT_RANGES=12]
#        [SCALEOUT_WARM=0] [SCALEOUT_NODE_LONE=1] scripts/bench-scaleout.sh
# SCALEOUT_RANGES is each group's ranges. SCALEOUT_WARM=S drives every
# node for S seconds before the idle seconds and the measured load, so
# that the groups leased then are claimed when it starts: with enough
# ranges a group (a cycle finishes up to 10) and few enough groups for
# the warm load to lease each, the measured load begins no group, as a
# fleet that holds its groups' claims.
# SCALEOUT_NODE_LONE=1 adds, after the lone node, a lone node of one fleet
# node's workers (SCALEOUT_WORKERS) on the same catalog: its ratio to the
# reference is what a fleet node's smaller batches cost before any peer
# sync (BENCHMARKS.md, issue 45 round 4, the floor).
# SCALEOUT_PAIRS > 1 runs the lone row and the fleet rows again, interleaved, as
# the way to compare figures on a machine that drifts.
# SCALEOUT_PROFILE=DIR writes a CPU profile of the first node of each
# row under the load (DIR/cpu-N.pprof, N=0 the lone node) and, for a
# fleet, over the idle seconds before it (DIR/cpu-idle-N.pprof).
# SCALEOUT_BIN=PATH runs that leasehold binary as the nodes (another
# revision's build, to compare two revisions in interleaved runs).
# Needs Go, curl, jq, python3. KEEP=1 keeps the temp dir (logs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sizes=${SCALEOUT_SIZES:-1 3 5}
groups=${SCALEOUT_GROUPS:-5000}
workers=${SCALEOUT_WORKERS:-16}
secs=${SCALEOUT_SECONDS:-10}
lone=${SCALEOUT_LONE:-3}
pairs=${SCALEOUT_PAIRS:-1}
idle_secs=5
granges=${SCALEOUT_RANGES:-12}
warm=${SCALEOUT_WARM:-0}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-scaleout.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	pids=()
	[ -n "${KEEP:-}" ] && echo "bench-scaleout: kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup EXIT

echo "bench-scaleout: building"
(cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold && go build -o "$tmp/benchload" ./internal/benchload)
lh=${SCALEOUT_BIN:-$tmp/leasehold}
bl=$tmp/benchload
hz=$(getconf CLK_TCK)
(umask 077 && head -c 24 /dev/urandom | base64 >"$tmp/nats.secret")

# free_ports N: N free loopback ports, held together so none repeats.
free_ports() {
	python3 -c '
import socket, sys
s = []
for _ in range(int(sys.argv[1])):
    x = socket.socket(); x.bind(("127.0.0.1", 0)); s.append(x)
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}
metric() { # url name[{labels}]: the metric's value summed over its series
	curl -fs "$1/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $2; f = 1 } END { if (f) printf "%.0f\n", s; else print 0 }'
}
done_count() { curl -fs "$1/metrics" | awk '$1 == "leasehold_ranges{status=\"done\"}" { printf "%.0f\n", $2 }'; }
all_ranges() { curl -fs "$1/metrics" | awk '$1 ~ /^leasehold_ranges\{/ { s += $2 } END { printf "%.0f\n", s }'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

printf '%-26s %10s %12s %8s %10s %10s %12s %6s\n' "fleet" "ranges/s" "CPU a range" "price" "idle CPU" "fold lag" "converge s" "load"

# run_size N LABEL: one row; N=0 is the lone node.
run_size() {
	local n=$1 label=$2 nodes=$1 g=$groups w=$workers ref=0
	local -a urls=() npids=() datas=()
	if [ "$n" = 0 ]; then nodes=1 g=$((groups * lone)) w=$((workers * lone)); fi
	if [ "$n" = -1 ]; then nodes=1 g=$((groups * lone)) n=0 ref=1; fi
	local -a ports
	read -r -a ports <<<"$(free_ports $((3 * nodes)))"
	local routes="" i
	for ((i = 0; i < nodes; i++)); do routes+="${routes:+,}nats://127.0.0.1:${ports[3 * i + 2]}"; done
	for ((i = 0; i < nodes; i++)); do
		local data=$tmp/d$n-$i-$RANDOM
		"$bl" seed -data "$data" -groups "$g" -ranges "$granges" -prefix "n$i." >/dev/null
		datas+=("$data")
		urls+=("http://127.0.0.1:${ports[3 * i]}")
		local -a fleet=()
		if [ "$n" -ge 1 ]; then
			fleet=(--name "node-$i" --nats-listen "127.0.0.1:${ports[3 * i + 1]}" --nats-secret-file "$tmp/nats.secret")
			[ "$n" -gt 1 ] && fleet+=(--nats-cluster-listen "127.0.0.1:${ports[3 * i + 2]}" --nats-routes "$routes")
		fi
		"$lh" serve --data "$data" --listen "127.0.0.1:${ports[3 * i]}" --history-min-free-bytes 0 --log-level error \
			"${fleet[@]}" >"$tmp/node-$n-$i.log" 2>&1 &
		npids+=($!)
		pids+=($!)
	done
	# Ready (joined), and every catalog holds the whole fleet's ranges.
	local want=$((nodes * g * granges)) ok
	for _ in $(seq 1200); do
		ok=1
		for u in "${urls[@]}"; do
			curl -fs -o /dev/null "$u/readyz" 2>/dev/null && [ "$(all_ranges "$u" 2>/dev/null || echo 0)" -ge "$want" ] || { ok=0; break; }
		done
		[ $ok = 1 ] && break
		sleep 0.25
	done
	[ $ok = 1 ] || { echo "bench-scaleout: fleet of $n did not form (logs in $tmp)" >&2; KEEP=1; exit 1; }
	if [ "$warm" -gt 0 ]; then
		# A load before the measured one, so that the groups it leased are
		# claimed already (a fleet that holds its claims) when it starts.
		local -a wpids=()
		for ((i = 0; i < nodes; i++)); do
			"$bl" cycle -url "${urls[i]}" -admin-token "$(cat "${datas[i]}/admin.token")" -workers "$w" -duration "${warm}s" \
				-pattern steady -prefix "v$i" >/dev/null &
			wpids+=($!)
		done
		for p in "${wpids[@]}"; do wait "$p"; done
	fi
	local c0=0 c1=0 i0=0 p
	# What the nodes spend idle: a fleet's background work (renewals,
	# heartbeats, polls) is paid whatever the load.
	for p in "${npids[@]}"; do i0=$((i0 + $(cpu_ticks "$p"))); done
	if [ -n "${SCALEOUT_PROFILE:-}" ] && [ "$n" -ge 1 ]; then
		# The first node's profile over the idle seconds (instead of a sleep).
		curl -fs -H "Authorization: Bearer $(cat "${datas[0]}/admin.token")" -o "$SCALEOUT_PROFILE/cpu-idle-$n.pprof" \
			"${urls[0]}/debug/pprof/profile?seconds=$idle_secs" || sleep "$idle_secs"
	else
		sleep "$idle_secs"
	fi
	for p in "${npids[@]}"; do c0=$((c0 + $(cpu_ticks "$p"))); done
	local idle
	idle=$(awk -v t=$((c0 - i0)) -v hz="$hz" -v s="$idle_secs" 'BEGIN { printf "%.0f ms/s", 1000 * t / hz / s }')
	local -a lpids=()
	for ((i = 0; i < nodes; i++)); do
		"$bl" cycle -url "${urls[i]}" -admin-token "$(cat "${datas[i]}/admin.token")" -workers "$w" -duration "${secs}s" \
			-pattern steady -prefix "w$i" >"$tmp/r-$i.json" &
		lpids+=($!)
	done
	if [ -n "${SCALEOUT_PROFILE:-}" ]; then
		# A CPU profile of the first node under the load, to read with
		# go tool pprof.
		curl -fs -H "Authorization: Bearer $(cat "${datas[0]}/admin.token")" -o "$SCALEOUT_PROFILE/cpu-$n$([ "$ref" = 1 ] && echo -node).pprof" \
			"${urls[0]}/debug/pprof/profile?seconds=$((secs > 3 ? secs - 2 : 1))" || true
	fi
	for p in "${lpids[@]}"; do wait "$p"; done
	for p in "${npids[@]}"; do c1=$((c1 + $(cpu_ticks "$p"))); done
	local stopped lag=0 l
	stopped=$(date +%s.%N)
	for u in "${urls[@]}"; do
		l=$(metric "$u" leasehold_peer_fold_lag_messages)
		[ "$l" -gt "$lag" ] && lag=$l
	done
	# Converged: every node counts the same ranges done, none lags.
	local conv="-"
	if [ "$nodes" -gt 1 ]; then
		conv=">120"
		for _ in $(seq 600); do
			local counts="" lags=0
			for u in "${urls[@]}"; do
				counts+="$(done_count "$u") "
				lags=$((lags + $(metric "$u" leasehold_peer_fold_lag_messages)))
			done
			if [ "$lags" = 0 ] && [ "$(echo "$counts" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)" = 1 ]; then
				conv=$(awk -v a="$stopped" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
				break
			fi
			sleep 0.2
		done
	fi
	local ranges secsum errs
	ranges=$(cat "$tmp"/r-*.json | jq -s 'map(.ranges) | add')
	secsum=$(cat "$tmp"/r-*.json | jq -s 'map(.seconds) | max')
	errs=$(cat "$tmp"/r-*.json | jq -s 'map(.errors) | add')
	first_err=$(cat "$tmp"/r-*.json | jq -rs 'map(.first_error // empty) | first // ""')
	rm -f "$tmp"/r-*.json
	for p in "${npids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${npids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	for d in "${datas[@]}"; do rm -rf "$d"; done
	local us
	us=$(awk -v t=$((c1 - c0)) -v hz="$hz" -v r="$ranges" 'BEGIN { printf "%.0f", 1e6 * t / hz / (r > 0 ? r : 1) }')
	[ "$n" = 0 ] && [ "$ref" = 0 ] && echo "$us" >"$tmp/lone-us"
	local price="-"
	{ [ "$n" != 0 ] || [ "$ref" = 1 ]; } && [ -s "$tmp/lone-us" ] && price=$(awk -v a="$us" -v b="$(cat "$tmp/lone-us")" 'BEGIN { printf "%.2fx", a / b }')
	printf '%-26s %10.0f %9s µs %8s %10s %10s %12s %6s\n' "$label" "$(awk -v r="$ranges" -v s="$secsum" 'BEGIN { print r / s }')" "$us" "$price" "$idle" "$lag" "$conv" "$(cut -d' ' -f1 /proc/loadavg)"
	[ "$errs" = 0 ] || echo "  ($errs failed cycles, the first: ${first_err:0:300})"
	if [ "$n" = 3 ] && [ "$price" != "-" ]; then
		awk -v p="${price%x}" 'BEGIN { printf "  (target for three, issue 45: at most 2x the lone node'"'"'s CPU a range: %s)\n", p <= 2 ? "met" : "not met" }'
	fi
	if [ "$ref" = 0 ]; then echo "$n $us" >>"$tmp/costs"; fi
}

for pair in $(seq "$pairs"); do
	run_size 0 "lone node ($((workers * lone)) workers)"
	[ -n "${SCALEOUT_NODE_LONE:-}" ] && run_size -1 "lone node ($workers workers)"
	for n in $sizes; do
		run_size "$n" "fleet of $n ($workers each)"
	done
done

# The model, from the last pair's figures.
cores=$(nproc)
awk -v c="$cores" -v lone="$(cat "$tmp/lone-us")" '
	{ us[$1] = $2 }
	END {
		printf "model: on N machines of %d cores, a lone node finishes at most %.0f ranges/s (%d cores / %s µs)\n", c, c * 1e6 / lone, c, lone
		for (n in us) if (n > 0)
			printf "model: a fleet of %d at %s µs a range (all nodes) finishes at most %.0f ranges/s on %d machines: %.2fx a lone node\n", n, us[n], n * c * 1e6 / us[n], n, n * lone / us[n]
	}' "$tmp/costs"
