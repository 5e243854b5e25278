#!/usr/bin/env bash
# Makes a Debian 12 arm64 sysroot for cross-building PHP and php_worker on an x86-64 host,
# once, into the cache, and prints its path: the arm64 builds of the library packages PHP
# links (scripts/install-deps.sh --print-lib-pkgs) and everything they depend on, unpacked
# with dpkg-deb, not installed. Installing them as `-dev:arm64` packages (multiarch) would
# remove their amd64 twins, since some (libonig-dev, libpq-dev, libmemcached-dev,
# libmagickwand-dev, libsasl2-dev) cannot be installed for two architectures at once.
#
#   scripts/arm64-sysroot.sh           the sysroot's path (built when missing)
#
# It needs arm64 in dpkg's architectures for apt to download arm64 packages, and adds it
# when it is missing (dpkg --add-architecture arm64, then apt-get update: indexes only).
# Absolute symbolic links inside (libz.so -> /lib/aarch64-linux-gnu/libz.so.1) are made to
# point inside the sysroot, so that the cross linker finds their targets.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
log() { echo "arm64-sysroot: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

mapfile -t libs < <("$scripts/install-deps.sh" --print-lib-pkgs)
libs+=(libc6-dev libstdc++-12-dev)
cache_root=${PHP_WORKER_CACHE:-$HOME/.cache/php_worker}
key=$(printf '%s\n' recipe=2 "${libs[@]}" | sha256sum | cut -c1-8)
sysroot="$cache_root/sysroot-arm64-$key"
if [ -f "$sysroot/.complete" ]; then
	echo "$sysroot/root"
	exit 0
fi

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	log "adding arm64 to dpkg's architectures (package indexes only; nothing is installed)"
	as_root dpkg --add-architecture arm64
	as_root apt-get update -qq
fi
# The packages and their dependencies, arm64 ones, and architecture-independent ones
# (headers some -dev packages keep apart).
# An architecture-independent package (libmagickwand-dev, a name for
# libmagickwand-6.q16-dev) has no arm64 build: its dependencies are taken for arm64.
arch_of() { apt-cache show "$1" 2>/dev/null | awk '/^Architecture:/ {print $2; exit}'; }
arm=()
for p in "${libs[@]}"; do
	if [ "$(arch_of "$p")" = all ]; then
		for d in $(apt-cache depends "$p" | awk '/^ *Depends:/ && $2 !~ /^</ {print $2}'); do arm+=("$d:arm64"); done
	else
		arm+=("$p:arm64")
	fi
done
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
	--no-replaces --no-enhances "${arm[@]}" | grep -v '^[ <]' | sort -u)
wanted=()
for p in "${closure[@]}"; do
	if [[ $p == *:arm64 ]]; then
		wanted+=("$p")
	elif [ "$(arch_of "$p")" = all ]; then
		wanted+=("$p")
	fi
done
log "downloading ${#wanted[@]} packages into a new sysroot"
rm -rf "$sysroot.tmp"
mkdir -p "$sysroot.tmp/debs"
(cd "$sysroot.tmp/debs" && apt-get download -q "${wanted[@]}" >download.log 2>&1) ||
	{ tail -n 20 "$sysroot.tmp/debs/download.log" >&2; exit 1; }
root="$sysroot.tmp/root"
mkdir -p "$root"
for deb in "$sysroot.tmp/debs"/*.deb; do
	dpkg-deb -x "$deb" "$root"
done
final_root="$sysroot/root"
find "$root" -type l -lname '/*' | while read -r link; do
	ln -sfn "$final_root$(readlink "$link")" "$link"
done
(cd "$sysroot.tmp/debs" && ls ./*.deb | sed 's|^\./||') >"$sysroot.tmp/packages.txt"
rm -rf "$sysroot.tmp/debs" "$sysroot"
mv "$sysroot.tmp" "$sysroot"
touch "$sysroot/.complete"
log "done: $(wc -l <"$sysroot/packages.txt") packages in $sysroot"
echo "$sysroot/root"
