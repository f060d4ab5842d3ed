#!/usr/bin/env bash
# index-fault.sh: the fault run of the shared PostgreSQL index
# (TestIndexFaultRun in cmd/leasehold). Three worker processes, each a
# box of its own, index the same news server groups (INN, scripts/inn.sh)
# into one private PostgreSQL through one node: one is stopped with
# SIGSTOP in the middle of a group until the group was taken over and
# read to its end, then continued (its link to the node held a moment, so
# its first act is a write to the index); one is killed with kill -9; one
# is restarted. The tables files, releases and segments must then equal
# one uninterrupted pass row for row, with the continued worker's late
# writes refused by fence. Then the same run with the fence check
# removed from the workers (LEASEHOLD_TEST_UNFENCED, the planted fault)
# must fail. Prints the figures of each run.
#
# Usage: scripts/index-fault.sh [--articles N] [--planted-only]
#   --articles N    articles a group (default 3000; the suite's form is 600)
#   --planted-only  only the planted run (the suite runs the other as a test)
# Needs root (INN, PostgreSQL run as their users) and PostgreSQL's server
# binaries (scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

articles=3000
planted_only=false
while [ $# -gt 0 ]; do
	case "$1" in
	--articles) articles=$2; shift 2 ;;
	--planted-only) planted_only=true; shift ;;
	*) echo "index-fault: unknown argument $1" >&2; exit 2 ;;
	esac
done

if [ -z "${LEASEHOLD_TEST_NNTP:-}" ]; then
	eval "$(bash scripts/inn.sh start)"
fi
export CI=true # a run without PostgreSQL or INN fails, never skips

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! $planted_only; then
	echo "index-fault: the run, $articles articles a group"
	if ! LEASEHOLD_INDEXFAULT_ARTICLES=$articles go test -count=1 -timeout 10m -run '^TestIndexFaultRun$' -v ./cmd/leasehold >"$log" 2>&1; then
		cat "$log"
		echo "index-fault: FAIL" >&2
		exit 1
	fi
	grep '^index fault run' "$log"
fi
echo "index-fault: the planted run (workers without the fence check): it must fail"
# A pause that lands inside a write's transaction has its session ended by
# the index (its idle-in-transaction timeout): no late write lands, fenced or
# not, so that run says nothing of the fence. It is run again, up to three
# times in all; a planted run that passes otherwise is a failure.
for try in 1 2 3; do
	if ! LEASEHOLD_INDEXFAULT_ARTICLES=$articles LEASEHOLD_INDEXFAULT_PLANT=unfenced go test -count=1 -timeout 10m -run '^TestIndexFaultRun$' -v ./cmd/leasehold >"$log" 2>&1; then
		break
	fi
	if [ $try -lt 3 ] && grep -q 'the pause landed inside a transaction' "$log"; then
		echo "index-fault: planted run $try: the pause landed inside a transaction (the session ended, no late write): run again"
		continue
	fi
	cat "$log"
	echo "index-fault: the planted run passed: the fence check is not what keeps stale writes out" >&2
	exit 1
done
grep '^index fault run' "$log" || { cat "$log"; echo "index-fault: the planted run failed before its figures" >&2; exit 1; }
grep -c 'usenet_index_fault_test.go.*release .* by ' "$log" | sed 's/^/index-fault: planted run: records differing from one pass: /'
echo "index-fault: ok (fenced: equal to one pass with late writes refused; unfenced: differs)"
