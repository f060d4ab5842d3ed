# prebuilt.sh, sourced (not run) by the scripts that run leasehold's
# binaries. scripts/test.sh builds them once for the whole suite into the
# directory LEASEHOLD_PREBUILT (leasehold, fleetfault, natsd, crashtest,
# example-worker), which saves each script its own link of the same
# binary; a script run alone builds its own, as before:
#   prebuilt leasehold "$tmp/leasehold" || go build -o "$tmp/leasehold" ./cmd/leasehold
# prebuilt NAME DEST copies NAME to DEST and fails when there is none.
prebuilt() {
	[ -n "${LEASEHOLD_PREBUILT:-}" ] && [ -x "$LEASEHOLD_PREBUILT/$1" ] && cp "$LEASEHOLD_PREBUILT/$1" "$2"
}
