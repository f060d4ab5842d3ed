#!/usr/bin/env bash
# inn.sh: a real news server for leasehold's NNTP tests and the Usenet
# demo: Debian's INN (inn2), on 127.0.0.1 only, on a port of its own.
#
#   scripts/inn.sh start    install INN when missing (root), configure it,
#                           start innd as user news, wait until it answers
#   scripts/inn.sh stop     stop it (ctlinnd shutdown)
#   scripts/inn.sh env      print the environment the Go tests find it by
#   scripts/inn.sh post PREFIX [N [MIXDIR]]
#                           make groups PREFIX.a and PREFIX.b and post the
#                           fixed article set into them (N more generated
#                           multi-part files into PREFIX.a, for speed runs;
#                           with MIXDIR a realistic mix of yEnc posts too,
#                           its complete files written into MIXDIR)
#   scripts/inn.sh shapes PREFIX DIR [FILLERS]
#                           make groups PREFIX.a and PREFIX.b and post the
#                           shapes of today's posting tools into them (a
#                           release in two halves 5 hours and FILLERS plain
#                           articles apart, default 300), each release's
#                           files into DIR/NN/, the releases as posted
#                           into DIR/releases.json
#
# start and env print `export LEASEHOLD_TEST_NNTP=127.0.0.1:PORT` (and the
# ctlinnd and password file the tests use), so
#   eval "$(scripts/inn.sh start)"
# makes the NNTP tests run instead of skipping. INN_PORT (default 11119)
# chooses the port. NNTPS (TLS from the first byte) is served by an nnrpd
# daemon on INN_TLS_PORT (default 11563), with a certificate for
# 127.0.0.1 signed by a CA made here: LEASEHOLD_TEST_NNTPS names the
# address and LEASEHOLD_TEST_NNTPS_CA the CA's certificate. The same
# certificate makes the plain port offer STARTTLS (nnrpd lists it after
# MODE READER, once inn.conf names tlscertfile and tlskeyfile), which the
# STARTTLS tests use. Facts behind the steps: inn2's own set-up fails on a
# host without a domain (so domain: is set and dpkg --configure -a run),
# and its init script is refused without an init system (so innd -f is
# started here, detached). A login for AUTHINFO tests is made:
# user leasehold, its password in /etc/news/leasehold.passwd.plain.
set -euo pipefail
cd "$(dirname "$0")/.."

port="${INN_PORT:-11119}"
tls_port="${INN_TLS_PORT:-11563}"
tls_dir=/etc/news/leasehold-tls
conf=/etc/news/inn.conf
bin=/usr/lib/news/bin
log=/var/log/news/leasehold-innd.log

say() { echo "inn: $*" >&2; }

print_env() {
	echo "export LEASEHOLD_TEST_NNTP=127.0.0.1:$port"
	echo "export LEASEHOLD_TEST_CTLINND=$bin/ctlinnd"
	echo "export LEASEHOLD_TEST_NNTP_USER=leasehold"
	echo "export LEASEHOLD_TEST_NNTP_PASSWORD_FILE=/etc/news/leasehold.passwd.plain"
	echo "export LEASEHOLD_TEST_NNTPS=127.0.0.1:$tls_port"
	echo "export LEASEHOLD_TEST_NNTPS_CA=$tls_dir/ca.pem"
}

# answers reports whether something speaking NNTP greets on the port.
answers() {
	local line
	{ exec 3<>"/dev/tcp/127.0.0.1/${1:-$port}"; } 2>/dev/null || return 1
	IFS= read -r -t 5 line <&3 || line=""
	printf 'QUIT\r\n' >&3 2>/dev/null || true
	exec 3<&- 3>&-
	[[ "$line" == 200* || "$line" == 201* ]]
}

set_conf() { # key value
	if grep -q "^$1:" "$conf"; then
		sed -i "s|^$1:.*|$1:                         $2|" "$conf"
	else
		echo "$1: $2" >>"$conf"
	fi
}

install_inn() {
	if ! command -v openssl >/dev/null; then
		[ "$(id -u)" = 0 ] || { say "openssl (for the NNTPS test certificate) is missing and installing it needs root"; exit 1; }
		say "installing openssl with apt-get"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null
	fi
	if [ -x "$bin/innd" ] && dpkg-query -W -f='${Status}' inn2 2>/dev/null | grep -q 'ok installed'; then
		return
	fi
	[ "$(id -u)" = 0 ] || { say "INN is not installed and installing it needs root"; exit 1; }
	say "installing inn2 with apt-get (about 30 s)"
	export DEBIAN_FRONTEND=noninteractive
	if ! dpkg-query -W inn2 >/dev/null 2>&1 || [ ! -f "$conf" ]; then
		apt-get update -qq
		# Its set-up fails on a host without a domain: fixed below.
		apt-get install -y -qq --no-install-recommends inn2 >/dev/null 2>&1 || true
	fi
	[ -f "$conf" ] || { say "apt-get install inn2 left no $conf"; exit 1; }
	grep -q '^domain:' "$conf" || echo 'domain: localdomain' >>"$conf"
	dpkg --configure -a >/dev/null 2>&1 || true
	dpkg-query -W -f='${Status}' inn2 | grep -q 'ok installed' || { say "inn2 did not configure"; exit 1; }
}

