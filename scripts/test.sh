#!/usr/bin/env bash
# test.sh: the whole test suite, as the README gives it. It installs what
# the tests need when it is missing (curl and jq for the scripts, Chromium
# for the dashboard's browser tests, promtool for the shipped alert
# rules, zsh and fish for the completion scripts, xmllint and nzbget for
# the Usenet worker's NZBs, sqlite3 for the package check), then runs
# gofmt, go vet, the alert rules' unit tests, go test -race over every
# package, the TypeScript client's tests (their answers
# checked against web/openapi.json), the release process (dry run), and
# the scripts that drive the real binary (example-worker-ts.sh packs the
# TypeScript client and installs it into a new project).
set -euo pipefail
cd "$(dirname "$0")/.."

# step names the step that starts, with the seconds since the suite began:
# each step's time is the difference to the next line's.
step() { echo "test: [${SECONDS}s] $*"; }

need=()
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
# The dashboard's browser tests drive Debian's headless Chromium.
command -v chromium >/dev/null || need+=(chromium chromium-driver)
# The alert rules under contrib/ are unit tested by Debian's promtool.
command -v promtool >/dev/null || need+=(prometheus)
# The TypeScript client's tests and its example worker run on Node.
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
# The completion tests ask a real zsh and a real fish what they complete.
command -v zsh >/dev/null || need+=(zsh)
command -v fish >/dev/null || need+=(fish)
# The Usenet worker's NZBs are checked against the NZB 1.1 DTD by xmllint
# and downloaded by Debian's NZBGet.
command -v xmllint >/dev/null || need+=(libxml2-utils)
command -v nzbget >/dev/null || need+=(nzbget)
# The shared index's tests run a private PostgreSQL (internal/pgtest):
# Debian's server binaries, initdb and pg_ctl, and psql.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v psql >/dev/null || need+=(postgresql-client)
# check-package.sh marks the installed node's catalog as a newer
# leasehold's with sqlite3, to see the package refuse to start on it.
command -v sqlite3 >/dev/null || need+=(sqlite3)
if [ ${#need[@]} -gt 0 ]; then
	echo "test: installing ${need[*]}"
	if [ "$(id -u)" = 0 ]; then sudo=""; else sudo=sudo; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The Usenet worker's tests read a real news server: Debian's INN,
# installed (as root) and started on 127.0.0.1 by scripts/inn.sh; its
# environment tells the Go tests where it is. Without root they skip,
# saying so; with CI=true they fail instead.
if [ "$(id -u)" = 0 ]; then
	echo "test: starting INN (scripts/inn.sh start)"
	inn_env=$(bash scripts/inn.sh start) # fails the suite when INN cannot be had
	eval "$inn_env"
elif [ "${CI:-}" = true ]; then
	echo "test: CI=true, and the NNTP tests need root for INN" >&2
	exit 1
else
	echo "test: not root: the NNTP tests will skip (no INN)"
fi

step "gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then
	echo "gofmt would change:"
	echo "$bad"
	exit 1
fi

step "go vet ./... (and the example worker's own module)"
go vet ./...
(cd examples/worker && go vet ./...)

step "promtool check rules, test rules (contrib/prometheus)"
promtool check rules contrib/prometheus/leasehold-rules.yml
(cd contrib/prometheus && promtool test rules leasehold-rules.test.yml)

step "go test -race ./..."
# Screenshots of the browser tests land here, outside the tracked files.
export LEASEHOLD_ARTIFACTS="${LEASEHOLD_ARTIFACTS:-$PWD/artifacts}"
# Three test binaries at a time on two cores (go test's default is one a
# core): the slow packages mostly wait (fleet: NATS elections and claim
# TTLs; most of its tests run in parallel now, about 230-300 s alone
# where it took 330 s; four at a time, 155 s, loaded the machine so
# that timing-bound tests of other packages missed their bounds), so a
# third keeps the cores busy. fleet, still the longest, is named first so that
# it is built and started first and runs beside the others, not after.
go test -race -count=1 -timeout 15m -p 3 ./fleet/ ./...

# Fuzzing, every target for a bounded time, in the background of the
# steps below up to the demos, as the fault runs are: in the foreground
# it was the longest step after go test (321 s), and a target's time is
# wall time whatever else runs (a target whose seed corpus takes all of
# it on the loaded machine runs again, longer: scripts/fuzz.sh). Its
# output is printed whole after the demos; failing, it fails the suite.
step "fuzzing, every target for a bounded time (scripts/fuzz.sh, in the background)"
fuzz_log=$(mktemp)
bash scripts/fuzz.sh >"$fuzz_log" 2>&1 &
fuzz_pid=$!

# The binaries the steps below run, built once (scripts/prebuilt.sh says
# how a script takes them; run alone, each builds its own): leasehold
# stamped with the checkout's revision as scripts/fleetfault.sh stamps
# its own (its upgrade mode prints it), the fault and crash harnesses,
# and the example worker (a module of its own).
step "building the binaries the scripts run, once"
LEASEHOLD_PREBUILT=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-prebuilt.XXXXXX")
export LEASEHOLD_PREBUILT
ff_pids=()
# A step failing ends the fault runs and the fuzzing still going (each
# cleans up after itself on TERM).
trap 'for p in "${ff_pids[@]}" "$fuzz_pid"; do kill -TERM "$p" 2>/dev/null || true; done; wait; rm -rf "$LEASEHOLD_PREBUILT"' EXIT
stamp=()
if head=$(git rev-parse -q --verify HEAD 2>/dev/null); then
	git diff --quiet HEAD 2>/dev/null || head="$head+dirty"
	stamp=(-ldflags "-X github.com/leasehold/leasehold.buildRevision=$head")
fi
go build "${stamp[@]}" -o "$LEASEHOLD_PREBUILT/" ./cmd/leasehold ./internal/fleetfault/cmd/fleetfault ./internal/fleetfault/cmd/natsd ./internal/crashtest
(cd examples/worker && go build -o "$LEASEHOLD_PREBUILT/example-worker" .)

# The fleet under faults, each node in a network namespace of its own:
# needs root and ip netns, skipped (saying why) without them. The four
# runs go at once, in the background of the steps below up to the demos:
# each mostly waits out its faults and gaps (the four together used about
# 0.9 of a core), and each has namespaces named after its own process, its
# own data and its own ports inside them, so they meet neither each other
# nor the steps in the machine's own namespace. Each one's output is
# printed whole after the demos, in order; any one failing fails the
# suite. Their checks bound times by the claim TTL, seconds apart, and
# passed so under a load of 20-45 on two cores.
ff_logs=$(mktemp -d)
ff_names=()
ff_args=()
fault_run() { # name, then fleetfault.sh's arguments
	local name=$1
	shift
	step "scripts/fleetfault.sh $* (in the background)"
	bash scripts/fleetfault.sh "$@" >"$ff_logs/$name" 2>&1 &
	ff_names+=("$name")
	ff_args+=("$*")
	ff_pids+=($!)
}
# At claim TTL 20 s (above the floor, as the default 30 s is), a kill,
# then a pause and a partition of 27 s each: every check gates (one
# holder at a time, no acknowledged finish lost, the nodes agreeing at the
# end, whole windows) and so does the takeover: a fault longer than the
# claim TTL + 5 s (25 s; both the pause and the partition are) must see
# every group in work at the faulted node owned (or granted) elsewhere
# within those 25 s. The takeovers come 19-23 s after the fault began, so
# 27 s faults see them all before the heal, as 30 s ones did; 10 s of quiet
# after each heal (was 20 s) are enough for the healed node to rejoin.
fault_run ttl20 --kills 1 --pauses 1 --partitions 1 --claim-ttl 20s --pause-for 27s --cut-for 27s --gap 10s --require-takeover --skip-if-unsupported
# At claim TTL 4 s, below the floor, faults of 10-12 s: every check
# gates here too (one holder at a time, no acknowledged finish lost, the
# nodes agreeing, whole windows). The finishes once missing at this TTL
# were the lost plan and the peer's hole of RELIABILITY.md, both fixed.
# A member removed (and approved again) is the fourth fault: after the
# partition it once ended with groups taken back from windows older than
# ones answered kept, fixed (RELIABILITY.md, "A member removed under load").
fault_run short --short --removes 1 --gate all --skip-if-unsupported
# The same with the fleet's NATS a three-server nats-server cluster apart,
# each fault hitting a node's NATS server too: every check gates.
fault_run external --short --nats external --gate all --skip-if-unsupported
# A rolling upgrade under the load, this build against itself (about
# 90 s with the builds): each node in turn stopped with SIGTERM and
# started again on its data, waited for before the next; every check
# gates. RELIABILITY.md has the run from the previous release.
fault_run upgrade --upgrade-from self --gate all --skip-if-unsupported

# The TypeScript client, the release dry run and the TypeScript example
# worker share nothing with the other demos (no fixed port, data of their
# own): they run in a second lane, in the background of the others, one
# after the other there, their output printed whole once the others are
# done; one failing fails the suite. Serial they took about three of the
# suite's minutes (TypeScript 92 s, release 59 s, example 19 s, loaded).
lane_log=$(mktemp)
step "the TypeScript client, the release dry run and the TypeScript example worker (in the background)"
(
	set -euo pipefail
	step "the TypeScript client (clients/typescript) against a real leasehold serve"
	# Every answer its tests get is recorded (test/node.mjs) and checked
	# against web/openapi.json, as the Go tests' answers are.
	ts_record=$(mktemp -d)
	(cd clients/typescript && npm ci --no-audit --no-fund --prefer-offline >/dev/null &&
		LEASEHOLD_API_RECORD="$ts_record" LEASEHOLD_BIN="$LEASEHOLD_PREBUILT/leasehold" npm test)
	go run ./internal/nodetest/apicheck "$ts_record"
	rm -rf "$ts_record"

	# The release process without its writes: CHANGELOG's Unreleased
	# section, linux amd64 and arm64 binaries stamped with HEAD and their
	# .deb and .rpm (nfpm), checksums checked, and the amd64 binary's
	# `leasehold version` naming the commit.
	step "scripts/release.sh --dry-run v0.0.0-ci"
	bash scripts/release.sh --dry-run v0.0.0-ci

	# The TypeScript example worker packs the client this lane just
	# installed (npm ci): in this lane, so never beside that install.
	step "scripts/example-worker-ts.sh"
	bash scripts/example-worker-ts.sh
) >"$lane_log" 2>&1 &
lane_pid=$!
ff_pids+=("$lane_pid")

# The shared index's fault run (TestIndexFaultRun) ran with the Go tests;
# here its planted form: workers without the fence check must fail it.
step "scripts/index-fault.sh --planted-only --articles 600"
bash scripts/index-fault.sh --planted-only --articles 600

for s in scripts/smoke.sh scripts/demo.sh scripts/example-worker.sh scripts/fleet-demo.sh scripts/fleet-walkthrough.sh scripts/usenet-demo.sh; do
	if [ -x "$s" ] || [ -f "$s" ]; then
		step "$s"
		bash "$s"
	fi
done
step "waiting for the second lane"
lane_rc=0
wait "$lane_pid" || lane_rc=$?
unset 'ff_pids[-1]'
cat "$lane_log"
rm -f "$lane_log"
if [ "$lane_rc" -ne 0 ]; then
	echo "test: the second lane failed (exit $lane_rc)" >&2
	exit 1
fi
step "waiting for the fuzzing"
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
fuzz_pid=
cat "$fuzz_log"
rm -f "$fuzz_log"
if [ "$fuzz_rc" -ne 0 ]; then
	echo "test: fuzzing failed (exit $fuzz_rc)" >&2
	exit 1
fi
step "waiting for the fault runs"
ff_failed=()
for i in "${!ff_pids[@]}"; do
	rc=0
	wait "${ff_pids[$i]}" || rc=$?
	echo "test: fault run ${ff_names[$i]} (exit $rc):"
	cat "$ff_logs/${ff_names[$i]}"
	if [ "$rc" -ne 0 ]; then
		# Beside three other fault runs and the demos on two cores, a run's
		# checks (bound by the claim TTL) can miss: it runs once more,
		# alone, and that run decides. Both outputs are printed; the first
		# failure stays in the log for whoever reads it.
		echo "test: fault run ${ff_names[$i]} failed beside the others; running it again alone"
		# shellcheck disable=SC2086 # the run's own words, as given
		bash scripts/fleetfault.sh ${ff_args[$i]} || ff_failed+=("${ff_names[$i]}")
	fi
done
ff_pids=()
rm -rf "$ff_logs"
if [ ${#ff_failed[@]} -gt 0 ]; then
	echo "test: fault runs failed: ${ff_failed[*]}" >&2
	exit 1
fi
step "the four fault runs passed"
step "scripts/check-systemd.sh"
bash scripts/check-systemd.sh
# The amd64 .deb installed, started as its unit starts it, upgraded,
# removed and purged on this machine (as root; it cleans up after itself).
step "scripts/check-package.sh"
bash scripts/check-package.sh
step "scripts/crashtest.sh --kills 5"
bash scripts/crashtest.sh --kills 5
step "all passed"
