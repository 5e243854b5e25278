#!/usr/bin/env bash
# Builds, from Debian 12's source packages, the static libraries the portable binary needs
# and Debian does not ship usable:
#   - no .a at all: oniguruma (mbstring), libzip (zip), libmemcached (memcached), libxslt
#     and libexslt (xsl);
#   - a .a that needs libraries with none: libcurl.a and libpq.a need GSSAPI (krb5),
#     libldap.a needs GnuTLS's p11-kit, ImageMagick's needs X11, fontconfig, fftw and more.
# So curl is built with OpenSSL, zlib and nghttp2 (HTTP/2) only (no GSSAPI, LDAP, RTMP,
# SSH, PSL, IDN or Brotli), libpq without GSSAPI and LDAP, libzip with OpenSSL, bzip2 and
# xz, and without glibc's arc4random (2.36+) so the binary runs on glibc 2.35; OpenLDAP's
# client libraries with OpenSSL and without SASL; libmemcached without SASL; libxslt
# without libgcrypt; ImageMagick 6 (Q16, as Debian's, whose headers PHP's imagick was
# compiled against) with JPEG, PNG, WebP, zlib, bzip2 and xz, its coders inside the
# library, no configuration files needed, and without OpenMP: its threads do not belong
# in a threaded server.
#
# Cached in ~/.cache/php_worker/static-deps-<key>/ (lib/*.a); prints that directory.
# Needs scripts/install-deps.sh --portable (cmake). With PHP_WORKER_TARGET=arm64 it
# cross-builds them for aarch64 against scripts/arm64-sysroot.sh's sysroot (with
# scripts/install-deps.sh --arm64's compilers), into static-deps-<key>-arm64/.
set -euo pipefail

log() { echo "build-static-deps: $*" >&2; }

recipe_version=3
packages=(libonig libzip curl postgresql-15 libmemcached libxslt openldap imagemagick)
scripts=$(cd "$(dirname "$0")" && pwd)
cache_root=${PHP_WORKER_CACHE:-$HOME/.cache/php_worker}
# For the machine the binary runs on: configure's --host, the compilers, pkg-config's
# view and CMake's, all empty for the build machine itself.
suffix= host_flags=() cmake_flags=() cross_env=() ldap_flags=()
case ${PHP_WORKER_TARGET:-} in
"") ;;
arm64)
	suffix=-arm64
	sysroot=$("$scripts/arm64-sysroot.sh")
	host=aarch64-linux-gnu
	host_flags=(--host=$host)
	# What OpenLDAP cannot test when cross-building (and otherwise takes a replacement
	# memcmp it does not build into libldap): glibc's memcmp works, Linux's select() yields.
	ldap_flags=(--with-yielding-select=yes ac_cv_func_memcmp_working=yes)
	cross_env=(CC="$host-gcc --sysroot=$sysroot" CXX="$host-g++ --sysroot=$sysroot" AR=$host-ar RANLIB=$host-ranlib
		PKG_CONFIG_LIBDIR="$sysroot/usr/lib/$host/pkgconfig:$sysroot/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$sysroot")
	cmake_flags=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER=$host-gcc
		-DCMAKE_CXX_COMPILER=$host-g++ -DCMAKE_SYSROOT="$sysroot" -DCMAKE_LIBRARY_ARCHITECTURE=$host
		-DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY
		-DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY)
	;;
*) log "unknown PHP_WORKER_TARGET ${PHP_WORKER_TARGET} (arm64 is known)"; exit 2 ;;
esac
out="$cache_root/static-deps-r$recipe_version$suffix"
if [ -f "$out/.complete" ]; then
	echo "$out"
	exit 0
fi

if [ -n "${PHP_WORKER_CACHED_ONLY:-}" ]; then
	log "not built yet (PHP_WORKER_CACHED_ONLY is set: not building them)"
	exit 3
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock-static-deps$suffix"
flock 9
if [ -f "$out/.complete" ]; then
	echo "$out"
	exit 0
fi

# A run that failed part way resumes: each library built leaves a stamp in $out, and the
# sources stay unpacked in $work until everything is built.
work="$cache_root/static-deps-build-r$recipe_version$suffix"
mkdir -p "$work" "$out/lib"
cd "$work"
built() { [ -f "$out/.built-$1" ]; }
done_building() { touch "$out/.built-$1"; }

# The newest version that downloads (security updates can name versions the mirror lacks);
# its upstream tarball alone when Debian's own files do not download.
for p in "${packages[@]}"; do
	[ -z "$(find . -maxdepth 2 -name .debian-version -path "./$p-[0-9]*")" ] || continue
	log "fetching $p"
	python3 "$scripts/fetch-source.py" --suites bookworm --upstream-only "$p" "$work" >/dev/null
done
for p in "${packages[@]}"; do
	echo "$p $(cat "$p"-[0-9]*/.debian-version)"
done >"$out/versions"

cmake_static() {
	(cd "$1" && cmake -S . -B _build -DCMAKE_INSTALL_PREFIX="$out" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
		-DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_BUILD_TYPE=Release "${cmake_flags[@]}" "${@:2}" &&
		cmake --build _build -j"$(nproc)" && cmake --install _build) >"$work/$(basename "$1").log" 2>&1 ||
		{ tail -n 30 "$work/$(basename "$1").log" >&2; exit 1; }
}