configure() {
	set_conf port "$port"
	set_conf bindaddress 127.0.0.1
	set_conf bindaddress6 none
	# nnrpd refuses readers ("400 load at N, try later") when the load
	# average passes nnrpdloadlimit (16): a 2-core machine running the
	# suite's test binaries side by side reaches it. The tests' server is
	# private to them; it takes every reader.
	set_conf nnrpdloadlimit 0
	grep -q '^domain:' "$conf" || echo 'domain: localdomain' >>"$conf"
	# A login for the AUTHINFO tests, checked by ckpasswd.
	if [ ! -f /etc/news/leasehold.passwd ]; then
		(umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >/etc/news/leasehold.passwd.plain)
		local hash
		hash=$(python3 -c 'import crypt,sys;print(crypt.crypt(open(sys.argv[1]).read().strip(),crypt.mksalt(crypt.METHOD_SHA512)))' \
			/etc/news/leasehold.passwd.plain 2>/dev/null ||
			openssl passwd -6 -stdin </etc/news/leasehold.passwd.plain)
		echo "leasehold:$hash" >/etc/news/leasehold.passwd
		chown news:news /etc/news/leasehold.passwd
		chmod 0640 /etc/news/leasehold.passwd
	fi
	if ! grep -q 'leasehold-login' /etc/news/readers.conf; then
		cat >>/etc/news/readers.conf <<-'EOF'

		# leasehold-login: AUTHINFO for leasehold's NNTP tests (scripts/inn.sh).
		auth "leasehold-login" {
		    hosts: "localhost, 127.0.0.1, ::1"
		    auth: "ckpasswd -f /etc/news/leasehold.passwd"
		}
		access "leasehold-login" {
		    users: "leasehold"
		    newsgroups: "*"
		    access: RPA
		}
		EOF
	fi
}

# answers_tls reports whether an NNTP server greets over TLS on the TLS
# port, with a certificate the test CA vouches for.
answers_tls() {
	printf 'QUIT\r\n' | timeout 5 openssl s_client -quiet -verify_return_error -CAfile "$tls_dir/ca.pem" \
		-connect "127.0.0.1:$tls_port" 2>/dev/null | head -n 1 | grep -q '^20[01]'
}

# tls makes the test CA and a certificate for 127.0.0.1 it signs (the CA's
# key is thrown away), points INN's TLS settings at them, and starts an
# nnrpd daemon speaking TLS from the first byte on the TLS port.
tls() {
	if [ ! -f "$tls_dir/cert.pem" ]; then
		mkdir -p "$tls_dir"
		local tmp
		tmp=$(mktemp -d)
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=leasehold test CA" \
			-keyout "$tmp/ca.key" -out "$tls_dir/ca.pem" 2>/dev/null
		(umask 077 && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
			-keyout "$tls_dir/key.pem" -out "$tmp/server.csr" 2>/dev/null)
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$tmp/ext.cnf"
		openssl x509 -req -in "$tmp/server.csr" -CA "$tls_dir/ca.pem" -CAkey "$tmp/ca.key" -CAserial "$tmp/ca.srl" -CAcreateserial \
			-days 3650 -extfile "$tmp/ext.cnf" -out "$tls_dir/cert.pem" 2>/dev/null
		rm -rf "$tmp"
		chown news:news "$tls_dir/key.pem" "$tls_dir/cert.pem"
	fi
	set_conf tlscertfile "$tls_dir/cert.pem"
	set_conf tlskeyfile "$tls_dir/key.pem"
	if answers_tls; then
		return
	fi
	say "starting nnrpd -D -S (TLS) as news on 127.0.0.1:$tls_port"
	setsid su -s /bin/sh news -c "exec $bin/nnrpd -D -b 127.0.0.1 -p $tls_port -S" </dev/null >>"$log" 2>&1 &
	for _ in $(seq 50); do
		answers_tls && return
		sleep 0.1
	done
	say "nnrpd did not answer over TLS on 127.0.0.1:$tls_port; the log:"
	tail -n 20 "$log" >&2 || true
	exit 1
}

start() {
	install_inn
	configure
	if answers; then
		say "innd already answers on 127.0.0.1:$port"
		tls
		print_env
		return
	fi
	mkdir -p /run/news /var/log/news
	chown news:news /run/news /var/log/news
	rm -f /run/news/innd.pid /run/news/control /run/news/nntpin
	say "starting innd -f as news on 127.0.0.1:$port"
	# Detached from this shell and its terminal: it outlives the script.
	setsid su -s /bin/sh news -c "exec $bin/innd -f" </dev/null >>"$log" 2>&1 &
	for _ in $(seq 100); do
		if answers; then
			tls
			print_env
			return
		fi
		sleep 0.1
	done
	say "innd did not answer on 127.0.0.1:$port; its log:"
	tail -n 20 "$log" >&2 || true
	exit 1
}

stop() {
	pkill -f "nnrpd -D -b 127.0.0.1 -p $tls_port" 2>/dev/null || true
	if [ -x "$bin/ctlinnd" ] && answers; then
		"$bin/ctlinnd" -t 5 shutdown "leasehold inn.sh stop" >/dev/null || true
		for _ in $(seq 50); do
			answers || { say "stopped"; return; }
			sleep 0.1
		done
		say "innd still answers"
		exit 1
	fi
	say "not running"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env) print_env ;;
post)
	[ -n "${2:-}" ] || { echo "usage: $0 post PREFIX [N [MIXDIR]]" >&2; exit 2; }
	eval "$(print_env)"
	go run ./internal/usenettest/cmd/usenet-post --prefix "$2" --files "${3:-0}" ${4:+--mix "$4"}
	;;
shapes)
	[ -n "${2:-}" ] && [ -n "${3:-}" ] || { echo "usage: $0 shapes PREFIX DIR [FILLERS]" >&2; exit 2; }
	eval "$(print_env)"
	go run ./internal/usenettest/cmd/usenet-post --prefix "$2" --shapes "$3" --fillers "${4:-300}"
	;;
*)
	echo "usage: $0 start|stop|env|post PREFIX [N [MIXDIR]]|shapes PREFIX DIR [FILLERS]" >&2
	exit 2
	;;
esac
