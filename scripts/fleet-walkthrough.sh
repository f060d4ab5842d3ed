#!/usr/bin/env bash
# fleet-walkthrough.sh: runs the README's "A fleet by hand" word for word
# in a fresh directory, as a newcomer would paste it, and checks what the
# README says happens between its blocks:
#   1. fleet-start: three nodes on loopback, each ready (/readyz 200),
#      each with its own data dir beside the others' (none in ./data);
#   2. fleet-work: a worker started with n1's token and n3 first works at
#      n3 (the token travelled, n3 was handed groups by n1);
#   3. fleet-kill: n3 killed with kill -9; the worker works at n1, n1's
#      /peers and fleet page say n3 is down, and n3's groups get a new
#      owner (timed from the kill, watched beside the other checks).
# It prints how long each step took (figures, not asserts; every wait is
# bounded) and exits non-zero at the first thing that is not as the
# README says. The README's ports are fixed (808x, 420x, 620x): they must
# be free. KEEP=1 keeps the directory for a post-mortem.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-fleet-walk.XXXXXX")
out=$work/.out
mkdir -p "$out"
cleanup() {
	status=$?
	[ -n "${watcher:-}" ] && kill "$watcher" 2>/dev/null || true
	for f in "$work"/fleet-data/*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
	done
	if [ "$status" -ne 0 ]; then
		for f in "$work"/fleet-data/*.log; do
			[ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
		done
		echo "fleet-walkthrough: FAILED: ${why:-see above}" >&2
	fi
	[ -n "${KEEP:-}" ] && echo "fleet-walkthrough: kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
why=""
step() { echo "fleet-walkthrough: $*"; }
fail() {
	why="$*"
	exit 1
}

for tool in curl jq python3; do command -v $tool >/dev/null || fail "$tool is needed (scripts/test.sh installs it)"; done
for port in 8081 8082 8083 4201 4202 4203 6201 6202 6203; do
	if python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1',$port))" 2>/dev/null; then :; else
		fail "port $port is in use: the README's fleet uses 8081-8083, 4201-4203 and 6201-6203"
	fi
done

# block NAME: the sh block after the README's <!-- NAME --> marker.
block() {
	awk -v m="<!-- $1 -->" '$0 == m {on=1; next} on && /^```sh/ {inblock=1; next} inblock && /^```/ {exit} inblock {print}' "$root/README.md"
}
for b in fleet-start fleet-work fleet-kill; do
	[ -n "$(block $b)" ] || fail "no <!-- $b --> block in README.md"
done

step "building (the README's go build, run in the repository)"
. "$root/scripts/prebuilt.sh"
prebuilt leasehold "$work/leasehold" || (cd "$root" && go build -o "$work/leasehold" ./cmd/leasehold)

now() { date +%s.%N; }
since() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }
# until_ok SECONDS WHAT CMD...: polls CMD every 0.2 s, fails after SECONDS.
until_ok() {
	local limit=$1 what=$2 end
	shift 2
	end=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || fail "waited ${limit}s for $what"
		sleep 0.2
	done
}
admin_get() { # NODE PATH
	curl -sf -H @<(printf 'Authorization: Bearer %s\n' "$(cat "$work/fleet-data/n$1/admin.token")") "http://127.0.0.1:808$1/api/v1$2"
}
# held_at NODE: the groups NODE granted to w1 (its own catalog's leases).
held_at() {
	local g
	for g in 1 2 3 4 5 6; do
		admin_get "$1" "/groups/alt.fleet.$g" | jq -r 'select(.lease != null and .lease.node == "w1") | .name'
	done
}
some_held_at() { [ -n "$(held_at "$1")" ]; }
done_at() { # NODE GROUP...: ranges done at NODE over the groups
	local n=$1 sum=0 d g
	shift
	for g in "$@"; do
		d=$(admin_get "$n" "/groups/$g" | jq '.ranges.done // 0')
		sum=$((sum + d))
	done
	echo "$sum"
}

cd "$work"
step "block fleet-start: three nodes"
t0=$(now)
# The README's build line runs in the repository; here the binary is built.
block fleet-start | sed 's#^go build -o leasehold ./cmd/leasehold$#true#' >"$out/start.sh"
timeout 120 bash -e "$out/start.sh" || fail "the fleet-start block failed or did not end in 120s"
step "all three ready $(since "$t0") s after the block began"
# Each node has its own data dir beside the others', none inside another's
# nor in ./data, the lone node's of the README's start.
[ ! -e data ] || fail "the fleet-start block wrote into ./data, the lone node's data dir"
for i in 1 2 3; do
	[ -s "fleet-data/n$i/catalog.db" ] || fail "n$i's data dir is not fleet-data/n$i"
done
for i in 1 2 3; do
	took=$(grep -o 'joined the fleet.*took=[0-9.]*[a-zµ]*' "fleet-data/n$i.log" | grep -o 'took=.*' | head -1)
	step "  n$i: $took"
done

step "block fleet-work: six groups at n1, a worker with n1's token and n3 first"
{
	block fleet-work
	echo 'printf "%s\n" "$N" >.out/token'
} >"$out/work.sh"
t1=$(now)
timeout 60 bash -e "$out/work.sh" || fail "the fleet-work block failed"
[ -s fleet-data/w1.pid ] || fail "the fleet-work block wrote no fleet-data/w1.pid"
until_ok 60 "the worker to hold a group granted by n3" some_held_at 3
step "the worker holds $(held_at 3 | tr '\n' ' ')at n3, $(since "$t1") s after its start"
n3groups=$(held_at 3 | tr '\n' ' ')
# shellcheck disable=SC2086
some_done_at_n3() { [ "$(done_at 3 $n3groups)" -gt 0 ]; }
until_ok 60 "a range done at n3" some_done_at_n3
step "ranges done at n3: $(done_at 3 $n3groups), $(since "$t1") s after the worker's start"

moved() {
	local g owner
	for g in $n3groups; do
		owner=$(admin_get 1 "/groups/$g" | jq -r '.peer.owner // "n1"')
		[ "$owner" != n3 ] || return 1
	done
}
step "block fleet-kill: kill -9 n3"
t2=$(now)
block fleet-kill >"$out/kill.sh"
# n3's groups' new owners are watched from the kill on, beside the steps
# below, so the figure is the takeover's and not the steps' sum.
(
	end=$(($(date +%s) + 90))
	until moved >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || exit 1
		sleep 0.2
	done
	since "$t2" >"$out/moved"
) &
watcher=$!
timeout 30 bash -e "$out/kill.sh" >"$out/kill.out" || fail "the fleet-kill block failed: $(cat "$out/kill.out")"
grep -q '"name":"n3"' "$out/kill.out" || fail "the block's /peers did not list n3: $(cat "$out/kill.out")"
until_ok 60 "the worker to hold a group granted by n1" some_held_at 1
step "the worker holds $(held_at 1 | tr '\n' ' ')at n1, $(since "$t2") s after the kill"
n3_down() { admin_get 1 /peers | jq -e '.peers[] | select(.name == "n3" and .state == "down")'; }
until_ok 60 "n1's /peers to say n3 is down" n3_down
step "n1's /peers: n3 down $(since "$t2") s after the kill"
jar=$out/cookies
curl -sf -c "$jar" -o /dev/null -H 'Origin: http://127.0.0.1:8081' --data-urlencode "token=$(cat fleet-data/n1/admin.token)" http://127.0.0.1:8081/signin ||
	fail "signing in to n1's dashboard"
curl -sf -b "$jar" http://127.0.0.1:8081/fleet >"$out/fleet.html" || fail "GET /fleet at n1"
python3 - "$out/fleet.html" <<'EOF' || fail "n1's fleet page does not name n3 down"
import re, sys
page = open(sys.argv[1]).read()
rows = [r for r in re.findall(r"<tr.*?</tr>", page, re.S) if ">n3<" in r or "n3" in re.sub(r"<[^>]+>", " ", r).split()]
sys.exit(0 if any("down" in r for r in rows) else 1)
EOF
step "n1's fleet page names n3 down"
wait "$watcher" || fail "n3's groups ($n3groups) got no new owner within 90 s of the kill"
step "n3's groups have new owners $(cat "$out/moved") s after the kill:$(for g in $n3groups; do printf ' %s at %s' "$g" "$(admin_get 1 "/groups/$g" | jq -r '.peer.owner // "n1"')"; done)"
step "ok: three nodes, a worker with one token and three URLs, its node killed, the fleet says so"
