#!/usr/bin/env bash
# smoke.sh: drives the real leasehold binary the way a newcomer would. It
# runs the README's curl walkthrough word for word, then checks a takeover
# after the lease TTL, fencing of the old holder, a restart that keeps
# everything, and the command line's refusals. Prints each step; exits
# non-zero at the first thing that is not as the design says.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pid=""
wpid=""
cleanup() {
	[ -n "$wpid" ] && kill -TERM -- -"$wpid" 2>/dev/null || true
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

step() { printf 'smoke: %s\n' "$*"; }
fail() {
	printf 'smoke: FAIL: %s\n' "$*" >&2
	[ -f "$tmp/node.log" ] && tail -20 "$tmp/node.log" >&2
	exit 1
}

for tool in curl jq; do command -v $tool >/dev/null || fail "$tool is needed (scripts/test.sh installs it)"; done

step "building the binary"
. "$root/scripts/prebuilt.sh"
prebuilt leasehold "$tmp/leasehold" || (cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold)
bin=$tmp/leasehold

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18080)
work=$tmp/work
mkdir -p "$work"

start_node() {
	(cd "$work" && exec "$bin" serve --listen "127.0.0.1:$port" --lease-ttl 2s --nats-listen 127.0.0.1:0 "$@" >>"$tmp/node.log" 2>&1) &
	pid=$!
	# /healthz answers at once; /readyz once the node has joined its fleet
	# (peer sync is on by default), which is when a newcomer's first calls
	# can lease.
	for _ in $(seq 1 200); do
		curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || fail "the node exited at start"
		sleep 0.05
	done
	fail "the node did not answer /readyz within 10s"
}

step "starting leasehold serve on 127.0.0.1:$port (data in ./data, lease TTL 2s, embedded NATS on a free port)"
start_node
[ "$(stat -c %a "$work/data/admin.token")" = 600 ] || fail "data/admin.token is not mode 0600"

step "running the README's curl walkthrough as written"
# The walkthrough is the block after the README's "walkthrough" marker.
awk '/<!-- walkthrough -->/{on=1; next} on && /^```sh/{inblock=1; next} inblock && /^```/{exit} inblock{print}' "$root/README.md" \
	| sed "s#127.0.0.1:8080#127.0.0.1:$port#g" >"$tmp/walkthrough.sh"
[ -s "$tmp/walkthrough.sh" ] || fail "no walkthrough found in README.md"
grep -q 'leases/$G/release' "$tmp/walkthrough.sh" || fail "the README walkthrough lacks the release step"
cat >>"$tmp/walkthrough.sh" <<'EOF'
printf '%s\n' "$T" >"$OUT/admin"; printf '%s\n' "$N" >"$OUT/w1"; printf '%s\n' "$G" >"$OUT/group"; printf '%s\n' "$F" >"$OUT/fence"
EOF
# The README makes the window to upload just before the walkthrough.
echo 'the window a worker carries' | gzip >"$work/window.gz"
(cd "$work" && OUT=$tmp bash -e "$tmp/walkthrough.sh" >"$tmp/walkthrough.out") || fail "the walkthrough failed: $(cat "$tmp/walkthrough.out")"
cmp -s "$work/window.gz" "$work/back.gz" || fail "back.gz differs from window.gz"
T=$(cat "$tmp/admin"); W1=$(cat "$tmp/w1"); G=$(cat "$tmp/group")
U=http://127.0.0.1:$port/api/v1
H="Authorization: Bearer $T"
g=$(curl -fs -H "$H" "$U/groups/alt.binaries.test")
[ "$(jq .ranges.done <<<"$g")" = 1 ] || fail "after the walkthrough: $g"
[ "$(jq .lease <<<"$g")" = null ] || fail "the group is still held after release: $g"
step "walkthrough ok: 1 range done, snapshot round-tripped, group released"

