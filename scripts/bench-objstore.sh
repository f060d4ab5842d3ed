#!/usr/bin/env bash
# bench-objstore.sh [SIZE_MIB...]: moves one window snapshot of each size
# (default 1024 and 4096 MiB) through a real embedded nats-server's
# JetStream object store, the way a fleet replicates snapshots
# (fleet BenchmarkObjectStore), and prints a table:
#   - MiB/s of storing it on node A, cp + sync of A's file (the disk's pace),
#     nats.go's own ObjectStore.Put of it (for comparison: it can fail with
#     429 Too Many Requests, which is why the Replicator uploads with its
#     own window), A's Replicator uploading it, a bare download, and B's
#     Replicator importing it into B's snapshot store (digests checked,
#     fsynced);
#   - each upload and download at the client's default chunk (128 KiB) and
#     at the Replicator's (1 MiB less 4 KiB headroom for headers);
#   - the process's peak resident memory during each step (VmHWM, reset
#     before it) and its growth over the step's start: flat means it does
#     not grow with the size. The nats-server runs in the same process, as
#     it does embedded in a node, so its buffers are counted.
# Disk: 3x the largest size under TMPDIR (default /tmp), checked first.
# CHUNKS_KIB="128,0" picks the chunk sizes (0: the Replicator's default).
set -euo pipefail

sizes=${*:-1024 4096}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
largest=0
for s in $sizes; do [ "$s" -gt "$largest" ] && largest=$s; done
need=$((largest * 3 + 512))
avail=$(df -Pm "$tmp" | awk 'NR==2 {print $4}')
if [ "$avail" -lt "$need" ]; then
	echo "bench-objstore: $tmp has $avail MiB free, $need MiB needed for $largest MiB snapshots" >&2
	exit 1
fi

out=$(cd "$root" && LEASEHOLD_BENCH_OBJSTORE_MIB=$(echo "$sizes" | tr ' ' ',') \
	LEASEHOLD_BENCH_OBJSTORE_CHUNKS_KIB=${CHUNKS_KIB:-128,0} LEASEHOLD_BENCH_DIR=$tmp \
	nice -n 19 go test ./fleet -run '^$' -bench '^BenchmarkObjectStore$' -benchtime 1x -timeout 2h 2>&1) || {
	echo "$out" >&2
	exit 1
}
echo "$out" | awk '$1 == "objstore-row" {
	if ($2 == "size_mib") {
		printf "%8s  %-12s %9s %8s %8s %13s %15s\n", "MiB", "step", "chunk KiB", "seconds", "MiB/s", "peak RSS MiB", "RSS growth MiB"
		next
	}
	if ($5 == "failed:") {
		msg = $6; gsub("_", " ", msg)
		printf "%8s  %-12s %9s  FAILED: %s\n", $2, $3, $4, msg
		next
	}
	printf "%8s  %-12s %9s %8s %8s %13s %15s\n", $2, $3, ($4 == 0 ? "-" : $4), $5, $6, $7, $8
}'
