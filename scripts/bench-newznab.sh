#!/usr/bin/env bash
# bench-newznab.sh [RELEASES]: how fast `leasehold usenet api` answers
# t=search over an index of RELEASES releases (default 1,000,000). Starts
# a private PostgreSQL (internal/pgtest/cmd/pgserver: Debian's
# postgresql, no cluster of the machine's own touched), fills the
# releases table with generate_series (names of two title words, then an
# episode or a year with tags), builds the index of days and name
# trigrams, and times searches over HTTP (newznab BenchmarkSearch): p50
# and p99 in ms of each kind of call, one client at a time, then of every
# kind with four clients at once, for searches read newest days first
# and, taking turns with them call by call, asked once over every
# release as before.
#
# BENCH_RUNS=N runs the benchmark N times over the one index (filled
# once), each run headed by the machine's uptime. BENCH_BEFORE=DIR (a
# checkout of an earlier commit whose benchmark takes
# LEASEHOLD_BENCH_INDEX) runs that checkout's benchmark too, before and
# after in turns over the same index. LEASEHOLD_BENCH_INDEX=URL uses a
# database of a server already running instead (filled on first use,
# reused while it holds RELEASES releases). LEASEHOLD_BENCH_AGAINST says
# what the second column is: one-query (the default), before (as before
# a call's round trips and work were cut: each search's key checked in
# a round trip of its own, the first statement asking one slice, the
# index's dates read in the call, the feed written by encoding/xml) or
# same (newest days first again: the machine's noise alone). Run as root, the server's
# processes run at nice -15 and real-time I/O class, as the script
# itself should be started (nice -n -15 ionice -c1 -n0), so that other
# work on the machine disturbs the figures less.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
releases=${1:-1000000}
runs=${BENCH_RUNS:-1}
tmp=$(mktemp -d)
pg=
cleanup() {
	if [ -n "$pg" ]; then
		kill "$pg" 2>/dev/null || true
		wait "$pg" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${LEASEHOLD_BENCH_INDEX:-}" ]; then
	go build -o "$tmp/pgserver" ./internal/pgtest/cmd/pgserver
	"$tmp/pgserver" bench >"$tmp/pg.url" 2>"$tmp/pg.log" &
	pg=$!
	for _ in $(seq 600); do
		[ -s "$tmp/pg.url" ] && break
		kill -0 "$pg" 2>/dev/null || { cat "$tmp/pg.log" >&2; exit 1; }
		sleep 0.2
	done
	LEASEHOLD_BENCH_INDEX=$(cat "$tmp/pg.url")
	export LEASEHOLD_BENCH_INDEX
	if [ "$(id -u)" = 0 ]; then
		# The postmaster is the server process listening on the URL's
		# port; its backends, forked later, inherit its priority.
		port=${LEASEHOLD_BENCH_INDEX##*:}
		port=${port%%/*}
		pm=$(pgrep -f -- "-c port=$port " | head -1 || true)
		if [ -n "$pm" ]; then
			renice -n -15 -p $pm $(pgrep -P "$pm") >/dev/null
			ionice -c1 -n0 -p $pm $(pgrep -P "$pm") || true
		fi
	fi
fi
export LEASEHOLD_BENCH_RELEASES=$releases

bench() {
	(cd "$1" && go test ./source/newznab -run '^$' -bench '^BenchmarkSearch$' -benchtime 1x -timeout 60m)
}
for run in $(seq "$runs"); do
	if [ -n "${BENCH_BEFORE:-}" ]; then
		order=("$BENCH_BEFORE" "$root")
		[ $((run % 2)) = 0 ] && order=("$root" "$BENCH_BEFORE")
		for dir in "${order[@]}"; do
			echo "run $run, $([ "$dir" = "$root" ] && echo after || echo before) ($dir): $(uptime)"
			bench "$dir"
		done
	else
		echo "run $run: $(uptime)"
		bench "$root"
	fi
done
