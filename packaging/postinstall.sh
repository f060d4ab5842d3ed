#!/bin/sh
# After the files are in place (deb: configure; rpm: $1 = 1 install,
# 2 upgrade): the system user leasehold and its data dir, 0700.
set -e
case "$1" in
configure | 1 | 2) ;;
*) exit 0 ;;
esac
if ! getent group leasehold >/dev/null; then
	groupadd --system leasehold
fi
if ! getent passwd leasehold >/dev/null; then
	nologin=$(command -v nologin || echo /bin/false)
	useradd --system --gid leasehold --home-dir /var/lib/leasehold --no-create-home \
		--shell "$nologin" --comment "leasehold node" leasehold
fi
# The catalog and the admin token: the node's user alone reads them.
install -d -m 0700 -o leasehold -g leasehold /var/lib/leasehold
# The settings may name secrets: root writes them, the node reads them.
if [ -f /etc/leasehold/leasehold.env ]; then
	chown root:leasehold /etc/leasehold/leasehold.env
	chmod 0640 /etc/leasehold/leasehold.env
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
	# An upgrade restarts a running node on the new binary; a first
	# install leaves it stopped until systemctl enable --now leasehold.
	systemctl try-restart leasehold.service >/dev/null || true
fi
exit 0
