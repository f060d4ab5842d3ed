#!/usr/bin/env bash
# usenet-demo.sh: leasehold indexing a real news server end to end, with a
# crash. It starts Debian's INN on 127.0.0.1 (scripts/inn.sh, root; it
# installs it when missing), posts a fixed article set, generated
# multi-part files and a realistic mix of yEnc posts (a 15-file release
# with par2 volumes cross-posted to both groups, an obfuscated [PRiVATE]
# post, an RFC 2047 subject, a doubled part counter, a 10-part file
# missing a part, a repost) into two fresh groups, starts a node, creates
# the groups (nothing planned by hand: the worker reports their water
# marks), runs `leasehold worker --source nntp://… --nzb DIR` and kills it
# with kill -9 in the middle of a group, starts it again, waits until both
# groups are done, then indexes the same groups again at a second node
# with one uninterrupted worker, and checks that the files and releases
# of the first run (the last line of each key) and its NZBs equal the
# second's. It prints the mix's releases and the incomplete file, has
# Debian's NZBGet download the complete releases from their NZBs, checks
# every file byte for byte against what was posted, and prints the
# uninterrupted worker's headers a second.
#
# Into two groups of their own it posts the shapes today's posting tools
# give posts (usenettest.Shapes: releases of one poster in Nyuu's default
# subject with the same file count, a release posted in two halves 5
# hours and USENET_DEMO_FILLERS articles apart, files without counters,
# a cross-post to different group sets, a par2 volume set, a
# multi-volume rar, a 3,000-byte subject, a Windows-1252 subject, a file
# missing a part, two films of one poster tagged [MOVIE]), indexed by the same crashed and uninterrupted
# workers; it prints the releases it got as a user sees them, checks
# each against what was posted (name, poster, groups, files, complete),
# and has NZBGet download each complete one's NZB as a job of its own,
# whose files must be exactly that release's, byte for byte.
#
# Usage: sudo scripts/usenet-demo.sh    (needs Go, jq, nzbget, root for INN)
#   USENET_DEMO_FILES       generated files of 20 parts each (default 200)
#   USENET_DEMO_RANGE_SIZE  the groups' range size (default 200)
#   USENET_DEMO_BATCH       article numbers an OVER asks for (default 100)
#   USENET_DEMO_FILLERS     plain articles between the two halves of the
#                           release posted in two halves (default 1000;
#                           250000 is an indexer's day, minutes to post)
set -euo pipefail

cd "$(dirname "$0")/.."
files="${USENET_DEMO_FILES:-200}"
range_size="${USENET_DEMO_RANGE_SIZE:-200}"
batch="${USENET_DEMO_BATCH:-100}"
fillers="${USENET_DEMO_FILLERS:-1000}"
ttl=2s
command -v jq >/dev/null || { echo "usenet-demo: needs jq" >&2; exit 1; }
command -v nzbget >/dev/null || { echo "usenet-demo: needs nzbget (apt-get install nzbget)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-usenet.XXXXXX")
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
		echo "usenet-demo: FAILED; logs:" >&2
		for f in "$tmp"/*.log; do
			[ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
		done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

step() { echo "usenet-demo: $*"; }

step "starting INN (scripts/inn.sh start)"
inn_env=$(bash scripts/inn.sh start)
eval "$inn_env"
prefix="demo.t$(date +%s%N)"
a="$prefix.a"
b="$prefix.b"
step "posting the fixed set, $files files of 20 parts and the yEnc mix into $a and $b"
bash scripts/inn.sh post "$prefix" "$files" "$tmp/posted"
sa="$prefix.shapes.a"
sb="$prefix.shapes.b"
step "posting the shapes of today's posting tools into $sa and $sb ($fillers articles between the halves)"
bash scripts/inn.sh shapes "$prefix.shapes" "$tmp/shapes" "$fillers"
groups=("$a" "$b" "$sa" "$sb")

step "building leasehold"
. scripts/prebuilt.sh
prebuilt leasehold "$tmp/leasehold" || go build -o "$tmp/leasehold" ./cmd/leasehold
lh="$tmp/leasehold"

start_node() { # dir log: sets url
	# Each node makes its own admin token (not the last node's from the
	# environment).
	env -u LEASEHOLD_ADMIN_TOKEN -u LEASEHOLD_URL "$lh" serve --data "$1" --listen 127.0.0.1:0 --lease-ttl "$ttl" --nats off >"$2" 2>&1 &
	pids+=($!)
	url=""
	for _ in $(seq 100); do
		url=$(sed -n 's/.*msg="leasehold serving".* url=\(http:[^ ]*\).*/\1/p' "$2" | head -n 1)
		[ -n "$url" ] && [ -s "$1/admin.token" ] && break
		sleep 0.1
	done
	[ -n "$url" ] && [ -s "$1/admin.token" ] || { echo "usenet-demo: the node did not start" >&2; exit 1; }
}

