#!/usr/bin/env bash
# example-worker-ts.sh: packs the TypeScript client as npm would publish
# it (npm pack, its prepack build), installs the tgz into a new project
# outside the repository (offline: the package has no dependencies),
# checks both its entry points (import and require), and runs the
# JavaScript example worker (clients/typescript/examples/worker.mjs,
# copied into that project, importing @leasehold/client) against a real
# node: three groups planned, the worker leases and indexes
# them until it has been idle for 3 s, and every range must be done and
# every group's window at the node must hold exactly its ids. Then the Go
# example worker takes one more range of a group whose window the
# JavaScript one wrote. Exits non-zero otherwise. Needs node and npm
# (scripts/test.sh installs them).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
step() { echo "example-worker-ts: $*"; }
fail() {
	echo "example-worker-ts: FAIL: $*" >&2
	tail -n 20 "$tmp/node.log" "$tmp/worker.log" >&2 || true
	exit 1
}

step "building leasehold, the TypeScript client and the Go example worker"
. "$root/scripts/prebuilt.sh"
prebuilt leasehold "$tmp/leasehold" || (cd "$root" && go build -o "$tmp/leasehold" ./cmd/leasehold)
prebuilt example-worker "$tmp/goworker" || (cd "$root/examples/worker" && go build -o "$tmp/goworker" .)
(cd "$root/clients/typescript" && { [ -x node_modules/.bin/tsc ] || npm ci --no-audit --no-fund --prefer-offline >/dev/null; } &&
	npm pack --pack-destination "$tmp" >/dev/null 2>"$tmp/pack.log") || { cat "$tmp/pack.log" >&2; fail "npm pack failed"; }
tgz=$(ls "$tmp"/leasehold-client-*.tgz 2>/dev/null | head -n 1)
[ -n "$tgz" ] || fail "npm pack made no package"
tar -tzf "$tgz" >"$tmp/pack.files"
grep -qx 'package/dist/index.js' "$tmp/pack.files" || fail "the package has no dist/index.js"
grep -qx 'package/dist/cjs/index.js' "$tmp/pack.files" || fail "the package has no dist/cjs/index.js"
mkdir "$tmp/project"
(cd "$tmp/project" && npm init -y >/dev/null && npm install --offline --no-audit --no-fund "$tgz" >/dev/null) ||
	fail "the packed client does not install into a new project"
cp "$root/clients/typescript/examples/worker.mjs" "$tmp/project/"
(cd "$tmp/project" && node -e 'const c = require("@leasehold/client"); if (typeof c.Worker !== "function") process.exit(1)' &&
	node --input-type=module -e 'const c = await import("@leasehold/client"); if (typeof c.Worker !== "function") process.exit(1)') ||
	fail "the installed client does not load by require and by import"
step "packed $(basename "$tgz") ($(wc -l <"$tmp/pack.files") files), installed into a new project: require and import load it"
lh=$tmp/leasehold

"$lh" serve --data "$tmp/data" --listen 127.0.0.1:0 --lease-ttl 5s --nats off >"$tmp/node.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 100); do
	url=$(sed -n 's/.*msg="leasehold serving".* url=\(http:[^ ]*\).*/\1/p' "$tmp/node.log" | head -n 1)
	[ -n "$url" ] && [ -s "$tmp/data/admin.token" ] && break
	sleep 0.1
done
[ -n "$url" ] || fail "the node did not start"
export LEASEHOLD_URL=$url
LEASEHOLD_ADMIN_TOKEN=$(cat "$tmp/data/admin.token")
export LEASEHOLD_ADMIN_TOKEN
step "node serving at $url"

for g in js.one js.two js.three; do
	"$lh" admin groups create "$g" --range-size 100 --start 1 >/dev/null
	"$lh" admin groups tail "$g" 1000 >/dev/null
done
"$lh" admin nodes register js-example --capacity 2 -q >"$tmp/example.token"
step "3 groups planned 1..1000 in ranges of 100; running the JavaScript example worker until it is idle for 3s"
(cd "$tmp/project" && LEASEHOLD_TOKEN=$(cat "$tmp/example.token") timeout 60 node worker.mjs --idle 3) >"$tmp/worker.log" 2>&1 ||
	fail "the JavaScript example worker did not stop cleanly"
grep '^worker: ' "$tmp/worker.log"

window() {
	curl -fsS -H "Authorization: Bearer $LEASEHOLD_ADMIN_TOKEN" "$url/api/v1/groups/$1/snapshot" | gunzip | jq -r .ids
}
for g in js.one js.two js.three; do
	done=$(curl -fsS -H "Authorization: Bearer $LEASEHOLD_ADMIN_TOKEN" "$url/api/v1/groups/$g" | jq -r '.ranges.done')
	[ "$done" = 10 ] || fail "$g has $done of 10 ranges done"
	[ "$(window "$g")" = 1000 ] || fail "$g's window holds $(window "$g") ids, want 1000"
done
step "3 groups, 30 ranges done by the JavaScript worker; each window holds its 1000 ids"

"$lh" admin groups tail js.two 1100 >/dev/null
LEASEHOLD_TOKEN=$(cat "$tmp/example.token") timeout 60 "$tmp/goworker" -idle 2s >"$tmp/worker.log" 2>&1 ||
	fail "the Go example worker did not stop cleanly"
[ "$(window js.two)" = 1100 ] || fail "after the Go worker js.two's window holds $(window js.two) ids, want 1100"
step "the Go example worker went on from the JavaScript worker's window: js.two holds its 1100 ids"
