#!/usr/bin/env bash
# demo.sh: leasehold end to end, with a crash. It builds the binary, starts
# a node on a free loopback port in a temp dir, creates 20 groups with tail
# and history planned, starts three workers over the synthetic source, kills
# one with kill -9 in the middle of its work and starts it again, waits
# until every range is done, and checks that every group's final window
# equals the window of one uninterrupted pass.
#
# Usage: scripts/demo.sh    (from anywhere; needs only Go)
set -euo pipefail

cd "$(dirname "$0")/.."
groups=20
range_size=500
start=5001
high=10000          # tail: 5001..10000, 10 ranges a group
low=1               # history: 1..5000, 10 ranges a group
ttl=3s
rate=2000           # ids a second per group a worker takes

tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-demo.XXXXXX")
pids=()
cleanup() {
	status=$?
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "$status" -ne 0 ]; then
		echo "demo: FAILED; logs:" >&2
		for f in "$tmp"/*.log; do
			[ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
		done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

step() { echo "demo: $*"; }

step "building leasehold"
. scripts/prebuilt.sh
prebuilt leasehold "$tmp/leasehold" || go build -o "$tmp/leasehold" ./cmd/leasehold
lh="$tmp/leasehold"

step "starting a node on a free loopback port (lease TTL $ttl)"
"$lh" serve --data "$tmp/data" --listen 127.0.0.1:0 --lease-ttl "$ttl" --nats off >"$tmp/node.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 100); do
	url=$(sed -n 's/.*msg="leasehold serving".* url=\(http:[^ ]*\).*/\1/p' "$tmp/node.log" | head -n 1)
	[ -n "$url" ] && [ -s "$tmp/data/admin.token" ] && break
	sleep 0.1
done
[ -n "$url" ] || { echo "demo: the node did not start" >&2; exit 1; }
export LEASEHOLD_URL="$url"
export LEASEHOLD_ADMIN_TOKEN
LEASEHOLD_ADMIN_TOKEN=$(cat "$tmp/data/admin.token")
step "node serving at $url"

step "creating $groups groups, planning tail $start..$high and history $low..$((start - 1)) in ranges of $range_size"
ranges=0
for i in $(seq -w 1 "$groups"); do
	g="demo.group.$i"
	"$lh" admin groups create "$g" --range-size "$range_size" --start "$start" >/dev/null
	n=$("$lh" admin --json groups tail "$g" "$high" | tr -dc 0-9)
	m=$("$lh" admin --json groups history "$g" "$low" | tr -dc 0-9)
	ranges=$((ranges + n + m))
done
step "$ranges ranges planned"

for w in w1 w2 w3; do
	"$lh" admin nodes register "$w" --capacity 3 -q >"$tmp/$w.token"
done

start_worker() { # name log
	LEASEHOLD_TOKEN=$(cat "$tmp/$1.token") "$lh" worker --capacity 3 --rate "$rate" --snapshot-every 1s >"$tmp/$2.log" 2>&1 &
	pids+=($!)
	last_pid=$!
}
step "starting three workers (capacity 3 each, $rate ids/s per group)"
start_worker w1 w1
start_worker w2 w2
w2_pid=$last_pid
start_worker w3 w3

# Kill w2 while it holds groups, after it has done a few ranges.
held=0
for _ in $(seq 300); do
	held=$("$lh" admin nodes list | awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "HELD") c = i } $2 == "w2" { print $c }')
	done_by_w2=$(grep -c 'msg="window uploaded"' "$tmp/w2.log" || true)
	[ "${held:-0}" -gt 0 ] && [ "$done_by_w2" -ge 6 ] && break
	sleep 0.1
done
[ "${held:-0}" -gt 0 ] || { echo "demo: w2 never held a group" >&2; exit 1; }
kill -9 "$w2_pid"
wait "$w2_pid" 2>/dev/null || true
step "killed w2 with kill -9 while it held $held groups; they wait out the TTL"

sleep 4
step "starting w2 again"
start_worker w2 w2-again

step "waiting until every range is done"
"$lh" admin wait --timeout 100s --every 500ms 2>&1

step "verifying every group's window against an uninterrupted pass"
"$lh" worker --verify >"$tmp/verify.log"
tail -n 1 "$tmp/verify.log" | grep -q "windows match" || { cat "$tmp/verify.log" >&2; exit 1; }

takeovers=$(cat "$tmp"/w*.log | grep -c 'msg="leased group".*takeover=true' || true)
[ "$takeovers" -gt 0 ] || { echo "demo: no takeover happened" >&2; exit 1; }
echo "demo: $groups groups, $ranges ranges, $takeovers takeovers, windows match"
