#!/usr/bin/env bash
# check-package.sh: installs leasehold's amd64 .deb on this machine as an
# operator would, and takes it through its life per Debian policy:
#   1. dpkg -i: the binary, unit, settings (a conffile) and completions in
#      place with their owners and modes; the system user leasehold;
#      /var/lib/leasehold 0700 owned by it; `leasehold version` from
#      /usr/bin; the installed unit passes systemd-analyze verify;
#   2. the node started as the unit starts it (as leasehold, with the
#      settings file and the unit's LEASEHOLD_DATA), its first start
#      writing the admin token, which opens the dashboard's API;
#   3. the settings edited, then dpkg -i of a second build: the new
#      binary, the edited settings and the data dir (same token) kept;
#      that build started over a data dir a newer leasehold wrote refuses
#      with the node's own message and exit code 2 (the unit does not
#      restart on 2);
#   4. dpkg -r: the files gone, the data dir and settings kept;
#      dpkg -P: the data dir and settings gone too.
# What this machine cannot check: systemd is not PID 1 here, so the unit
# is verified but not started by systemd, and the maintainer scripts'
# systemctl calls are skipped (they run only under a running systemd).
# The .rpm is built but not installed (no rpm database here).
#
# It needs root and dpkg (it skips, saying why, without them) and leaves
# the machine as it found it: whatever it installed or made is purged on
# every exit, the user leasehold included when it made it. It refuses to
# run where leasehold is installed already.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "check-package: $*"; }
fail() {
	echo "check-package: FAIL: $*" >&2
	exit 1
}
if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null; then
	say "SKIPPED: installing a .deb needs root and dpkg"
	exit 0
fi
if [ "$(go env GOARCH)" != amd64 ]; then
	say "SKIPPED: this machine runs $(go env GOARCH), the check installs the amd64 .deb"
	exit 0
fi
if dpkg-query -W -f='${Status}' leasehold 2>/dev/null | grep -q installed || [ -e /usr/bin/leasehold ] ||
	[ -e /var/lib/leasehold ] || [ -e /etc/leasehold ]; then
	fail "leasehold is installed on this machine already (or /var/lib/leasehold, /etc/leasehold exist): this check would replace it"
fi

