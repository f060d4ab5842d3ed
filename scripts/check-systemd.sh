#!/usr/bin/env bash
# check-systemd.sh: checks contrib/systemd/leasehold.service with
# systemd-analyze verify (any warning fails it: verify exits 0 on an
# unknown or misspelt directive) and that it keeps its hardening.
# Skips, saying why, where systemd-analyze is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
unit=contrib/systemd/leasehold.service
if ! command -v systemd-analyze >/dev/null; then
	echo "check-systemd: SKIPPED: no systemd-analyze on this machine"
	exit 0
fi
for want in '^DynamicUser=yes' '^StateDirectory=leasehold' '^ProtectSystem=strict' '^NoNewPrivileges=yes' '^ProtectHome=yes' '^CapabilityBoundingSet=$'; do
	grep -q "$want" "$unit" || { echo "check-systemd: $unit lost $want" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-systemd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# verify wants ExecStart's binary to exist: point it at one built here.
. scripts/prebuilt.sh
prebuilt leasehold "$tmp/leasehold" || go build -o "$tmp/leasehold" ./cmd/leasehold
sed "s|/usr/local/bin/leasehold|$tmp/leasehold|" "$unit" > "$tmp/leasehold.service"
out=$(systemd-analyze verify "$tmp/leasehold.service" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then
	echo "check-systemd: systemd-analyze verify warns about $unit:" >&2
	echo "$out" >&2
	exit 1
fi
echo "check-systemd: $unit verified; $(systemd-analyze security --offline=yes "$tmp/leasehold.service" 2>/dev/null | tail -1 | sed 's/^→ //')"