step "takeover: w1 takes the group and goes quiet; after the TTL w2 takes it over"
W2=$(curl -fs -XPOST -H "$H" "$U/nodes" -d '{"name":"w2"}' | jq -r .token)
l1=$(curl -fs -XPOST -H "Authorization: Bearer $W1" "$U/leases")
F1=$(jq .fence <<<"$l1")
[ "$(jq .snapshot.next <<<"$l1")" = 1001 ] || fail "w1's lease lacks the snapshot: $l1"
r1=$(curl -fs -XPOST -H "Authorization: Bearer $W1" "$U/leases/$G/next" -d "{\"fence\":$F1}")
R1=$(jq .range.id <<<"$r1")
[ "$(jq .range.start <<<"$r1")" = 1001 ] || fail "w1's range after the snapshot: $r1"
curl -fs -XPOST -H "Authorization: Bearer $W1" "$U/ranges/$R1/progress" -d "{\"fence\":$F1,\"next\":1500}" >/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST -H "Authorization: Bearer $W2" "$U/leases")
[ "$code" = 204 ] || fail "w2 got $code while w1's lease is alive, want 204"
sleep 2.5
l2=$(curl -fs -XPOST -H "Authorization: Bearer $W2" "$U/leases")
F2=$(jq .fence <<<"$l2")
[ "$(jq .group.id <<<"$l2")" = "$G" ] && [ "$(jq .takeover <<<"$l2")" = true ] && [ "$F2" -gt "$F1" ] ||
	fail "after the TTL w2 got $l2, want a takeover of group $G above fence $F1"
r2=$(curl -fs -XPOST -H "Authorization: Bearer $W2" "$U/leases/$G/next" -d "{\"fence\":$F2}")
# The snapshot is at 1001, so range 1001-2000 is redone from 1001.
[ "$(jq .range.id <<<"$r2")" = "$R1" ] && [ "$(jq .range.next <<<"$r2")" = 1001 ] ||
	fail "w2's range $r2, want range $R1 replanned from the snapshot's 1001"
step "takeover ok: fence $F1 -> $F2, range $R1 replanned from the snapshot's next"

step "fencing: w1's calls at fence $F1 are refused and change nothing"
before=$(curl -fs -H "$H" "$U/groups/alt.binaries.test/ranges")
for call in "leases/$G/heartbeat {\"fence\":$F1}" "ranges/$R1/finish {\"fence\":$F1,\"headers\":5}" "ranges/$R1/progress {\"fence\":$F1,\"next\":1900}" "leases/$G/release {\"fence\":$F1}"; do
	set -- $call
	out=$(curl -s -w '\n%{http_code}' -XPOST -H "Authorization: Bearer $W1" "$U/$1" -d "$2")
	[ "$(tail -1 <<<"$out")" = 409 ] && [ "$(head -1 <<<"$out" | jq -r .error.code)" = lease_lost ] || fail "stale $1 answered $out"
done
code=$(curl -s -o /dev/null -w '%{http_code}' -XPUT -H "Authorization: Bearer $W1" --data-binary @"$work/window.gz" "$U/leases/$G/snapshot?fence=$F1&next=1900")
[ "$code" = 409 ] || fail "a stale snapshot upload answered $code"
after=$(curl -fs -H "$H" "$U/groups/alt.binaries.test/ranges")
[ "$before" = "$after" ] || fail "refused calls changed the ranges"
step "fencing ok: 5 stale calls got 409 lease_lost, ranges unchanged"

step "restart: SIGTERM, start again on the same data"
curl -fs -XPOST -H "Authorization: Bearer $W2" "$U/ranges/$R1/progress" -d "{\"fence\":$F2,\"next\":1700}" >/dev/null
kill -TERM "$pid"
wait "$pid" || fail "the node exited non-zero on SIGTERM"
pid=""
grep -q "catalog flushed and closed" "$tmp/node.log" || fail "no clean shutdown in the log"
start_node
[ "$(cat "$work/data/admin.token")" = "$T" ] || fail "the admin token changed across the restart"
g=$(curl -fs -H "$H" "$U/groups/alt.binaries.test")
[ "$(jq .lease.fence <<<"$g")" = "$F2" ] && [ "$(jq .lease.node <<<"$g")" = '"w2"' ] || fail "the lease after restart: $g"
r=$(curl -fs -H "$H" "$U/groups/alt.binaries.test/ranges?status=leased")
[ "$(jq '.ranges[0].next' <<<"$r")" = 1700 ] || fail "the acknowledged progress was lost: $r"
curl -fs -H "$H" -o "$tmp/again.gz" "$U/groups/alt.binaries.test/snapshot"
cmp -s "$work/window.gz" "$tmp/again.gz" || fail "the snapshot changed across the restart"
# The node runs peer sync (the default): a restarted node treats every
# lease of its earlier life as lost, since another node could have taken
# the group over meanwhile; w2 leases again and resumes from the window.
out=$(curl -s -w '\n%{http_code}' -XPOST -H "Authorization: Bearer $W2" "$U/leases/$G/heartbeat" -d "{\"fence\":$F2}")
[ "$(tail -1 <<<"$out")" = 409 ] && grep -q lease_lost <<<"$out" || fail "w2's heartbeat at its old fence after restart: $out (want 409 lease_lost)"
step "restart ok: progress and snapshot kept, token reused, the old lease refused (409 lease_lost)"

