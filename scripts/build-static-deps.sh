#!/usr/bin/env bash
# Builds, from Debian's source packages, the static libraries the portable binary needs
# and Debian does not ship usable: oniguruma (mbstring) and libzip (zip) have no .a at
# all; Debian's libcurl.a and libpq.a need GSSAPI (krb5) and LDAP (sasl2), which have
# none. So curl is built with OpenSSL, zlib and nghttp2 (HTTP/2) only (no GSSAPI, LDAP,
# RTMP, SSH, PSL, IDN or Brotli), libpq without GSSAPI and LDAP, libzip with OpenSSL,
# bzip2 and xz, and without glibc's arc4random (2.36+) so the binary runs on glibc 2.35.
#
# Cached in ~/.cache/php_worker/static-deps-<key>/ (lib/*.a); prints that directory.
# Needs scripts/install-deps.sh --portable (cmake, deb-src).
set -euo pipefail

log() { echo "build-static-deps: $*" >&2; }

recipe_version=2
packages=(libonig libzip curl postgresql-15)
cache_root=${PHP_WORKER_CACHE:-$HOME/.cache/php_worker}
out="$cache_root/static-deps-r$recipe_version"
if [ -f "$out/.complete" ]; then
	echo "$out"
	exit 0
fi

if [ -n "${PHP_WORKER_CACHED_ONLY:-}" ]; then
	log "not built yet (PHP_WORKER_CACHED_ONLY is set: not building them)"
	exit 3
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock-static-deps"
flock 9
if [ -f "$out/.complete" ]; then
	echo "$out"
	exit 0
fi

work="$cache_root/static-deps-build"
rm -rf "$work" "$out"
mkdir -p "$work" "$out/lib"
cd "$work"

# The newest version apt can fetch (security updates can name versions the mirror lacks).
fetch() {
	local v
	for v in $(apt-cache showsrc "$1" | awk '/^Version:/ {print $2}' | sort -Vr | uniq); do
		if apt-get source -qq "$1=$v" >/dev/null 2>&1; then
			echo "$1 $v" >>"$out/versions"
			return 0
		fi
	done
	log "no version of the $1 source package could be fetched"
	return 1
}
for p in "${packages[@]}"; do
	log "fetching $p"
	fetch "$p"
done

cmake_static() {
	(cd "$1" && cmake -S . -B _build -DCMAKE_INSTALL_PREFIX="$out" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
		-DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_BUILD_TYPE=Release "${@:2}" &&
		cmake --build _build -j"$(nproc)" && cmake --install _build) >"$work/$(basename "$1").log" 2>&1 ||
		{ tail -n 30 "$work/$(basename "$1").log" >&2; exit 1; }
}

log "building oniguruma"
cmake_static libonig-*/
log "building libzip"
cmake_static libzip-*/ -DENABLE_GNUTLS=OFF -DENABLE_MBEDTLS=OFF -DENABLE_OPENSSL=ON -DENABLE_ZSTD=OFF \
	-DBUILD_TOOLS=OFF -DBUILD_REGRESS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_DOC=OFF \
	-DHAVE_ARC4RANDOM=OFF # glibc has arc4random only since 2.36; libzip then reads OpenSSL's generator

log "building curl"
(cd curl-*/ && ./configure --prefix="$out" --disable-shared --enable-static --with-pic --with-openssl --with-zlib \
	--without-libpsl --without-libssh2 --without-librtmp --without-gssapi --disable-ldap --disable-ldaps \
	--with-nghttp2 --without-brotli --without-zstd --without-libidn2 --disable-manual --disable-docs \
	--without-ca-bundle --with-ca-path=/etc/ssl/certs && make -j"$(nproc)" -C lib && make -C lib install) \
	>"$work/curl.log" 2>&1 || { tail -n 30 "$work/curl.log" >&2; exit 1; }

log "building libpq"
(cd postgresql-15-*/ && ./configure --without-readline --without-icu --without-gssapi --without-ldap --with-openssl \
	--without-zlib CFLAGS="-O2 -fPIC" && make -C src/port -j"$(nproc)" && make -C src/common -j"$(nproc)" &&
	make -C src/interfaces/libpq -j"$(nproc)" &&
	cp src/interfaces/libpq/libpq.a src/common/libpgcommon_shlib.a src/port/libpgport_shlib.a "$out/lib/") \
	>"$work/libpq.log" 2>&1 || { tail -n 30 "$work/libpq.log" >&2; exit 1; }

cd /
rm -rf "$work"
touch "$out/.complete"
log "done: $(tr '\n' ' ' <"$out/versions")"
echo "$out"