built oniguruma || { log "building oniguruma"; cmake_static libonig-*/; done_building oniguruma; }
built libzip || {
log "building libzip"
cmake_static libzip-*/ -DENABLE_GNUTLS=OFF -DENABLE_MBEDTLS=OFF -DENABLE_OPENSSL=ON -DENABLE_ZSTD=OFF \
	-DBUILD_TOOLS=OFF -DBUILD_REGRESS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_DOC=OFF \
	-DHAVE_ARC4RANDOM=OFF # glibc has arc4random only since 2.36; libzip then reads OpenSSL's generator
done_building libzip; }

built curl || {
log "building curl"
(cd curl-*/ && env "${cross_env[@]}" ./configure "${host_flags[@]}" --prefix="$out" --disable-shared --enable-static --with-pic --with-openssl --with-zlib \
	--without-libpsl --without-libssh2 --without-librtmp --without-gssapi --disable-ldap --disable-ldaps \
	--with-nghttp2 --without-brotli --without-zstd --without-libidn2 --disable-manual --disable-docs \
	--without-ca-bundle --with-ca-path=/etc/ssl/certs && make -j"$(nproc)" -C lib && make -C lib install) \
	>"$work/curl.log" 2>&1 || { tail -n 30 "$work/curl.log" >&2; exit 1; }
done_building curl; }

built libpq || {
log "building libpq"
(cd postgresql-15-*/ && env "${cross_env[@]}" ./configure "${host_flags[@]}" --without-readline --without-icu --without-gssapi --without-ldap --with-openssl \
	--without-zlib CFLAGS="-O2 -fPIC" && make -C src/port -j"$(nproc)" && make -C src/common -j"$(nproc)" &&
	make -C src/interfaces/libpq -j"$(nproc)" &&
	cp src/interfaces/libpq/libpq.a src/common/libpgcommon_shlib.a src/port/libpgport_shlib.a "$out/lib/") \
	>"$work/libpq.log" 2>&1 || { tail -n 30 "$work/libpq.log" >&2; exit 1; }
done_building libpq; }

built libmemcached || {
log "building libmemcached"
cmake_static libmemcached-*/ -DENABLE_SASL=OFF -DBUILD_TESTING=OFF -DBUILD_DOCS=OFF -DBUILD_DOCSONLY=OFF \
	-DENABLE_MEMASLAP=OFF -DENABLE_DTRACE=OFF
done_building libmemcached; }

built libxslt || {
log "building libxslt"
# Its tarball's configure comes from a newer libtool than Debian 12's: regenerate it.
(cd libxslt-*/ && autoreconf -fi && env "${cross_env[@]}" ./configure "${host_flags[@]}" --prefix="$out" --libdir="$out/lib" --disable-shared --enable-static --with-pic \
	--without-crypto --without-python --without-debugger --without-plugins &&
	make -j"$(nproc)" -C libxslt && make -j"$(nproc)" -C libexslt &&
	make -C libxslt install && make -C libexslt install) >"$work/libxslt.log" 2>&1 ||
	{ tail -n 30 "$work/libxslt.log" >&2; exit 1; }
done_building libxslt; }

built openldap || {
log "building OpenLDAP's client libraries"
(cd openldap-*/ && env "${cross_env[@]}" ./configure "${host_flags[@]}" --prefix="$out" --libdir="$out/lib" --disable-shared --enable-static --with-pic \
	--disable-slapd --without-cyrus-sasl --with-tls=openssl --without-systemd --without-argon2 "${ldap_flags[@]}" &&
	make -j"$(nproc)" depend && make -j"$(nproc)" -C include && make -j"$(nproc)" -C libraries/liblber liblber.la &&
	make -j"$(nproc)" -C libraries/libldap libldap.la &&
	cp libraries/liblber/.libs/liblber.a libraries/libldap/.libs/libldap.a "$out/lib/") \
	>"$work/openldap.log" 2>&1 || { tail -n 30 "$work/openldap.log" >&2; exit 1; }
done_building openldap; }

built imagemagick || {
log "building ImageMagick (no OpenMP); this takes a few minutes"
(cd imagemagick-*/ && env "${cross_env[@]}" ./configure "${host_flags[@]}" --prefix="$out" --libdir="$out/lib" --disable-shared --enable-static --with-pic \
	--disable-openmp --disable-opencl --enable-zero-configuration --with-quantum-depth=16 --disable-hdri \
	--without-modules --without-magick-plus-plus --without-perl --without-x --disable-docs \
	--with-jpeg --with-png --with-webp --with-zlib --with-bzlib --with-lzma \
	--without-fontconfig --without-freetype --without-lcms --without-fftw --without-lqr --without-djvu \
	--without-openexr --without-openjp2 --without-tiff --without-heic --without-raw --without-wmf --without-xml \
	--without-gvc --without-jbig --without-pango --without-rsvg --without-zstd --without-dps --without-fpx \
	--without-gslib --without-ltdl --without-flif --without-jxl --without-raqm --without-autotrace &&
	make -j"$(nproc)" && make install) >"$work/imagemagick.log" 2>&1 ||
	{ tail -n 30 "$work/imagemagick.log" >&2; exit 1; }
done_building imagemagick; }

cd /
rm -rf "$work"
touch "$out/.complete"
log "done: $(tr '\n' ' ' <"$out/versions")"
echo "$out"
