#!/usr/bin/env bash
# crashtest.sh: kills a real leasehold node with SIGKILL in the middle of a
# load of four workers, 50 times, and checks after every restart that
# every acknowledged write is in the catalog, PRAGMA integrity_check is ok,
# every group's snapshot file matches its recorded sha-256, size and next,
# no .part or stray file is taken for a snapshot, and /readyz answers 200
# within a second. Prints the figures; exits non-zero on any violation,
# keeping the data and the node's log.
#
# Usage: scripts/crashtest.sh [--kills N] [--seed S] [--self-test] [--fault NAME]
#   --kills 5      the short run CI makes
#   --seed S       replay a run (the seed is printed first)
#   --self-test    break the data on purpose between a kill and the restart,
#                  once per kind of fault, and fail unless each is reported
# Every flag goes to the harness, internal/crashtest (-h lists them).
set -euo pipefail

cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-crashtest.XXXXXX")

echo "crashtest: building leasehold and the harness"
. scripts/prebuilt.sh
prebuilt leasehold "$tmp/leasehold" || go build -o "$tmp/leasehold" ./cmd/leasehold
prebuilt crashtest "$tmp/crashtest" || go build -o "$tmp/crashtest" ./internal/crashtest
rc=0
# The harness's nodes run alone (LEASEHOLD_NATS=off): several crash tests
# at once must not fight over the embedded NATS server's default port.
LEASEHOLD_NATS=off "$tmp/crashtest" --bin "$tmp/leasehold" --dir "$tmp" "$@" || rc=$?
if [ "$rc" -eq 0 ]; then
	rm -rf "$tmp"
else
	echo "crashtest: FAILED; data and node.log kept in $tmp" >&2
fi
exit "$rc"
