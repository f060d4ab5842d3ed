#!/usr/bin/env bash
# bench-snapshot.sh [SIZE_MIB...]: moves one window snapshot of each size
# (default 1024 and 4096 MiB; a size the disk has no room for is skipped)
# through a real `leasehold serve`, up and down, with curl and with
# client (internal/benchload snapshot), and prints a table:
#   - MiB/s of each transfer; uploads against cp + sync of the same file
#     (an upload is fsynced before it is answered), downloads against
#     reading the file from the page cache (dd) and against the same curl
#     download from net/http serving the file alone (benchload fileserve:
#     sendfile, as the node does), the most loopback TCP carries here;
#   - the node's peak resident memory above idle during each transfer
#     (VmHWM, reset before each one): flat means under 64 MiB.
# The window is random bytes in gzip framing (stored blocks): the node
# takes an upload sent as gzip only if it is whole gzip, and nothing can
# make random bytes smaller. LEASEHOLD_BIN and BENCHLOAD_BIN reuse built
# binaries (scripts/bench.sh passes its own).
set -euo pipefail

sizes=${*:-1024 4096}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")
pid=""
fs_pid=""
cleanup() {
	[ -n "$fs_pid" ] && kill "$fs_pid" 2>/dev/null || true
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
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --data "$tmp/data" --listen "127.0.0.1:$port" --history-min-free-bytes 0 \
	--snapshot-max-bytes 1TiB --log-level error --nats off >"$tmp/node.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
B=http://127.0.0.1:$port
U=$B/api/v1
H="Authorization: Bearer $(cat "$tmp/data/admin.token")"
curl -fs -XPUT -H "$H" "$U/groups/bench" -d '{"range_size":1000}' >/dev/null
curl -fs -XPOST -H "$H" "$U/groups/bench/tail" -d '{"high":1000}' >/dev/null
T=$(curl -fs -XPOST -H "$H" "$U/nodes" -d '{"name":"bench"}' | jq -r .token)
W="Authorization: Bearer $T"
L=$(curl -fs -XPOST -H "$W" "$U/leases")
G=$(jq .group.id <<<"$L")
F=$(jq .fence <<<"$L")

# The node's resident memory in MiB; peak_reset starts a new peak (VmHWM).
mem() { awk -v k="$1" '$1==k":" {print int($2/1024)}' "/proc/$pid/status"; }
peak_reset() { echo 5 >"/proc/$pid/clear_refs"; }
rate() { echo "$1 / 1048576 / $2" | bc -l; } # bytes seconds → MiB/s
pct() { echo "100 * $1 / $2" | bc -l; }
row() { printf '%-36s %8.0f  %-30s %s\n' "$@"; }

echo "bench-snapshot: $(nproc) cores, $(go version | cut -d' ' -f3), load $(cut -d' ' -f1-3 /proc/loadavg)"
for size_mib in $sizes; do
	# The window, its copy for cp, and the stored snapshot beside the one
	# it replaces while an upload is under way.
	need=$((4 * size_mib + 1024))
	free=$(df -Pm "$tmp" | awk 'NR == 2 {print $4}')
	if [ "$free" -lt "$need" ]; then
		echo "bench-snapshot: skipping ${size_mib} MiB: $free MiB free on $(df -P "$tmp" | awk 'NR == 2 {print $6}'), $need needed"
		continue
	fi
	"$load" snapfile -out "$tmp/window.gz" -mib "$size_mib"
	sync
	bytes=$(stat -c %s "$tmp/window.gz")

	t0=$(date +%s.%N)
	cp "$tmp/window.gz" "$tmp/copy.gz" && sync
	t1=$(date +%s.%N)
	rm -f "$tmp/copy.gz"
	cp_rate=$(rate "$bytes" "$(echo "$t1 - $t0" | bc -l)")
	t0=$(date +%s.%N)
	dd if="$tmp/window.gz" of=/dev/null bs=1M status=none
	t1=$(date +%s.%N)
	read_rate=$(rate "$bytes" "$(echo "$t1 - $t0" | bc -l)")
	# The same curl download from net/http serving the file alone, best of
	# two: what this host's loopback carries.
	"$load" fileserve -file "$tmp/window.gz" >"$tmp/fileserve.addr" &
	fs_pid=$!
	for _ in $(seq 1 100); do [ -s "$tmp/fileserve.addr" ] && break; sleep 0.05; done
	lo_time=$(for _ in 1 2; do curl -fs -w '%{time_total}\n' -o /dev/null "http://$(cat "$tmp/fileserve.addr")/"; done | sort -n | head -1)
	kill "$fs_pid" && wait "$fs_pid" 2>/dev/null || true
	fs_pid=""
	lo_rate=$(rate "$bytes" "$lo_time")

	idle=$(mem VmRSS)
	peak_reset
	up_time=$(curl -fs -XPUT -H "$W" -H 'Content-Type: application/gzip' -T "$tmp/window.gz" \
		-w '%{time_total}' -o "$tmp/up.json" "$U/leases/$G/snapshot?fence=$F&next=1001")
	up_peak=$(($(mem VmHWM) - idle))
	peak_reset
	# To /dev/null, so the rate is the node's and not the local disk's
	# (best of two, as for the bare server); client's download below
	# checks the bytes against the digest.
	down_time=$(for _ in 1 2; do curl -fs -H "$W" -w '%{time_total}\n' -o /dev/null "$U/leases/$G/snapshot?fence=$F"; done | sort -n | head -1)
	down_peak=$(($(mem VmHWM) - idle))
	peak_reset
	"$load" snapshot -url "$B" -token "$T" -group "$G" -fence "$F" -next 1001 -file "$tmp/window.gz" -op put >"$tmp/cput.json"
	cput_peak=$(($(mem VmHWM) - idle))
	peak_reset
	"$load" snapshot -url "$B" -token "$T" -group "$G" -fence "$F" -op get >"$tmp/cget.json"
	cget_peak=$(($(mem VmHWM) - idle))
	rm -f "$tmp/window.gz"

	# client's upload named the file's sha-256 and the node accepted
	# it: curl's upload must have been recorded with the same.
	[ "$(jq -r .sha256 "$tmp/up.json")" = "$(jq -r .sha256 "$tmp/cput.json")" ] ||
		{ echo "bench-snapshot: curl's upload was recorded with another sha-256"; exit 1; }

	up_rate=$(rate "$bytes" "$up_time")
	down_rate=$(rate "$bytes" "$down_time")
	cput_rate=$(jq .mib_per_s "$tmp/cput.json")
	cget_rate=$(jq .mib_per_s "$tmp/cget.json")
	echo
	printf '%-36s %8s  %-30s %s\n' "snapshot ${size_mib} MiB (node idle ${idle} MiB)" "MiB/s" "against" "node peak above idle"
	row "cp + sync" "$cp_rate" "" ""
	row "read the file (dd, page cache)" "$read_rate" "" ""
	row "curl from a bare net/http server" "$lo_rate" "the loopback ceiling" ""
	row "upload, curl -T" "$up_rate" "$(printf '%.0f%% of cp+sync' "$(pct "$up_rate" "$cp_rate")")" "+${up_peak} MiB"
	row "upload, client (Repr-Digest)" "$cput_rate" "$(printf '%.0f%% of cp+sync' "$(pct "$cput_rate" "$cp_rate")")" "+${cput_peak} MiB"
	row "download, curl" "$down_rate" "$(printf '%.0f%% of dd, %.0f%% of bare' "$(pct "$down_rate" "$read_rate")" "$(pct "$down_rate" "$lo_rate")")" "+${down_peak} MiB"
	row "download, client (sha-256)" "$cget_rate" "$(printf '%.0f%% of dd, %.0f%% of bare' "$(pct "$cget_rate" "$read_rate")" "$(pct "$cget_rate" "$lo_rate")")" "+${cget_peak} MiB"
	worst=$(printf '%s\n' "$up_peak" "$down_peak" "$cput_peak" "$cget_peak" | sort -n | tail -1)
	if [ "$worst" -lt 64 ]; then
		echo "memory: flat (peak at most +${worst} MiB above idle; flat means under 64)"
	else
		echo "memory: NOT flat (peak +${worst} MiB above idle; flat means under 64)"
	fi
done
