#!/bin/sh
# After the files are gone. Removal keeps the data dir (the catalog and
# the admin token) and the settings, so that a reinstall finds them;
# purge (deb only) deletes them both. The system user leasehold is kept
# even on purge, as Debian advises for system accounts: files it owned may
# remain elsewhere (a backup, say), and a reused uid would own them.
set -e
case "$1" in
purge)
	rm -rf /var/lib/leasehold /etc/leasehold
	;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
