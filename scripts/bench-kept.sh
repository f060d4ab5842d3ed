#!/usr/bin/env bash
# bench-kept.sh: what answering a window upload only once the window is in
# the fleet's object store costs a 1 GiB upload, before (BEFORE, a git
# revision) and after (AFTER), in interleaved pairs (PAIRS, default 3).
# Each run starts a fresh fleet of three nodes of that revision's build on
# loopback (embedded NATS, routes between them, the default claim TTL and
# so the default wait), leases a group at node a and uploads one window
# of SIZE_MIB (default 1024) random bytes in gzip framing with curl -T.
# It prints, one line a run: the seconds until the 201, the seconds until
# node a's replicator had the window in the object store (its metric
# leasehold_snapshot_replications_total{result="ok"}), the answer's
# replicated field (none before), and the load average.
# Usage: BEFORE=main AFTER=HEAD [PAIRS=3] [SIZE_MIB=1024] scripts/bench-kept.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
before=${BEFORE:?} after=${AFTER:?} pairs=${PAIRS:-3} size=${SIZE_MIB:-1024}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-kept.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
for c in $before $after; do
	mkdir -p "$tmp/src-$c" && git -C "$root" archive "$c" | tar -x -C "$tmp/src-$c"
	(cd "$tmp/src-$c" && go build -o "$tmp/lh-$c" ./cmd/leasehold)
done
(cd "$root" && go build -o "$tmp/benchload" ./internal/benchload)
"$tmp/benchload" snapfile -out "$tmp/window.gz" -mib "$size"
(umask 077 && head -c 24 /dev/urandom | base64 >"$tmp/nats.secret")

# free N: N free loopback ports.
free() {
	python3 -c 'import socket,sys
s=[socket.socket() for _ in range(int(sys.argv[1]))]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}
now() { date +%s.%N; }

run() { # commit label
	local c=$1 label=$2
	local ports routes="" n i=0
	read -ra ports <<<"$(free 9)"
	declare -A http route
	for n in a b c; do
		http[$n]=${ports[i]} route[$n]=${ports[i + 2]}
		routes+="${routes:+,}nats://127.0.0.1:${ports[i + 2]}"
		i=$((i + 3))
	done
	i=0
	local run_pids=()
	for n in a b c; do
		"$tmp/lh-$c" serve --data "$tmp/$n" --name "kept-$n" --listen "127.0.0.1:${http[$n]}" --log-level error \
			--history-min-free-bytes 0 --snapshot-max-bytes 1TiB --nats-secret-file "$tmp/nats.secret" \
			--nats-listen "127.0.0.1:${ports[i + 1]}" --nats-cluster-listen "127.0.0.1:${route[$n]}" \
			--nats-routes "$routes" >>"$tmp/node-$n.log" 2>&1 &
		run_pids+=($!)
		pids+=($!)
		i=$((i + 3))
	done
	local U=http://127.0.0.1:${http[a]}/api/v1 H
	for _ in $(seq 1200); do
		[ -s "$tmp/a/admin.token" ] && H="Authorization: Bearer $(cat "$tmp/a/admin.token")" &&
			[ "$(curl -fs -H "$H" "$U/peers" | jq '[.peers[]? | select(.state == "up")] | length' 2>/dev/null)" = 2 ] && break
		sleep 0.1
	done
	curl -fs -XPUT -H "$H" "$U/groups/bench.kept" -d '{"range_size":1000}' >/dev/null
	curl -fs -XPOST -H "$H" "$U/groups/bench.kept/tail" -d '{"high":1000}' >/dev/null
	local T W L G F
	T=$(curl -fs -XPOST -H "$H" "$U/nodes" -d '{"name":"bench"}' | jq -r .token)
	W="Authorization: Bearer $T"
	for _ in $(seq 300); do
		L=$(curl -fs -XPOST -H "$W" "$U/leases" || true)
		[ -n "$L" ] && break
		sleep 0.1
	done
	G=$(jq .group.id <<<"$L") F=$(jq .fence <<<"$L")
	local t0 t1 t2 answer
	t0=$(now)
	answer=$(curl -fs -XPUT -H "$W" -H 'Content-Type: application/gzip' -T "$tmp/window.gz" "$U/leases/$G/snapshot?fence=$F&next=1001")
	t1=$(now)
	until curl -fs "http://127.0.0.1:${http[a]}/metrics" | grep -q '^leasehold_snapshot_replications_total{result="ok"} [1-9]'; do sleep 0.05; done
	t2=$(now)
	for p in "${run_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${run_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp/a" "$tmp/b" "$tmp/c"
	printf '%-24s answered %6.1f s  in the object store %6.1f s  replicated %-5s (load %s)\n' "$label" \
		"$(echo "$t1 - $t0" | bc -l)" "$(echo "$t2 - $t0" | bc -l)" "$(jq -r 'if has("replicated") then (.replicated | tostring) else "none" end' <<<"$answer")" "$(cut -d' ' -f1 /proc/loadavg)"
}
echo "bench-kept: ${size} MiB window, fleet of three on loopback, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$pairs"); do
	run "$before" "before $before"
	run "$after" "after $after"
done
