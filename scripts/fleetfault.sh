#!/usr/bin/env bash
# fleetfault.sh: a Jepsen-style fault run of a leasehold fleet. Three
# nodes, each a `leasehold serve` in a network namespace of its own, made
# by the harness (veth pairs to two bridges in a hub namespace: one
# network for HTTP, one for the NATS routes; nothing in the machine's own
# namespace), with a shared NATS secret, lease TTL 2s and claim TTL 4s.
# Recording workers at every node drive the HTTP API (lease, snapshot get,
# next, progress, finish, snapshot put, release; heartbeats beside) and
# record every call. Faults one at a time, with gaps: SIGKILL and a
# restart on the same data; SIGSTOP past the claim TTL and SIGCONT; a
# partition that takes one node's route veth down at the hub while its
# HTTP stays up. Then a drain, and the check (internal/fleetfault): no
# certain double holding, no acknowledged finish lost, every node
# agreeing, no new holder given a window never uploaded (or an older one
# on the node that acknowledged the newer), final windows covering every
# id; takeovers across nodes from an older replicated window are counted
# as work redone. Prints the figures (faults by kind,
# acknowledged calls checked, takeover latency after each fault,
# violations); exits non-zero on any violation.
#
# Usage: scripts/fleetfault.sh [--short|--long] [--skip-if-unsupported]
#          [--start serial|together] [--kills N --pauses N --partitions N --removes N] [--out DIR]
#          [--nats external] [--upgrade-from REV [--replace term|kill] [--downgrade]]
#          [--burners N]
#   --short    one fault of each kind, serial start, under three minutes
#   --long     twenty faults of each kind
#   --skip-if-unsupported  exit 0, saying why, when not root or ip netns
#              does not work
#   --out DIR  keep the nodes' data and logs and history.jsonl there
#              (default: a temporary directory, removed after a pass)
#   --nats external  the fleet's NATS is a three-server nats-server
#              cluster apart (internal/fleetfault/cmd/natsd, built from the
#              module leasehold depends on), one beside each node on the
#              route network; each fault hits the node's NATS server too
#   --upgrade-from REV  the upgrade mode: the fleet starts on the build of
#              git revision REV (built from `git archive REV` in a
#              temporary directory, so any revision of a clone with its
#              history that builds will do) and, under the load, each node
#              in turn is stopped with SIGTERM (`--replace kill`: SIGKILL),
#              started on this checkout's build with the same data, and
#              waited for (its /readyz, then every node ready and seeing
#              every member up) before the next; no faults unless asked.
#              REV `self` is this checkout's build against itself (so is
#              HEAD on a clean tree); `previous` (or --upgrade alone) is
#              the newest release tag (v*) before HEAD, else HEAD^ (on
#              main, a merge's first parent: main before it). Every check
#              gates, as in the other modes; the summary adds each
#              replacement's stop, time to ready and settle, and the
#              finishes acknowledged before the last one (none may be lost)
#   --downgrade  with --upgrade-from: the other way round, this checkout's
#              build first, replaced by REV's
#   --burners N  N CPU burners (busy-loop processes, at the nodes' nice
#              value, not below it) run from the load's start until the
#              faults are over: the fleet under CPU pressure (2 keeps both
#              cores of a 2-core machine busy). Check (8), no member shown
#              down on a timeline while its life was renewed, gates as in
#              every run; the summary adds the burners' CPU and the load
#              average while they ran, and each takeover after a rejoin
#              against the claim TTL + 5 s (reported, not gated). The
#              trap kills any burner left (their ids are in the run's
#              directory, burners.pid, while they run)
# Other flags go to the harness (fleetfault -h lists them). Needs root and
# iproute2.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=(--short)
args=()
external=""
upgrade=""
downgrade=""
out=""
skip=""
while [ $# -gt 0 ]; do
	case "$1" in
	--short) mode=(--short) ;;
	--long) mode=(--long) ;;
	--skip-if-unsupported) skip=1 ;;
	--out)
		out=$2
		shift
		;;
	--out=*) out=${1#--out=} ;;
	--nats)
		[ "$2" = external ] && external=1
		args+=("$1" "$2")
		shift
		;;
	--upgrade) upgrade=previous ;;
	--upgrade-from)
		upgrade=$2
		shift
		;;
	--upgrade-from=*) upgrade=${1#--upgrade-from=} ;;
	--downgrade) downgrade=1 ;;
	--nats=external)
		external=1
		args+=("$1")
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) args+=("$1") ;;
	esac
	shift
done

# The upgrade's revision, checked before anything is built or made.
[ -z "$downgrade" ] || [ -n "$upgrade" ] || {
	echo "fleetfault: --downgrade needs --upgrade-from REV" >&2
	exit 2
}
if [ -n "$upgrade" ] && [ "$upgrade" != self ]; then
	if [ "$upgrade" = previous ]; then
		upgrade=$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD^ 2>/dev/null || echo HEAD^)
	fi
	rev=$(git rev-parse --verify -q "$upgrade^{commit}") || {
		echo "fleetfault: --upgrade-from $upgrade: no such revision here" >&2
		exit 2
	}
fi