# setup_node URL DIR: the groups (nothing planned), a worker node w1.
setup_node() {
	export LEASEHOLD_URL="$1" LEASEHOLD_ADMIN_TOKEN
	LEASEHOLD_ADMIN_TOKEN=$(cat "$2/admin.token")
	for g in "${groups[@]}"; do
		"$lh" admin groups create "$g" --kind nntp --range-size "$range_size" >/dev/null
	done
	"$lh" admin nodes register w1 --kinds nntp --capacity 2 -q >"$2/w1.token"
}

start_worker() { # url tokenfile out log nzbdir
	LEASEHOLD_TOKEN=$(cat "$2") "$lh" worker --url "$1" --source "nntp://$LEASEHOLD_TEST_NNTP" --out "$3" --nzb "$5" \
		--capacity 2 --batch "$batch" --snapshot-every 1s --watermark-every 1s >"$4" 2>&1 &
	pids+=($!)
	last_pid=$!
}

# caught_up: every group's tail planned up to its reported high mark.
caught_up() {
	for g in "${groups[@]}"; do
		"$lh" admin --json groups show "$g" | jq -e '.high != null and .tail_end == .high' >/dev/null || return 1
	done
}

wait_done() {
	for _ in $(seq 600); do
		caught_up && break
		sleep 0.1
	done
	caught_up || { echo "usenet-demo: the worker never reported the water marks" >&2; exit 1; }
	"$lh" admin wait --timeout 300s --every 200ms >/dev/null
}

step "starting a node; creating ${groups[*]} with nothing planned"
start_node "$tmp/data1" "$tmp/node1.log"
setup_node "$url" "$tmp/data1"
start_worker "$url" "$tmp/data1/w1.token" "$tmp/killed.jsonl" "$tmp/w1.log" "$tmp/nzb-killed"
w1=$last_pid

# Kill the worker with SIGKILL in the middle of group a.
for _ in $(seq 3000); do
	ranges=$("$lh" admin --json groups show "$a" | jq -c '.ranges')
	if echo "$ranges" | jq -e '.done >= 2 and (.planned + .leased) > 0' >/dev/null; then
		break
	fi
	sleep 0.01
done
echo "$ranges" | jq -e '.done >= 2 and (.planned + .leased) > 0' >/dev/null ||
	{ echo "usenet-demo: could not catch the worker in the middle of $a: $ranges" >&2; exit 1; }
kill -9 "$w1"
wait "$w1" 2>/dev/null || true
step "killed the worker with kill -9 in the middle of $a (ranges $ranges); its groups wait out the TTL ($ttl)"
start_worker "$url" "$tmp/data1/w1.token" "$tmp/killed.jsonl" "$tmp/w1-again.log" "$tmp/nzb-killed"
wait_done
grep -q 'takeover=true' "$tmp/w1-again.log" || { echo "usenet-demo: the restarted worker took nothing over" >&2; exit 1; }
step "the groups done after the crash: $(wc -l <"$tmp/killed.jsonl") lines in killed.jsonl"

step "indexing the same groups at a second node, uninterrupted"
start_node "$tmp/data2" "$tmp/node2.log"
url2=$url
setup_node "$url2" "$tmp/data2"
t0=$(date +%s.%N)
start_worker "$url2" "$tmp/data2/w1.token" "$tmp/once.jsonl" "$tmp/once.log" "$tmp/nzb-once"
wait_done
t1=$(date +%s.%N)
headers=0 # every article low..high is there: the groups are fresh
for g in "${groups[@]}"; do
	headers=$((headers + $("$lh" admin --json groups show "$g" | jq '.high - .low + 1')))
done

