#!/usr/bin/env bash
# bench-newznab.sh [RELEASES]: how fast `leasehold usenet api` answers
# t=search over an index of RELEASES releases (default 1,000,000). Starts
# a private PostgreSQL (internal/pgtest: Debian's postgresql, no cluster
# of the machine's own touched), fills the releases table with
# generate_series (names of two title words, then an episode or a year
# with tags), builds the index of days and name trigrams, and times
# searches over HTTP (newznab BenchmarkSearch): p50 and p99 in ms of each
# kind of call, one client at a time, then of every kind with four clients
# at once, for searches read newest days first and, taking turns with
# them call by call, asked once over every release as before.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
LEASEHOLD_BENCH_RELEASES=${1:-1000000} go test ./source/newznab -run '^$' -bench '^BenchmarkSearch$' -benchtime 1x -timeout 60m
