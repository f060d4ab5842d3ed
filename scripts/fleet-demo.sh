#!/usr/bin/env bash
# fleet-demo.sh: a leasehold fleet on one machine, with a node crash. It
# builds the binary, starts three node processes (node-a, node-b, node-c)
# whose embedded NATS servers cluster by routes on free loopback ports,
# creates groups at each node with tail and history planned, starts two
# workers at each node, kills node-b with kill -9 while its workers hold
# groups, waits until node-a or node-c own node-b's groups and work on
# them, restarts node-b on its data dir and checks it leases none of the
# groups it lost, waits until node-a's catalog (the whole fleet's state,
# folded) counts every range done, and checks every group's final window
# at its owner against one uninterrupted pass.
#
# node-b's workers are left running while node-b is down: they retry on its
# port, and after the restart they lease from it again.
#
# --plan-alone creates and plans each node's groups while it runs alone
# (--nats off) before the fleet starts, so each group reaches its peers
# with its ranges in one message.
#
# Usage: scripts/fleet-demo.sh [--plan-alone]   (from anywhere; needs Go, curl, jq, python3)
# KEEP=1 keeps the temp dir (catalogs, NATS stores, logs) for a post-mortem.
set -euo pipefail

cd "$(dirname "$0")/.."
plan_alone=""
case "${1:-}" in
--plan-alone) plan_alone=1 ;;
"") ;;
*)
	echo "usage: scripts/fleet-demo.sh [--plan-alone]" >&2
	exit 2
	;;
esac
nodes=(a b c)
per_node=4          # groups created at each node
range_size=500
start=2501
high=5000           # tail: 2501..5000, 5 ranges a group
low=1               # history: 1..2500, 5 ranges a group
lease_ttl=3s
claim_ttl=4s
rate=400            # ids a second per group a worker takes

tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-fleet-demo.XXXXXX")
pids=()
cleanup() {
	status=$?
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	# A node whose peers stopped first has no JetStream quorum left and
	# can wait minutes on a snapshot upload: it gets 15s, then kill -9.
	for _ in $(seq 150); do
		alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ "$alive" -eq 0 ] && break
		sleep 0.1
	done
	for pid in "${pids[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ "$status" -ne 0 ]; then
		echo "fleet-demo: FAILED; logs:" >&2
		for f in "$tmp"/*.log; do
			[ -f "$f" ] && { echo "--- $f" >&2; tail -n 25 "$f" >&2; }
		done
		# Said again last: a CI log keeps only its tail.
		echo "fleet-demo: FAILED: ${why:-a command failed at line ${failed_line:-?}}" >&2
	fi
	[ -n "${KEEP:-}" ] && echo "fleet-demo: kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'failed_line=$LINENO' ERR

step() { echo "fleet-demo: $*"; }
why=""
fail() {
	why="$*"
	echo "fleet-demo: $*" >&2
	exit 1
}

step "building leasehold"
. scripts/prebuilt.sh
prebuilt leasehold "$tmp/leasehold" || go build -o "$tmp/leasehold" ./cmd/leasehold
lh="$tmp/leasehold"

# Nine free loopback ports, held open together so none repeats: HTTP, NATS
# client and NATS route port of each node. node-b restarts on the same ones,
# so its workers and its routes find it again. They come from below the
# kernel's ephemeral range, where no outgoing connection (the nodes' own
# route dials among them) can take one while node-b is down.
read -r -a ports <<<"$(python3 -c '
import random, socket
try:
    high = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    high = 32768
low = max(1024, high - 10000)
s = []
for p in random.sample(range(low, high), high - low):
    x = socket.socket()
    try:
        x.bind(("127.0.0.1", p))
    except OSError:
        x.close()
        continue
    s.append(x)
    if len(s) == 9:
        break
print(" ".join(str(x.getsockname()[1]) for x in s))')"
declare -A http_port nats_port route_port url pid
i=0
routes=""
for n in "${nodes[@]}"; do
	http_port[$n]=${ports[i]}
	nats_port[$n]=${ports[i + 1]}
	route_port[$n]=${ports[i + 2]}
	url[$n]="http://127.0.0.1:${http_port[$n]}"
	routes+="${routes:+,}nats://127.0.0.1:${route_port[$n]}"
	i=$((i + 3))
done

# The fleet's shared secret: the NATS servers ask it of clients and routes.
(umask 077 && head -c 24 /dev/urandom | base64 >"$tmp/nats.secret")

start_node() { # a|b|c
	local n=$1
	"$lh" serve --data "$tmp/$n" --name "node-$n" --listen "127.0.0.1:${http_port[$n]}" \
		--lease-ttl "$lease_ttl" --claim-ttl "$claim_ttl" --nats-secret-file "$tmp/nats.secret" \
		--nats-listen "127.0.0.1:${nats_port[$n]}" --nats-cluster-listen "127.0.0.1:${route_port[$n]}" \
		--nats-routes "$routes" >>"$tmp/node-$n.log" 2>&1 &
	pid[$n]=$!
	pids+=($!)
}

# wait_serving N COUNT: node N's log says "leasehold serving" COUNT times and
# it answers /readyz 200 (a clustered node serves at once, but is ready only
# once it has joined its fleet).
wait_serving() {
	local n=$1 want=$2
	for _ in $(seq 600); do
		kill -0 "${pid[$n]}" 2>/dev/null || fail "node-$n exited while starting"
		if [ "$(grep -c 'msg="leasehold serving"' "$tmp/node-$n.log" || true)" -ge "$want" ] && [ -s "$tmp/$n/admin.token" ] &&
			curl -fs -o /dev/null "http://127.0.0.1:${http_port[$n]}/readyz"; then
			return 0
		fi
		sleep 0.1
	done
	fail "node-$n did not start within 60s"
}

# at N CMD...: run leasehold against node N with its admin token (each node
# has its own).
at() {
	local n=$1
	shift
	LEASEHOLD_URL=${url[$n]} LEASEHOLD_ADMIN_TOKEN=$(cat "$tmp/$n/admin.token") "$lh" "$@"
}

# api N PATH: GET /api/v1/PATH at node N.
api() {
	curl -fsS -H "Authorization: Bearer $(cat "$tmp/$1/admin.token")" "${url[$1]}/api/v1/$2"
}

# owners N: one line a group as node N sees it: name, owner, holder (or -),
# ranges done, ranges in all. A group whose state is a peer's names its
# owner in .peer; one without .peer is node N's own.
owners() {
	local n=$1 g names
	names=$(api "$n" 'groups?limit=1000' | jq -r '.groups[].name') || return 1
	for g in $names; do
		api "$n" "groups/$g" | jq -r --arg self "node-$n" \
			'[.name, (.peer.owner // $self), (if .peer then (.peer.holder | select(. != "") // "-") else (.lease.node // "-") end),
			  .ranges.done, ([.ranges[]] | add)] | @tsv' || return 1
	done
}

create_groups() { # node
	local n=$1 g t h
	for i in $(seq 1 "$per_node"); do
		g="fleet.$n.$i"
		at "$n" admin groups create "$g" --range-size "$range_size" --start "$start" >/dev/null
		t=$(at "$n" admin --json groups tail "$g" "$high" | tr -dc 0-9)
		h=$(at "$n" admin --json groups history "$g" "$low" | tr -dc 0-9)
		ranges=$((ranges + t + h))
	done
}
ranges=0
if [ -n "$plan_alone" ]; then
	step "creating $per_node groups at each node alone (--nats off), planning tail $start..$high and history $low..$((start - 1)) in ranges of $range_size"
	for n in "${nodes[@]}"; do
		"$lh" serve --data "$tmp/$n" --name "node-$n" --listen "127.0.0.1:${http_port[$n]}" --nats off >>"$tmp/node-$n.log" 2>&1 &
		pid[$n]=$!
		wait_serving "$n" 1
		create_groups "$n"
		kill "${pid[$n]}"
		wait "${pid[$n]}"
	done
	serving=2
else
	serving=1
fi

step "starting node-a, node-b and node-c; their NATS servers route to each other ($routes), asking the fleet's secret of clients and routes"
for n in "${nodes[@]}"; do
	start_node "$n"
done
for n in "${nodes[@]}"; do
	wait_serving "$n" "$serving"
	step "node-$n serving at ${url[$n]}"
done

[ -n "$plan_alone" ] || step "creating $per_node groups at each node, planning tail $start..$high and history $low..$((start - 1)) in ranges of $range_size"
for n in "${nodes[@]}"; do
	[ -z "$plan_alone" ] || break
	create_groups "$n"
done
groups=$((per_node * ${#nodes[@]}))
step "$groups groups, $ranges ranges planned"

step "waiting until every node lists all $groups groups and their $ranges ranges"
for n in "${nodes[@]}"; do
	seen=0
	until_s=$((SECONDS + 30))
	while [ "$SECONDS" -lt "$until_s" ]; do
		view=$(owners "$n") || { sleep 0.2; continue; }
		seen=$(awk -v want="$groups" '{ g++; r += $5 } END { print (g == want ? r : 0) }' <<<"$view")
		[ "$seen" -eq "$ranges" ] && break
		sleep 0.2
	done
	[ "$seen" -eq "$ranges" ] || fail "node-$n never listed all $groups groups and $ranges ranges in 30s; it lists:
$view"
	step "node-$n lists $groups groups, $ranges ranges"
done

start_worker() { # node worker-name
	LEASEHOLD_URL=${url[$1]} LEASEHOLD_TOKEN=$(cat "$tmp/$2.token") \
		"$lh" worker --capacity 2 --rate "$rate" --snapshot-every 1s >>"$tmp/$2.log" 2>&1 &
	pids+=($!)
}
# node-b's workers start first, so node-b claims groups for them before
# its peers' workers come: any node claims any free group.
step "registering two workers at each node and starting them, node-b's first (capacity 2 each, $rate ids/s per group)"
for n in "${nodes[@]}"; do
	for w in "w$n"1 "w$n"2; do
		at "$n" admin nodes register "$w" --capacity 2 -q >"$tmp/$w.token"
	done
done
start_worker b wb1
start_worker b wb2
until_s=$((SECONDS + 10))
while [ "$SECONDS" -lt "$until_s" ]; do
	view=$(owners b) || { sleep 0.2; continue; }
	[ "$(awk '$2 == "node-b" && $3 != "-"' <<<"$view" | wc -l)" -ge 2 ] && break
	sleep 0.1
done
for w in wa1 wa2 wc1 wc2; do
	start_worker "${w:1:1}" "$w"
done

# node-b is killed while its workers hold groups it owns, after they have
# finished a few ranges of them, so its successors resume from replicated
# windows.
held=""
until_s=$((SECONDS + 30))
while [ "$SECONDS" -lt "$until_s" ]; do
	view=$(owners b) || { sleep 0.2; continue; }
	held=$(awk '$2 == "node-b" && $3 != "-" && $4 < $5 { print $1 }' <<<"$view" | tr '\n' ' ')
	progressed=$(awk '$2 == "node-b" && $3 != "-" && $4 >= 2 && $4 < $5' <<<"$view" | wc -l)
	[ -n "$held" ] && [ "$progressed" -gt 0 ] && break
	sleep 0.1
done
[ -n "$held" ] && [ "$progressed" -gt 0 ] || fail "node-b's workers never got two ranges into a group node-b owns; node-b lists:
$view"
owned_by_b=$(awk '$2 == "node-b" { print $1 }' <<<"$view" | tr '\n' ' ')
kill -9 "${pid[b]}"
wait "${pid[b]}" 2>/dev/null || true
moved=$(wc -w <<<"$owned_by_b")
step "killed node-b with kill -9; it owned $moved groups: $owned_by_b(its workers held $held)"
step "node-b's workers keep running: they retry on node-b's port"
api a peers | jq -r '"fleet-demo: node-a sees: " + ([.peers[] | "\(.name) owns \(.groups)"] | join(", ")) + "; node-a owns \(.owned)"'

step "waiting until node-a or node-c own node-b's groups (claims lapse after $claim_ttl) and work on them"
until_s=$((SECONDS + 120)) # claim TTL 4s is below the floor: a leader election can cost the survivors their claims first
while [ "$SECONDS" -lt "$until_s" ]; do
	view=$(owners a) || { sleep 0.2; continue; }
	left=$(awk -v lost="$owned_by_b" 'BEGIN { split(lost, l, " "); for (i in l) want[l[i]] = 1 }
		want[$1] && $2 == "node-b"' <<<"$view" | wc -l)
	working=$(awk -v lost="$owned_by_b" 'BEGIN { split(lost, l, " "); for (i in l) want[l[i]] = 1 }
		want[$1] && $2 != "node-b" && ($3 != "-" || $4 == $5)' <<<"$view" | wc -l)
	[ "$left" -eq 0 ] && [ "$working" -gt 0 ] && break
	sleep 0.1
done
[ "$left" -eq 0 ] || fail "$left of node-b's groups still owned by node-b after 120s; node-a lists:
$view"
awk -v lost="$owned_by_b" 'BEGIN { split(lost, l, " "); for (i in l) want[l[i]] = 1 }
	want[$1] { printf "fleet-demo:   %s now owned by %s, held by %s, %d/%d ranges done\n", $1, $2, $3, $4, $5 }' <<<"$view"

step "restarting node-b on its data dir"
declare -A b_log_lines
for w in wb1 wb2; do b_log_lines[$w]=$(wc -l <"$tmp/$w.log"); done
start_node b
wait_serving b $((serving + 1))
step "node-b serving again at ${url[b]}"
# The lost groups their new owners hold now: their claims are kept while
# they are in work, so node-b must lease none of them. (One a new owner
# leaves idle has its claim released, and node-b may claim it back.)
view=$(owners a) || view=""
in_work=$(awk -v lost="$owned_by_b" 'BEGIN { split(lost, l, " "); for (i in l) want[l[i]] = 1 }
	want[$1] && $2 != "node-b" && $3 != "-" && $4 < $5 { print $1 }' <<<"$view" | tr '\n' ' ')
step "of them, $(wc -w <<<"$in_work") are in work at their new owners: $in_work"

# A lost group a new owner has let go (idle) may rightly come back to
# node-b under a newer claim, so only the groups in work elsewhere count.
step "waiting until node-b's catalog names the new owners of the lost groups in work elsewhere"
until_s=$((SECONDS + 30))
while [ "$SECONDS" -lt "$until_s" ]; do
	view=$(owners b) || { sleep 0.2; continue; }
	still=$(awk -v lost="$in_work" 'BEGIN { split(lost, l, " "); for (i in l) want[l[i]] = 1 }
		want[$1] && $2 == "node-b"' <<<"$view" | wc -l)
	[ "$still" -eq 0 ] && break
	sleep 0.1
done
[ "$still" -eq 0 ] || fail "node-b still takes itself for the owner of $still of the groups it lost"

step "waiting until every range is done, as node-a's catalog of the whole fleet counts them"
at a admin wait --timeout 90s --every 500ms 2>&1
done_at_a=$(owners a | awk '{ d += $4; r += $5 } END { print d "/" r }')
[ "$done_at_a" = "$ranges/$ranges" ] || fail "node-a counts $done_at_a ranges done, want $ranges/$ranges"
step "node-a counts $done_at_a ranges done"

# Since it came back, node-b must have leased none of the groups it lost
# that were in work elsewhere.
since_restart() {
	for w in wb1 wb2; do tail -n +"$((b_log_lines[$w] + 1))" "$tmp/$w.log"; done
}
leased_back() { # groups...
	[ $# -gt 0 ] || return 0
	since_restart | grep 'msg="leased group"' | grep -F -f <(printf 'group=%s \n' "$@") || true
}
# shellcheck disable=SC2086 # word splitting of the group lists is wanted
relapsed=$(leased_back $in_work)
[ -z "$relapsed" ] || fail "node-b leased groups it lost while their new owners had them in work:
$relapsed"
# shellcheck disable=SC2086
reclaimed=$(leased_back $owned_by_b | sed 's/.* group=\([^ ]*\) .*/\1/' | sort -u | tr '\n' ' ')
step "node-b leased none of the $(wc -w <<<"$in_work") lost groups in work elsewhere${reclaimed:+; it claimed back idle ones: $reclaimed}"