# The last line of each key, sorted by key.
final() { jq -s -c 'map({(.key): .}) | add | to_entries | sort_by(.key) | map(.value)[]' "$1"; }
final "$tmp/killed.jsonl" >"$tmp/killed.final"
final "$tmp/once.jsonl" >"$tmp/once.final"
if ! cmp -s "$tmp/killed.final" "$tmp/once.final"; then
	echo "usenet-demo: the files after the crash differ from one uninterrupted pass:" >&2
	diff "$tmp/killed.final" "$tmp/once.final" | head -20 >&2
	exit 1
fi
if ! diff -r "$tmp/nzb-killed" "$tmp/nzb-once" >"$tmp/nzb.diff"; then
	echo "usenet-demo: the NZBs after the crash differ from one uninterrupted pass:" >&2
	head -c 3000 "$tmp/nzb.diff" >&2
	exit 1
fi
nfiles=$(jq -s '[.[] | select(.type == "file")] | length' "$tmp/killed.final")
nreleases=$(jq -s '[.[] | select(.type == "release")] | length' "$tmp/killed.final")

step "the mix's releases (name: files of announced, complete):"
jq -r 'select(.type == "release" and (.poster | test("mix.example"))) |
	"  \(.name): \(.complete_files)/\(.total_files // .files) files complete, complete=\(.complete), \(.groups | join(" ")), nzb \(.nzb)"' "$tmp/killed.final"
step "incomplete files written:"
jq -r 'select(.type == "file" and .complete == false) | "  \(.name) by \(.poster): \(.parts) of \(.total) parts"' "$tmp/killed.final"
jq -e -s '[.[] | select(.type == "file" and .name == "mix.ten.bin" and .complete == false and .parts == 9)] | length == 1' "$tmp/killed.final" >/dev/null ||
	{ echo "usenet-demo: the 10-part file missing a part was not written incomplete" >&2; exit 1; }
jq -e -s '[.[] | select(.type == "release" and .complete and (.poster | test("mix.example")))] | length == 4' "$tmp/killed.final" >/dev/null ||
	{ echo "usenet-demo: the mix's four complete releases are not all complete" >&2; exit 1; }

# NZBGet reads from an nnrpd of its own: it never sends MODE READER, and
# innd takes 127.0.0.1 for a peer.
port=$((20000 + RANDOM % 20000))
setpriv --reuid=news --regid=news --init-groups /usr/lib/news/bin/nnrpd -D -f -b 127.0.0.1 -p "$port" >"$tmp/nnrpd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done
# nzbget_job NZB DIR: NZBGet downloads NZB as one job into DIR.
nzbget_job() {
	local get="$2"
	nzbget -n -o MainDir="$get" -o DestDir="$get/dst" -o InterDir="$get/inter" -o TempDir="$get/tmp" -o QueueDir="$get/queue" \
		-o NzbDir="$get/nzb" -o LogFile="$get/nzbget.log" -o WriteLog=append -o LockFile="$get/nzbget.lock" -o ScriptDir="$get/scripts" \
		-o WebDir= -o ConfigTemplate= -o ControlIP=127.0.0.1 -o ControlPort=0 -o OutputMode=loggable \
		-o Server1.Active=yes -o Server1.Host=127.0.0.1 -o Server1.Port="$port" -o Server1.Connections=2 -o Server1.Level=0 \
		-o ParCheck=force -o ParRepair=yes -o Unpack=no -o DirectRename=no -o FileNaming=article -o CrcCheck=yes \
		"$1" >>"$tmp/nzbget.out" 2>&1
}
step "NZBGet downloads the mix's complete releases from their NZBs (nnrpd on 127.0.0.1:$port)"
get="$tmp/nzbget"
for nzb in $(jq -r 'select(.type == "release" and .complete and (.poster | test("mix.example"))) | .nzb' "$tmp/killed.final"); do
	nzbget_job "$tmp/nzb-killed/$nzb" "$get"
