#!/usr/bin/env bash
# package.sh: makes leasehold's .deb and .rpm for one architecture from a
# built binary, with nfpm (packaging/nfpm.yaml says what they hold: the
# binary as /usr/bin/leasehold, the unit, /etc/leasehold/leasehold.env as
# a conffile, the shell completions; the maintainer scripts make the
# system user leasehold and /var/lib/leasehold, 0700).
#
#   scripts/package.sh VERSION ARCH BINARY OUTDIR
#
# VERSION is vMAJOR.MINOR.PATCH[-PRE], ARCH amd64 or arm64, BINARY the
# linux/ARCH build. The completion scripts are printed by a leasehold
# built for this machine. nfpm is built from its Go module, at the version
# below, into a temporary directory (the Go build cache keeps it cheap).
# PACKAGE_FORMATS=deb makes the .deb alone. scripts/release.sh runs this
# for each architecture.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nfpm_module=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0

[ $# -eq 4 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
version=$1 arch=$2 bin=$3 out=$4
case "$arch" in amd64 | arm64) ;; *) echo "package: no architecture $arch; want amd64 or arm64" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "package: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
mkdir -p "$out"
out=$(cd "$out" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
GOBIN=$work go install "$nfpm_module"
# The completion scripts are the same for every architecture: printed by
# the binary itself when it runs here, else by one built for this machine.
host=$bin
if ! "$host" version >/dev/null 2>&1; then
	host=$work/leasehold-here
	(cd "$root" && go build -o "$host" ./cmd/leasehold)
fi
mkdir "$work/completions"
"$host" completion bash >"$work/completions/leasehold.bash"
"$host" completion zsh >"$work/completions/_leasehold"
"$host" completion fish >"$work/completions/leasehold.fish"

cp "$bin" "$work/leasehold"
cp -r "$root/packaging" "$work/packaging"
export LEASEHOLD_PKG_ARCH=$arch LEASEHOLD_PKG_VERSION=$version
cd "$work"
for format in ${PACKAGE_FORMATS:-deb rpm}; do
	"$work/nfpm" package --config packaging/nfpm.yaml --packager "$format" --target "$out/" >"$work/nfpm.log" 2>&1 ||
		{ cat "$work/nfpm.log" >&2; echo "package: nfpm could not make the $format for $arch" >&2; exit 1; }
done
# What was made, one path a line (rpm names the architectures its way).
rpm_arch=x86_64
[ "$arch" = arm64 ] && rpm_arch=aarch64
for format in ${PACKAGE_FORMATS:-deb rpm}; do
	case $format in
	deb) ls "$out"/leasehold_*_"$arch".deb ;;
	rpm) ls "$out"/leasehold-*."$rpm_arch".rpm ;;
	esac
done
