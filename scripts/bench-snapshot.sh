#!/usr/bin/env bash
# bench-snapshot.sh [SIZE_MIB]: uploads and downloads one window snapshot of
# SIZE_MIB (default 2048) through the real node with curl, and prints the
# rates next to cp+sync of the same file, and the node's memory: resident
# at idle and its peak (VmHWM) during the transfers. Flat memory means the
# peak stays within a few MiB of idle whatever the size.
set -euo pipefail

size_mib=${1:-2048}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-bench.XXXXXX")
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$tmp/leasehold" serve --data "$tmp/data" --listen "127.0.0.1:$port" --history-min-free-bytes 0 \
	--snapshot-max-bytes 1TiB >"$tmp/node.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
U=http://127.0.0.1:$port/api/v1
H="Authorization: Bearer $(cat "$tmp/data/admin.token")"
curl -fs -XPUT -H "$H" "$U/groups/bench" -d '{"range_size":1000}' >/dev/null
curl -fs -XPOST -H "$H" "$U/groups/bench/tail" -d '{"high":1000}' >/dev/null
W="Authorization: Bearer $(curl -fs -XPOST -H "$H" "$U/nodes" -d '{"name":"bench"}' | jq -r .token)"
L=$(curl -fs -XPOST -H "$W" "$U/leases")
G=$(jq .group.id <<<"$L")
F=$(jq .fence <<<"$L")

mem() { awk -v k="$1" '$1==k":" {print int($2/1024)}' "/proc/$pid/status"; }

echo "bench-snapshot: writing a ${size_mib} MiB window (random bytes in gzip)"
# Random bytes stored (gzip -1 keeps them as they are, in gzip framing): the
# node refuses an upload that is not whole gzip.
head -c "$((size_mib << 20))" /dev/urandom | gzip -1 >"$tmp/window.gz"
sync
idle=$(mem VmRSS)

t0=$(date +%s.%N)
cp "$tmp/window.gz" "$tmp/copy.gz" && sync
t1=$(date +%s.%N)
rm -f "$tmp/copy.gz"
cp_rate=$(echo "$size_mib / ($t1 - $t0)" | bc -l)

up=$(curl -fs -XPUT -H "$W" -H 'Content-Type: application/gzip' -T "$tmp/window.gz" \
	-w '%{speed_upload}' -o "$tmp/up.json" "$U/leases/$G/snapshot?fence=$F&next=1001")
peak_up=$(mem VmHWM)
# The timed download goes to /dev/null, so the rate is the node's, not the
# local disk's; a second one to a file is compared byte for byte.
down=$(curl -fs -H "$W" -w '%{speed_download}' -o /dev/null "$U/leases/$G/snapshot?fence=$F")
curl -fs -H "$W" -o "$tmp/back.gz" "$U/leases/$G/snapshot?fence=$F"
peak=$(mem VmHWM)
t0=$(date +%s.%N)
dd if="$tmp/window.gz" of=/dev/null bs=1M status=none
t1=$(date +%s.%N)
read_rate=$(echo "$size_mib / ($t1 - $t0)" | bc -l)

cmp -s "$tmp/window.gz" "$tmp/back.gz" || { echo "bench-snapshot: the download differs from the upload"; exit 1; }
want=$(sha256sum "$tmp/window.gz" | cut -d' ' -f1)
[ "$(jq -r .sha256 "$tmp/up.json")" = "$want" ] || { echo "bench-snapshot: the recorded sha-256 differs"; exit 1; }

printf '%-28s %10s\n' "snapshot ${size_mib} MiB" "MiB/s"
printf '%-28s %10.0f\n' "cp + sync" "$cp_rate"
printf '%-28s %10.0f  (%.0f%% of cp+sync)\n' "upload (curl -T, fsynced)" "$(echo "$up / 1048576" | bc -l)" "$(echo "100 * $up / 1048576 / $cp_rate" | bc -l)"
printf '%-28s %10.0f\n' "read the file (dd)" "$read_rate"
printf '%-28s %10.0f  (%.0f%% of dd)\n' "download (curl)" "$(echo "$down / 1048576" | bc -l)" "$(echo "100 * $down / 1048576 / $read_rate" | bc -l)"
printf 'node memory: idle %d MiB, peak during upload %d MiB, peak after download %d MiB (+%d MiB over idle)\n' \
	"$idle" "$peak_up" "$peak" "$((peak - idle))"