step "the README's worker right after its walkthrough, on a fresh node: the walkthrough's window is no window of the worker's source"
kill -TERM "$pid"
wait "$pid" || fail "the node exited non-zero on SIGTERM"
pid=""
work=$tmp/work2
mkdir -p "$work"
: >"$tmp/node.log"
start_node
echo 'the window a worker carries' | gzip >"$work/window.gz"
(cd "$work" && OUT=$tmp bash -e "$tmp/walkthrough.sh" >"$tmp/walkthrough.out") || fail "the walkthrough failed on the fresh node: $(cat "$tmp/walkthrough.out")"
T=$(cat "$tmp/admin")
H="Authorization: Bearer $T"
awk '/<!-- worker -->/{on=1; next} on && /^```sh/{inblock=1; next} inblock && /^```/{exit} inblock{print}' "$root/README.md" \
	| sed "s#go run ./cmd/leasehold#$bin#g" >"$tmp/worker.sh"
grep -q ' worker ' "$tmp/worker.sh" || fail "no worker block found in README.md"
# In a session of its own, so stopping it stops the worker it starts.
(cd "$work" && LEASEHOLD_URL=http://127.0.0.1:$port exec setsid bash -e "$tmp/worker.sh" >"$tmp/worker.log" 2>&1) &
wpid=$!
q=null
for _ in $(seq 1 200); do
	q=$(curl -fs -H "$H" "$U/groups/alt.binaries.test" | jq -c .quarantine)
	[ "$q" != null ] && break
	kill -0 "$wpid" 2>/dev/null || fail "the worker exited: $(tail -5 "$tmp/worker.log")"
	sleep 0.05
done
[ "$q" != null ] || fail "the group was not quarantined within 10s; the worker's log: $(tail -5 "$tmp/worker.log")"
[ "$(jq -r .node <<<"$q")" = w2 ] && [ -n "$(jq -r .error <<<"$q")" ] || fail "the quarantine names no worker or no error: $q"
# Quarantined means leased to nobody: the worker, idle, asks again and
# again and is never given the group (checked through 3 lease TTLs).
for _ in $(seq 1 60); do
	g=$(curl -fs -H "$H" "$U/groups/alt.binaries.test")
	[ "$(jq .lease <<<"$g")" = null ] && [ "$(jq -c .quarantine <<<"$g")" = "$q" ] || fail "the quarantined group was leased again or lifted: $g"
	sleep 0.1
done
f=$(curl -fs -H "$H" "$U/findings")
[ "$(jq '[.stuck[] | select(.kind == "window_unreadable")] | length' <<<"$f")" = 1 ] || fail "want one window_unreadable finding: $f"
[ "$(grep -c 'group quarantined' "$tmp/node.log")" = 1 ] || fail "want one quarantine line in the node's log: $(grep quarantin "$tmp/node.log")"
[ "$(grep -c 'released group' "$tmp/worker.log")" = 1 ] || fail "the worker released more than once (a loop?): $(cat "$tmp/worker.log")"
kill -TERM -- -"$wpid"
wait "$wpid" || true
wpid=""
step "quarantine ok: $(jq -r .error <<<"$q" | cut -c1-80); one finding, one log line, no loop"

step "the command line refuses bad input with exit code 2"
set +e
"$bin" serve --lease-ttl bogus >"$tmp/err" 2>&1; rc=$?
[ $rc = 2 ] || fail "a bad flag exited $rc, want 2"
touch "$tmp/not-a-dir"
"$bin" serve --data "$tmp/not-a-dir" --listen 127.0.0.1:0 >"$tmp/err" 2>&1; rc=$?
[ $rc = 2 ] || fail "an unusable data dir exited $rc, want 2: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "the refusal is not one line: $(cat "$tmp/err")"
LEASEHOLD_MAX_ATTEMPTS=zero "$bin" serve >"$tmp/err" 2>&1; rc=$?
[ $rc = 2 ] || fail "a bad LEASEHOLD_MAX_ATTEMPTS exited $rc, want 2"
"$bin" serve --nats-routes nats://127.0.0.1:6222 >"$tmp/err" 2>&1; rc=$?
[ $rc = 2 ] && grep -q -- --nats-cluster-listen "$tmp/err" || fail "--nats-routes without --nats-cluster-listen exited $rc, want 2: $(cat "$tmp/err")"
set -e
"$bin" version | grep -q '^leasehold ' || fail "leasehold version"
step "refusals ok"

echo "smoke: ok"
