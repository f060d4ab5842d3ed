#!/bin/sh
# Before the files go (deb: remove; rpm: $1 = 0 erase): the node stopped
# and disabled. An upgrade (deb: upgrade; rpm: $1 = 1) leaves it running
# for postinstall to restart on the new binary.
set -e
case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl disable --now leasehold.service >/dev/null 2>&1 || true
fi
exit 0