unsupported() {
	if [ -n "$skip" ]; then
		echo "fleetfault: SKIPPED: $*"
		exit 0
	fi
	echo "fleetfault: cannot run here: $*" >&2
	exit 3
}
[ "$(id -u)" = 0 ] || unsupported "not root: making network namespaces needs root"
command -v ip >/dev/null || unsupported "no ip command (iproute2)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-fleetfault.XXXXXX")
[ -n "$out" ] || out="$tmp/run"
mkdir -p "$out"
# The namespaces' names start with this; the trap deletes any left.
prefix="lhf$(($$ % 100000))"
child=""
cleanup() {
	status=$?
	# The harness deletes what it made itself; this is for a harness that
	# was killed or timed out: its nodes, then its namespaces.
	if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
		kill -TERM "$child" 2>/dev/null || true
		for _ in $(seq 300); do
			kill -0 "$child" 2>/dev/null || break
			sleep 0.1
		done
	fi
	# Burners a killed harness left (Pdeathsig kills them too): only
	# processes that are still the harness's binary run as a burner.
	if [ -f "$out/burners.pid" ]; then
		for pid in $(cat "$out/burners.pid"); do
			cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
			case "$cmd" in */fleetfault\ burn\ *) kill -KILL "$pid" 2>/dev/null || true ;; esac
		done
		rm -f "$out/burners.pid"
	fi
	for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep "^${prefix}[a-z]\$" || true); do
		# Processes still in a namespace of this run are this run's nodes.
		for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
			kill -CONT "$pid" 2>/dev/null || true
			kill -KILL "$pid" 2>/dev/null || true
		done
		ip netns del "$ns" 2>/dev/null || true
	done
	if [ "$status" -eq 0 ] && [ "$out" = "$tmp/run" ]; then
		rm -rf "$tmp"
	else
		if [ "$status" -ne 0 ]; then
			# A failing run's reasons, in the output itself: a CI machine's
			# kept directory is gone with it. The nodes' warnings and errors,
			# the last 60 of each (a run has a few hundred).
			for log in "$out"/node-*.log; do
				[ -f "$log" ] || continue
				echo "fleetfault: $(basename "$log"): its last warnings and errors" >&2
				grep -E 'level=(WARN|ERROR)' "$log" | tail -n 60 | cut -c1-400 >&2 || true
			done
		fi
		echo "fleetfault: data, node logs and history.jsonl kept in $out" >&2
		[ "$out" = "$tmp/run" ] || rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

echo "fleetfault: building leasehold and the harness"
bin="$tmp/leasehold"
# Stamped with the checkout's revision (+dirty for changes not committed)
# where git knows it, so `leasehold version` names the build even where
# GOFLAGS turns the toolchain's VCS stamp off: the upgrade mode prints it.
stamp=()
if head=$(git rev-parse -q --verify HEAD 2>/dev/null); then
	git diff --quiet HEAD 2>/dev/null || head="$head+dirty"
	stamp=(-ldflags "-X github.com/leasehold/leasehold.buildRevision=$head")
fi
# scripts/test.sh builds these once, stamped the same way, for its four
# runs (scripts/prebuilt.sh).
. scripts/prebuilt.sh
prebuilt leasehold "$tmp/leasehold" || go build "${stamp[@]}" -o "$tmp/leasehold" ./cmd/leasehold
prebuilt fleetfault "$tmp/fleetfault" || go build -o "$tmp/fleetfault" ./internal/fleetfault/cmd/fleetfault
if [ -n "$external" ]; then
	prebuilt natsd "$tmp/natsd" || go build -o "$tmp/natsd" ./internal/fleetfault/cmd/natsd
	args+=(--natsd "$tmp/natsd")
fi
if [ -n "$upgrade" ]; then
	from="$tmp/leasehold"
	if [ "$upgrade" = self ]; then
		echo "fleetfault: upgrade mode: this checkout's build against itself"
	elif [ "$rev" = "$(git rev-parse HEAD)" ] && git diff --quiet HEAD; then
		echo "fleetfault: upgrade mode: $upgrade is HEAD and the tree is clean: this build against itself"
	else
		echo "fleetfault: upgrade mode: building $upgrade (${rev:0:12}) from git archive"
		mkdir "$tmp/from-src"
		git archive --format=tar "$rev" | tar -x -C "$tmp/from-src"
		# Stamped with its revision, so `leasehold version` names it in the
		# summary (an archive has no VCS data).
		(cd "$tmp/from-src" && go build -ldflags "-X github.com/leasehold/leasehold.buildRevision=$rev" \
			-o "$tmp/leasehold-from" ./cmd/leasehold)
		from="$tmp/leasehold-from"
	fi
	if [ -n "$downgrade" ]; then
		bin=$from
		from="$tmp/leasehold"
	fi
	args+=(--from-bin "$from")
fi

# A bound on the whole run: --long makes 60 faults of about 20s each.
limit=300
[ "${mode[0]}" = --long ] && limit=3600
for a in "${args[@]}"; do
	case "$a" in --kills* | --pauses* | --partitions* | --removes*) limit=3600 ;; esac
done
skipflag=()
[ -n "$skip" ] && skipflag=(--skip-if-unsupported)
rc=0
# In the background, so that a signal to this script runs the trap at once
# (bash runs traps only between commands) and is passed on to the harness.
timeout --signal=TERM --kill-after=30 "$limit" \
	"$tmp/fleetfault" "${mode[@]}" "${skipflag[@]}" --bin "$bin" --out "$out" --prefix "$prefix" "${args[@]}" &
child=$!
wait "$child" || rc=$?
child=""
[ "$rc" -eq 124 ] && echo "fleetfault: the run passed its bound of ${limit}s and was stopped" >&2
exit "$rc"
