#!/usr/bin/env bash
# release.sh: makes release VERSION (vMAJOR.MINOR.PATCH) of leasehold from
# a clean checkout of HEAD:
#   1. CHANGELOG.md's "## Unreleased" section becomes "## VERSION (date)"
#      (refused when it is empty: a release says what changed), committed;
#   2. an annotated tag VERSION on that commit, whose message is the
#      section: the tag is what `go get github.com/leasehold/leasehold@VERSION`
#      (the Go client, client/) resolves;
#   3. static binaries for linux amd64 and arm64 into OUT (default
#      dist/VERSION), named leasehold-VERSION-linux-ARCH, stamped with the
#      version, the tagged revision and its commit time (`leasehold
#      version` prints them);
#   4. a .deb and an .rpm of each (scripts/package.sh, from packaging/:
#      /usr/bin/leasehold, the systemd unit, /etc/leasehold/leasehold.env
#      kept on upgrade, the system user leasehold, /var/lib/leasehold 0700,
#      the shell completions), and SHA256SUMS of it all beside them,
#      checked.
# It pushes nothing: push the commit and the tag, and upload OUT, yourself.
#
# --dry-run does everything but write: no CHANGELOG commit, no tag; the
# binaries (stamped with HEAD) go into a temporary directory (or --out)
# and are checked, and the changelog section it would use is printed.
# scripts/test.sh runs it so.
#
#   scripts/release.sh [--dry-run] [--out DIR] VERSION
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dry=false
out=""
version=""
while [ $# -gt 0 ]; do
	case "$1" in
	--dry-run) dry=true ;;
	--out) out=${2:?--out needs a directory}; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "release: unknown flag $1" >&2; exit 2 ;;
	*) version=$1 ;;
	esac
	shift
done
say() { echo "release: $*"; }
die() { echo "release: $*" >&2; exit 1; }

[[ "$version" =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	{ echo "release: give the version as vMAJOR.MINOR.PATCH (e.g. v0.3.0), not \"$version\"" >&2; exit 2; }
git rev-parse --verify -q "refs/tags/$version" >/dev/null && die "tag $version exists already"
if [ -n "$(git status --porcelain)" ]; then
	$dry || die "the working tree has changes: a release is made from a clean checkout"
	say "(dry run) the working tree has changes; a real release refuses that"
fi

# The Unreleased section: from its heading to the next "## ".
section=$(awk '/^## Unreleased/{on=1; next} on && /^## /{exit} on' CHANGELOG.md | sed -e '/./,$!d' | sed -e ':a' -e '/^\n*$/{$d;N;ba' -e '}')
[ -n "$section" ] || die "CHANGELOG.md's \"## Unreleased\" section is empty: say what this release changes"
date=$(date -u +%Y-%m-%d)
heading="## $version ($date)"

if $dry; then
	say "(dry run) CHANGELOG.md would get: $heading"
	printf '%s\n' "$section" | sed 's/^/    /'
else
	awk -v h="$heading" '/^## Unreleased/ && !done {print; print ""; print h; done=1; next} {print}' CHANGELOG.md >CHANGELOG.md.new
	mv CHANGELOG.md.new CHANGELOG.md
	git add CHANGELOG.md
	git commit -q -m "Release $version"
	git tag -a "$version" -m "leasehold $version" -m "$section"
	say "committed CHANGELOG.md and tagged $version at $(git rev-parse --short HEAD)"
fi

revision=$(git rev-parse HEAD)
when=$(git show -s --format=%cI HEAD)
if [ -z "$out" ]; then
	if $dry; then
		out=$(mktemp -d)
		trap 'rm -rf "$out"' EXIT
	else
		out=$root/dist/$version
	fi
fi
mkdir -p "$out"
pkg=github.com/leasehold/leasehold
ldflags="-s -w -X $pkg.buildVersion=$version -X $pkg.buildRevision=$revision -X $pkg.buildDate=$when"
for arch in amd64 arm64; do
	bin=leasehold-$version-linux-$arch
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/$bin" ./cmd/leasehold
	say "built $bin ($(wc -c <"$out/$bin") bytes)"
	bash scripts/package.sh "$version" "$arch" "$out/$bin" "$out" | while read -r p; do say "packed $(basename "$p")"; done
done
(cd "$out" && sha256sum leasehold-"$version"-linux-* leasehold_*.deb leasehold-*.rpm >SHA256SUMS && sha256sum -c --quiet SHA256SUMS) ||
	die "the checksums do not check"

# The binary this machine runs must say what it is.
if [ "$(uname -m)" = x86_64 ]; then
	got=$("$out/leasehold-$version-linux-amd64" version)
	case "$got" in
	"leasehold $version (revision $revision, $when, go"*) say "$got" ;;
	*) die "the amd64 binary says \"$got\", not version $version at $revision" ;;
	esac
fi
say "SHA256SUMS:"
sed 's/^/    /' "$out/SHA256SUMS"
if $dry; then
	say "(dry run) nothing tagged or committed"
else
	say "done: git push origin HEAD $version; upload $out"
fi
