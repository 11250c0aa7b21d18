#!/usr/bin/env bash
# build-image.sh builds a minimal local Redis image from the host's Debian
# redis-server binary, for machines that cannot pull images from a registry.
#
# The image holds /usr/bin/redis-server, every shared library ldd lists, the
# dynamic loader and empty /data and /tmp directories; it is made with
# `docker import`, so it has no shell and no package manager. Its entrypoint
# is redis-server and its default arguments turn protected mode and
# persistence off, so `docker run -p 127.0.0.1::6379 IMAGE` is usable as is.
# Arguments given to `docker run` replace the defaults.
#
# Environment:
#   REDLOCK_REDIS_IMAGE  image name (default redlock-redis:local)
#   REDIS_SERVER         binary to package (default /usr/bin/redis-server)
#   FORCE=1              rebuild even if the image exists
#
# The script is idempotent: an existing image is only verified. It installs
# redis-server (scripts/install-deps.sh, else apt-get as root) if missing.
set -euo pipefail

image="${REDLOCK_REDIS_IMAGE:-redlock-redis:local}"
server="${REDIS_SERVER:-/usr/bin/redis-server}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'build-image: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "docker daemon not reachable (is dockerd running? DOCKER_HOST=${DOCKER_HOST:-unset})"

# verify runs the image with the arguments the harness uses, PINGs it over a
# port published on 127.0.0.1 and removes the container.
cid=""
rootfs=""
cleanup() {
	if [ -n "$cid" ]; then docker rm -f "$cid" >/dev/null 2>&1 || true; fi
	if [ -n "$rootfs" ]; then rm -rf "$rootfs"; fi
}
trap cleanup EXIT

verify() {
	local port i reply=""
	cid="$(docker run --rm -d -p 127.0.0.1::6379 "$image" --protected-mode no --save '' --appendonly no)"
	port="$(docker port "$cid" 6379/tcp | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n1)"
	[ -n "$port" ] || die "no 127.0.0.1 port published for $cid"
	for i in $(seq 1 100); do
		# A bash /dev/tcp probe: no redis-cli needed on the host. ($(...)
		# drops the final newline of "+PONG\r\n".)
		reply="$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 && timeout 1 head -c 7 <&3) 2>/dev/null || true)"
		[ "$reply" = $'+PONG\r' ] && break
		sleep 0.05
	done
	if [ "$reply" != $'+PONG\r' ]; then
		docker logs "$cid" >&2 || true
		die "$image did not answer PING on 127.0.0.1:$port"
	fi
	log "$image answers PING (container ${cid:0:12}, 127.0.0.1:$port)"
	docker rm -f "$cid" >/dev/null
	cid=""
}

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$image" >/dev/null 2>&1; then
	log "$image exists (FORCE=1 rebuilds it)"
	verify
	exit 0
fi

if [ ! -x "$server" ]; then
	if [ -x "$here/install-deps.sh" ]; then
		log "$server missing; running scripts/install-deps.sh"
		"$here/install-deps.sh"
	elif [ "$(id -u)" = 0 ]; then
		log "$server missing; installing redis-server with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
	fi
	[ -x "$server" ] || die "$server not found; install it with: apt-get install -y redis-server"
fi

rootfs="$(mktemp -d)"

# copy_in copies a file, following symlinks, to the same path in the rootfs.
copy_in() {
	mkdir -p "$rootfs$(dirname "$1")"
	cp -L "$1" "$rootfs$1"
}

# The file is named redis-server in the image even if the host's is a symlink
# (Debian links redis-server to redis-check-rdb): redis picks its mode from
# argv[0].
mkdir -p "$rootfs/usr/bin"
cp -L "$server" "$rootfs/usr/bin/redis-server"
# ldd prints "name => /path (addr)" for libraries and "/path (addr)" for the
# loader; linux-vdso has no file.
libs="$(ldd "$server" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)"
[ -n "$libs" ] || die "ldd listed no libraries for $server"
for lib in $libs; do
	copy_in "$lib"
done
mkdir -p "$rootfs/data" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
chmod 0777 "$rootfs/data"
# Minimal identity files, so tools that look up uid 0 find a name.
mkdir -p "$rootfs/etc"
printf 'root:x:0:0:root:/data:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"

old_id="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
version="$("$server" --version | head -n1)"
log "importing $image from $server ($version) and $(wc -w <<<"$libs") libraries"
tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -c . |
	docker import \
		-c 'ENTRYPOINT ["/usr/bin/redis-server"]' \
		-c 'CMD ["--protected-mode", "no", "--save", "", "--appendonly", "no"]' \
		-c 'WORKDIR /data' \
		-c 'EXPOSE 6379' \
		-c 'LABEL org.opencontainers.image.description="redis-server from the host, for redlock tests"' \
		-m "redlock: $version" \
		- "$image" >/dev/null
# A rebuild leaves the previous image untagged: remove it unless in use.
if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect -f '{{.Id}}' "$image")" ]; then
	docker rmi "$old_id" >/dev/null 2>&1 || log "kept the previous image $old_id (in use)"
fi
verify