made_user=false
getent passwd leasehold >/dev/null || made_user=true
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-package.XXXXXX")
node=""
cleanup() {
	[ -n "$node" ] && kill "$node" 2>/dev/null && wait "$node" 2>/dev/null
	if dpkg-query -W leasehold >/dev/null 2>&1; then
		dpkg -P leasehold >/dev/null 2>&1 || true
	fi
	rm -rf /var/lib/leasehold /etc/leasehold
	if $made_user; then
		userdel leasehold 2>/dev/null || true
		getent group leasehold >/dev/null && groupdel leasehold 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# Two builds, told apart by their version stamp.
pkg=github.com/leasehold/leasehold
for v in v0.0.1-check.1 v0.0.1-check.2; do
	go build -ldflags "-s -w -X $pkg.buildVersion=$v" -o "$tmp/$v/leasehold" ./cmd/leasehold
	PACKAGE_FORMATS=deb bash scripts/package.sh "$v" amd64 "$tmp/$v/leasehold" "$tmp/$v" >/dev/null
done
first=$(ls "$tmp"/v0.0.1-check.1/*.deb)
second=$(ls "$tmp"/v0.0.1-check.2/*.deb)

# mode_owner PATH WANT: stat's "mode user:group" of PATH must be WANT.
mode_owner() {
	local got
	got=$(stat -c '%a %U:%G' "$1") || fail "$1 is missing"
	[ "$got" = "$2" ] || fail "$1 is $got, want $2"
}

say "dpkg -i $(basename "$first")"
dpkg -i "$first" </dev/null >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -i refused the package"; }
mode_owner /usr/bin/leasehold "755 root:root"
mode_owner /usr/lib/systemd/system/leasehold.service "644 root:root"
mode_owner /etc/leasehold/leasehold.env "640 root:leasehold"
mode_owner /var/lib/leasehold "700 leasehold:leasehold"
for f in /usr/share/bash-completion/completions/leasehold /usr/share/zsh/vendor-completions/_leasehold /usr/share/fish/vendor_completions.d/leasehold.fish; do
	mode_owner "$f" "644 root:root"
done
grep -q '^complete -o default -F _leasehold leasehold' /usr/share/bash-completion/completions/leasehold ||
	fail "the bash completion is not leasehold's"
dpkg-query -W -f='${Conffiles}' leasehold | grep -q '/etc/leasehold/leasehold.env' ||
	fail "/etc/leasehold/leasehold.env is not a conffile"
uid=$(id -u leasehold)
[ "$uid" -lt 1000 ] || fail "the user leasehold has uid $uid, not a system user's"
case "$(getent passwd leasehold | cut -d: -f7)" in
*nologin | /bin/false) ;;
*) fail "the user leasehold can log in: $(getent passwd leasehold)" ;;
esac
got=$(/usr/bin/leasehold version)
case "$got" in "leasehold v0.0.1-check.1 "*) say "$got" ;; *) fail "/usr/bin/leasehold version says \"$got\"" ;; esac
if command -v systemd-analyze >/dev/null; then
	out=$(systemd-analyze verify /usr/lib/systemd/system/leasehold.service 2>&1) || fail "systemd-analyze verify: $out"
	[ -z "$out" ] || fail "systemd-analyze verify warns about the installed unit: $out"
	say "the installed unit verified (systemd-analyze verify); systemd is not PID 1 here, so it is not started by systemd"
else
	say "no systemd-analyze here: the installed unit is not verified"
fi

# start_node: the node as the unit starts it, the settings file read as
# systemd's EnvironmentFile reads it (lines of NAME=value, # comments).
start_node() {
	(
		set -a
		# shellcheck disable=SC1091
		. /etc/leasehold/leasehold.env
		set +a
		export LEASEHOLD_DATA=/var/lib/leasehold
		cd /
		exec setpriv --reuid leasehold --regid leasehold --clear-groups /usr/bin/leasehold serve
	) >"$tmp/node.log" 2>&1 &
	node=$!
}
stop_node() {
	kill "$node"
	wait "$node" || true
	node=""
}
# The edit: a port of the kernel's choosing, read back from the log.
echo "LEASEHOLD_LISTEN=127.0.0.1:0" >>/etc/leasehold/leasehold.env
start_node
port=""
for _ in $(seq 100); do
	port=$(sed -n 's|.*url=http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/node.log" | head -1)
	[ -n "$port" ] && [ -s /var/lib/leasehold/admin.token ] && curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	kill -0 "$node" 2>/dev/null || { cat "$tmp/node.log" >&2; fail "the node did not start"; }
	sleep 0.1
done
[ -n "$port" ] || { cat "$tmp/node.log" >&2; fail "the node did not say where it listens"; }
mode_owner /var/lib/leasehold/admin.token "600 leasehold:leasehold"
token=$(cat /var/lib/leasehold/admin.token)
curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/v1/groups" >/dev/null ||
	fail "the admin token the first start wrote does not open the API"
page=$(curl -fsS "http://127.0.0.1:$port/signin") || fail "no dashboard sign-in page at http://127.0.0.1:$port/signin"
grep -qi '<html' <<<"$page" || fail "the dashboard's sign-in page is not HTML"
say "the node started as the unit starts it, on the edited settings' listen address (port $port); its admin token opens the API"
stop_node

say "dpkg -i $(basename "$second") (the upgrade)"
dpkg -i "$second" </dev/null >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -i refused the upgrade"; }
got=$(/usr/bin/leasehold version)
case "$got" in "leasehold v0.0.1-check.2 "*) ;; *) fail "after the upgrade /usr/bin/leasehold version says \"$got\"" ;; esac
grep -q "^LEASEHOLD_LISTEN=127.0.0.1:0$" /etc/leasehold/leasehold.env || fail "the upgrade lost the edited settings"
[ "$(cat /var/lib/leasehold/admin.token)" = "$token" ] || fail "the upgrade changed the admin token"
mode_owner /var/lib/leasehold "700 leasehold:leasehold"
mode_owner /var/lib/leasehold/catalog.db "600 leasehold:leasehold"
say "upgraded: $got; the edited settings and the data dir kept"

# A data dir a newer leasehold wrote: the node says so and exits 2.
if command -v sqlite3 >/dev/null; then
	sqlite3 /var/lib/leasehold/catalog.db 'PRAGMA user_version = 9999'
	start_node
	code=0
	wait "$node" || code=$?
	node=""
	[ "$code" = 2 ] || { cat "$tmp/node.log" >&2; fail "over a newer data dir the node exited $code, want 2"; }
	grep -q 'newer than this binary' "$tmp/node.log" || { cat "$tmp/node.log" >&2; fail "over a newer data dir the node did not say why"; }
	say "over a newer data dir: $(grep -o 'has schema version.*' "$tmp/node.log" | head -1)"
else
	say "no sqlite3 here: the start over a newer data dir is not checked"
fi

say "dpkg -r leasehold"
dpkg -r leasehold </dev/null >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -r failed"; }
for f in /usr/bin/leasehold /usr/lib/systemd/system/leasehold.service /usr/share/bash-completion/completions/leasehold; do
	[ ! -e "$f" ] || fail "dpkg -r left $f"
done
[ "$(cat /var/lib/leasehold/admin.token)" = "$token" ] || fail "dpkg -r did not keep the data dir"
grep -q "^LEASEHOLD_LISTEN=" /etc/leasehold/leasehold.env || fail "dpkg -r did not keep the settings"
say "dpkg -P leasehold"
dpkg -P leasehold </dev/null >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; fail "dpkg -P failed"; }
for f in /var/lib/leasehold /etc/leasehold; do
	[ ! -e "$f" ] || fail "dpkg -P left $f"
done
! dpkg-query -W leasehold >/dev/null 2>&1 || fail "dpkg still knows leasehold after the purge"
say "removed (data and settings kept), then purged (both gone); the user leasehold stays, as Debian keeps system users"
say "passed"
