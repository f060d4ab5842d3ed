#!/usr/bin/env bash
# example-worker.sh: builds the worker in examples/worker, a Go module of
# its own that imports github.com/leasehold/leasehold/client (through a
# replace directive to this checkout), and runs it against a real node:
# three groups planned, the worker leases and indexes them until it has
# been idle for 3 s, and every range must be done and every group's window
# at the node must hold exactly its ids. Exits non-zero otherwise.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
step() { echo "example-worker: $*"; }
fail() {
	echo "example-worker: FAIL: $*" >&2
	tail -20 "$tmp/node.log" "$tmp/worker.log" >&2 || true
	exit 1
}

step "building leasehold and the example worker (its own module)"
. "$root/scripts/prebuilt.sh"
prebuilt leasehold "$tmp/leasehold" || (cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold)
prebuilt example-worker "$tmp/worker" || (cd "$root/examples/worker" && go build -o "$tmp/worker" .)
lh=$tmp/leasehold

"$lh" serve --data "$tmp/data" --listen 127.0.0.1:0 --lease-ttl 5s --nats off >"$tmp/node.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 100); do
	url=$(sed -n 's/.*msg="leasehold serving".* url=\(http:[^ ]*\).*/\1/p' "$tmp/node.log" | head -n 1)
	[ -n "$url" ] && [ -s "$tmp/data/admin.token" ] && break
	sleep 0.1
done
[ -n "$url" ] || fail "the node did not start"
export LEASEHOLD_URL=$url
LEASEHOLD_ADMIN_TOKEN=$(cat "$tmp/data/admin.token")
export LEASEHOLD_ADMIN_TOKEN
step "node serving at $url"

for g in ex.one ex.two ex.three; do
	"$lh" admin groups create "$g" --range-size 100 --start 1 >/dev/null
	"$lh" admin groups tail "$g" 1000 >/dev/null
done
"$lh" admin nodes register example --capacity 2 -q >"$tmp/example.token"
step "3 groups planned 1..1000 in ranges of 100; running the example worker until it is idle for 3s"
LEASEHOLD_TOKEN=$(cat "$tmp/example.token") timeout 120 "$tmp/worker" -idle 3s >"$tmp/worker.log" 2>&1 ||
	fail "the example worker did not stop cleanly"

for g in ex.one ex.two ex.three; do
	done=$(curl -fsS -H "Authorization: Bearer $LEASEHOLD_ADMIN_TOKEN" "$url/api/v1/groups/$g" | jq -r '.ranges.done')
	[ "$done" = 10 ] || fail "$g has $done of 10 ranges done"
	ids=$(curl -fsS -H "Authorization: Bearer $LEASEHOLD_ADMIN_TOKEN" "$url/api/v1/groups/$g/snapshot" | gunzip | jq -r '.ids')
	[ "$ids" = 1000 ] || fail "$g's window holds $ids ids, want 1000"
done
step "3 groups, 30 ranges done by a worker built outside the module; each window holds its 1000 ids"