done
# Every posted file must be among the downloaded ones, byte for byte (by
# content: NZBGet may spell a name with other characters).
find "$get/dst" "$get/inter" -type f -exec sha256sum {} + 2>/dev/null | awk '{ print $1 }' | sort -u >"$tmp/downloaded.sums"
rebuilt=0
for f in "$tmp"/posted/*; do
	sum=$(sha256sum "$f" | awk '{ print $1 }')
	grep -qx "$sum" "$tmp/downloaded.sums" || { echo "usenet-demo: NZBGet did not rebuild $(basename "$f") byte for byte" >&2; tail -n 30 "$get/nzbget.log" >&2; exit 1; }
	rebuilt=$((rebuilt + 1))
done
step "NZBGet rebuilt all $rebuilt complete files of the mix byte for byte"

# The shapes' releases as a user sees them, each against what was posted.
step "the shapes' releases (name by poster: files, complete, groups, NZB):"
jq -r 'select(.type == "release" and (.poster | test("shapes.example"))) |
	"  \(.name | if length > 48 then .[:40] + "… (\(length) chars)" else . end) by \(.poster):" +
	" \(.complete_files)/\(.files) files complete\(if .total_files then " of \(.total_files) announced" else ", no file counters" end)," +
	" complete=\(.complete), \(.groups | map(split(".") | .[-1]) | join("+")), nzb \(.nzb | .[:60])"' "$tmp/killed.final"
jq -n -r --slurpfile posted "$tmp/shapes/releases.json" --slurpfile got <(jq -c 'select(.type == "release" and (.poster | test("shapes.example")))' "$tmp/killed.final") '
	$posted[0][] as $p |
	[$got[] | select(.name == $p.name and .poster == $p.poster)] as $r |
	if ($r | length) != 1 or $r[0].files != ($p.files | length) or $r[0].complete != $p.complete or ($r[0].groups | sort) != $p.groups
	then "\($p.shape): \($p.name[:40]) by \($p.poster): got \($r | map({files, complete, groups}))" else empty end' >"$tmp/shapes.wrong"
posted_releases=$(jq length "$tmp/shapes/releases.json")
got_releases=$(jq -s '[.[] | select(.type == "release" and (.poster | test("shapes.example")))] | length' "$tmp/killed.final")
if [ -s "$tmp/shapes.wrong" ] || [ "$posted_releases" != "$got_releases" ]; then
	echo "usenet-demo: the shapes' releases are not as posted ($got_releases releases, $posted_releases posted):" >&2
	cat "$tmp/shapes.wrong" >&2
	exit 1
fi
step "all $posted_releases releases of the shapes as posted (name, poster, groups, files, complete)"
# Each complete release's NZB a job of its own, which must rebuild
# exactly that release's files, byte for byte.
jobs=0
for i in $(seq 0 $((posted_releases - 1))); do
	jq -e ".[$i].complete" "$tmp/shapes/releases.json" >/dev/null || continue
	dir=$(jq -r ".[$i].dir" "$tmp/shapes/releases.json")
	nzb=$(jq -r --slurpfile posted "$tmp/shapes/releases.json" --argjson i "$i" \
		'select(.type == "release" and .name == $posted[0][$i].name and .poster == $posted[0][$i].poster) | .nzb' "$tmp/killed.final")
	nzbget_job "$tmp/nzb-killed/$nzb" "$tmp/shapes-get/$dir"
	(cd "$tmp/shapes/$dir" && sha256sum -- * | sort) >"$tmp/shapes-want.sums"
	# (InterDir is not made when nothing was left there.)
	{ find "$tmp/shapes-get/$dir/dst" "$tmp/shapes-get/$dir/inter" -type f -exec sha256sum {} + 2>/dev/null || true; } |
		awk '{ n = $0; sub(/^[0-9a-f]+  /, "", n); sub(/.*\//, "", n); print $1 "  " n }' | sort >"$tmp/shapes-got.sums"
	if ! cmp -s "$tmp/shapes-want.sums" "$tmp/shapes-got.sums"; then
		echo "usenet-demo: NZBGet's job of $nzb did not rebuild exactly its release's files:" >&2
		diff "$tmp/shapes-want.sums" "$tmp/shapes-got.sums" >&2 || true
		tail -n 30 "$tmp/shapes-get/$dir/nzbget.log" >&2
		exit 1
	fi
	jobs=$((jobs + 1))
done
step "NZBGet downloaded each of the shapes' $jobs complete releases as a job of its own, exactly its files byte for byte"
rate=$(echo "$headers $t0 $t1" | awk '{ printf "%.0f", $1 / ($3 - $2) }')
step "one uninterrupted worker: $headers headers in $(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }') s, $rate headers/s (node and INN on this machine, lease to release)"
echo "usenet-demo: $nfiles files and $nreleases releases, worker killed and restarted, records and NZBs match one uninterrupted pass"