# shellcheck disable=SC2086
resumed=$(grep -h 'msg="peers: adopted a group with its replicated snapshot"' "$tmp"/node-a.log "$tmp"/node-c.log |
	grep -F -f <(printf 'group=%s \n' $owned_by_b) | sed 's/.* group=\([^ ]*\) .*/\1/' | sort -u | wc -l || true)
step "$resumed of the lost groups were adopted with their replicated snapshots"

step "verifying every group's window at its owner against an uninterrupted pass"
declare -A verified
for _ in $(seq 10); do
	for n in "${nodes[@]}"; do
		at "$n" worker --verify >"$tmp/verify-$n.log" 2>&1 || fail "verify at node-$n: $(cat "$tmp/verify-$n.log")"
		for g in $(sed -n 's/^verify: \([^ :]*\): ids .* match$/\1/p' "$tmp/verify-$n.log"); do
			verified[$g]=node-$n
		done
	done
	[ "${#verified[@]}" -eq "$groups" ] && break
	sleep 0.5 # a finished group's claim may be moving between owners
done
[ "${#verified[@]}" -eq "$groups" ] || fail "only ${#verified[@]} of $groups groups verified at an owner; the nodes said:
$(grep -hv ': ids .* match$' "$tmp"/verify-*.log)"
for n in "${nodes[@]}"; do
	c=0
	for g in "${!verified[@]}"; do [ "${verified[$g]}" = "node-$n" ] && c=$((c + 1)); done
	step "  $c groups verified at node-$n"
done

echo "fleet-demo: $groups groups, $ranges ranges, node-b killed and restarted, $moved groups moved, windows match"
