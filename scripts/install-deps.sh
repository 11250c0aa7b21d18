#!/usr/bin/env bash
# Installs the system packages that the integration tests and the demo need:
# redis-server (the masters), redis-sentinel (Sentinel-managed masters) and
# faketime (clock faults, via libfaketime),
# plus gcc and libc6-dev where no C compiler exists (go test -race needs
# cgo). Idempotent: does nothing when everything is present. Installs with
# apt-get when run as root; otherwise prints the command to run and exits 1.
# The Debian package's own Redis service is kept from running: the tests
# start their own masters on free ports, and nothing should be left
# listening on 6379.
#
# `install-deps.sh redis-server` installs only redis-server: what the demo
# needs to run on real masters (without it, it runs on in-process ones).
set -euo pipefail

only_redis=0
[ "${1:-}" = redis-server ] && only_redis=1

packages=(redis-server)
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ "$only_redis" -eq 0 ]; then
	packages+=(redis-sentinel)
	command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
	packages+=(faketime)
	command -v faketime >/dev/null 2>&1 || missing+=(faketime)
	# The preload library is what the clock-fault tests actually load.
	if ! compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null; then
		missing+=(libfaketime)
	fi
	# The race detector needs cgo, and Go disables cgo without a C compiler.
	if ! command -v gcc >/dev/null 2>&1 || [ ! -e /usr/include/stdlib.h ]; then
		missing+=(gcc libc6-dev)
		packages+=(gcc libc6-dev)
	fi
fi

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: ok (${packages[*]} present)"
	exit 0
fi

install_cmd="apt-get update && apt-get install -y ${packages[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: missing ${missing[*]}, and this is not a Debian/Ubuntu system (no apt-get)." >&2
	echo "install-deps: install redis-server and redis-sentinel (7.x), libfaketime and gcc with your package manager." >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing ${missing[*]}. Install them with:" >&2
	echo "    sudo sh -c '$install_cmd'" >&2
	exit 1
fi

# Keep the package from starting its service (policy-rc.d exit 101 means
# "do not start"), unless the machine already has a policy of its own.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# temporary, from redlock scripts/install-deps.sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	own_policy=1
fi
cleanup() { if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

echo "install-deps: installing ${packages[*]} (missing: ${missing[*]})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null

# Stop and disable the system service in case it started anyway; each step
# is harmless where it does not apply.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl disable --now redis-server.service redis-sentinel.service >/dev/null 2>&1 || true
fi
for svc in redis-server redis-sentinel; do
	if [ -x "/etc/init.d/$svc" ]; then
		"/etc/init.d/$svc" stop >/dev/null 2>&1 || true
	fi
done
if command -v redis-cli >/dev/null 2>&1 && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
	echo "install-deps: warning: something still answers on 127.0.0.1:6379 (the tests do not use it)" >&2
fi

if ! command -v redis-server >/dev/null 2>&1 ||
	{ [ "$only_redis" -eq 0 ] && { ! command -v faketime >/dev/null 2>&1 || ! command -v gcc >/dev/null 2>&1; }; }; then
	echo "install-deps: apt-get finished, but one of ${packages[*]} is still missing" >&2
	exit 1
fi
echo "install-deps: installed ($(redis-server --version | awk '{print $1, $2, $3}'))"
