#!/usr/bin/env bash
# Builds a thread-safe (ZTS) PHP 8.2 with the embed SAPI from Debian's php8.2 source
# package, once, into a cache outside the clone, and prints the path of its php-config.
#
#   PHP_CONFIG=/path/to/php-config scripts/build-php.sh   checks a build of your own instead
#   PHP_WORKER_CACHE=/somewhere scripts/build-php.sh       cache root (default ~/.cache/php_worker)
#   PHP_WORKER_PHP_ASAN=1 scripts/build-php.sh             AddressSanitizer build (scripts/asan.sh)
#
# The cache directory is named after the PHP version and a hash of the configure flags and
# of recipe_version, so changing the flags (or bumping recipe_version when the build steps
# change) builds a new PHP next to the old one.
# Progress goes to stderr; stdout carries only the php-config path.
set -euo pipefail

patch_dir=$(cd "$(dirname "$0")" && pwd)/php-patches

log() { echo "build-php: $*" >&2; }

# The directory holding libphp.so (the embed SAPI), or nothing.
php_lib_dir() {
	local prefix d
	prefix=$("$1" --prefix)
	for d in "$prefix/lib" "$prefix/lib/php" "$prefix/lib64"; do
		if [ -e "$d/libphp.so" ] || [ -e "$d/libphp.a" ]; then echo "$d"; return; fi
	done
}

# Refuses a PHP that php_worker cannot embed: it must be ZTS and have the embed SAPI.
check_php() {
	local config=$1
	[ -x "$config" ] || { log "$config is not an executable php-config"; return 1; }
	local inc
	inc=$("$config" --include-dir)
	if ! grep -q '^#define ZTS 1' "$inc/main/php_config.h"; then
		log "$config belongs to a non-thread-safe (NTS) PHP. php_worker runs PHP on several"
		log "threads and needs a ZTS build (configure --enable-zts --enable-embed)."
		return 1
	fi
	if [ -z "$(php_lib_dir "$config")" ]; then
		log "$config has no libphp.so next to it: PHP was built without the embed SAPI"
		log "(configure --enable-embed)."
		return 1
	fi
	if ! "$config" --version | grep -q '^8\.'; then
		log "$config is PHP $("$config" --version); php_worker needs PHP 8.2 or newer."
		return 1
	fi
}

if [ -n "${PHP_CONFIG:-}" ]; then
	check_php "$PHP_CONFIG" || exit 1
	echo "$PHP_CONFIG"
	exit 0
fi

configure_flags=(
	--enable-zts --enable-embed=shared --disable-zend-signals --enable-zend-max-execution-timers
	--enable-opcache --enable-cli --disable-cgi --disable-phpdbg
	--enable-ctype --enable-filter --enable-tokenizer --enable-session --enable-mbstring
	--with-iconv --enable-fileinfo
	--enable-pdo --with-pdo-sqlite --with-pdo-pgsql --with-pdo-mysql=mysqlnd
	--with-sqlite3 --with-mysqli=mysqlnd
	--with-openssl --with-curl --with-zlib
	--enable-xml --enable-dom --enable-simplexml --enable-xmlreader --enable-xmlwriter
	--enable-bcmath --enable-intl --with-sodium --enable-pcntl --enable-posix --enable-phar
	--with-zip --with-password-argon2
	--enable-gd --with-jpeg --with-webp --with-freetype --enable-exif
	--with-mysql-sock=/run/mysqld/mysqld.sock
)

# PHP_WORKER_PHP_ASAN=1 (set by scripts/asan.sh) adds PHP's own --enable-address-sanitizer
# (-fsanitize=address -fno-omit-frame-pointer -DZEND_TRACK_ARENA_ALLOC): the flag joins the
# hashed flags and "-asan" the directory name, so that build is cached next to the normal
# one. Unset, the flags, hash and directory name are exactly what they were before. The
# build runs the PHP it just built (phar); leak reports at its exit would fail it, hence
# detect_leaks=0.
variant=
if [ -n "${PHP_WORKER_PHP_ASAN:-}" ]; then
	configure_flags+=(--enable-address-sanitizer)
	variant=-asan
	export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi

# PHP_WORKER_PHP_STATIC=1 (set by scripts/build-portable.sh) builds libphp.a instead of
# libphp.so, for a binary that carries PHP: its php.ini is /etc/php_worker/php.ini (and
# conf.d/ beside it), the same for every machine it is copied to. libsodium carries its
# own copy of argon2, whose symbols clash with libargon2's once both are linked
# statically; without libargon2, ext/sodium provides password_hash()'s argon2
# algorithms, so scripts see the same PASSWORD_ARGON2I/ID.
config_dir=
if [ -n "${PHP_WORKER_PHP_STATIC:-}" ]; then
	flags=()
	for f in "${configure_flags[@]}"; do
		case $f in
		--enable-embed=shared) flags+=(--enable-embed=static) ;;
		--with-password-argon2) ;;
		*) flags+=("$f") ;;
		esac
	done
	configure_flags=("${flags[@]}")
	config_dir=/etc/php_worker
	configure_flags+=(--with-config-file-path="$config_dir" --with-config-file-scan-dir="$config_dir/conf.d")
	variant=-static
fi

cache_root=${PHP_WORKER_CACHE:-$HOME/.cache/php_worker}
recipe_version=5
build_key=$(printf '%s\n' "recipe=$recipe_version" "${configure_flags[@]}" | sha256sum | cut -c1-8)

# One build at a time: a second run (another shell sourcing scripts/env.sh) waits for
# the first instead of deleting its build directory, then reuses what it built.
# A variant build (ASan) locks its own file instead, so that its long build never holds up
# a normal one; it takes the shared lock only while it looks for or fetches the source.
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock$variant"
flock 9

# Newest source version first; the newest listed can 404, so we fall back in order.
mapfile -t versions < <(apt-cache showsrc php8.2 2>/dev/null | awk '/^Version:/ {print $2}' | sort -Vr | uniq)
[ ${#versions[@]} -gt 0 ] || { log "apt has no php8.2 source package; run scripts/install-deps.sh"; exit 1; }

# Reuse any complete cached build of a listed version with these flags.
for v in "${versions[@]}"; do
	upstream=${v%%-*}
	prefix="$cache_root/php-$upstream-zts$variant-$build_key"
	if [ -f "$prefix/.complete" ]; then
		check_php "$prefix/bin/php-config" || exit 1
		echo "$prefix/bin/php-config"
		exit 0
	fi
done

if [ -n "${PHP_WORKER_CACHED_ONLY:-}" ]; then
	log "no cached build with these flags (PHP_WORKER_CACHED_ONLY is set: not building one)"
	exit 3
fi

if [ -n "$variant" ]; then exec 8>"$cache_root/.lock"; flock 8; fi
mkdir -p "$cache_root/src"
srcdir=
for v in "${versions[@]}"; do
	upstream=${v%%-*}
	existing=$(find "$cache_root/src" -maxdepth 1 -type d -name "php8.2-$upstream" | head -n 1)
	if [ -n "$existing" ] && [ -f "$existing/configure.ac" ]; then
		srcdir=$existing
		break
	fi
	log "fetching php8.2=$v source from apt"
	if (cd "$cache_root/src" && apt-get source -qq "php8.2=$v" >&2); then
		srcdir="$cache_root/src/php8.2-$upstream"
		break
	fi
	log "php8.2=$v could not be fetched, trying the next version"
done
[ -n "$srcdir" ] && [ -d "$srcdir" ] || { log "no php8.2 source version could be fetched"; exit 1; }
if [ -n "$variant" ]; then exec 8>&-; fi

upstream=$(basename "$srcdir"); upstream=${upstream#php8.2-}
prefix="$cache_root/php-$upstream-zts$variant-$build_key"
build="$cache_root/build-$upstream$variant-$build_key"
log "building PHP $upstream (ZTS, embed${variant:+, $variant}) into $prefix; this takes several minutes"

rm -rf "$build" "$prefix"
cp -a "$srcdir" "$build"
cd "$build"
# OPcache only runs under SAPIs it knows by name; add ours next to FrankenPHP's.
sed -i 's/^\(\t*\)"frankenphp",$/&\n\1"php_worker",/' ext/opcache/ZendAccelerator.c
grep -q '"php_worker",' ext/opcache/ZendAccelerator.c || { log "could not teach OPcache the php_worker SAPI name"; exit 1; }
# php_worker's patches (scripts/php-patches/, each says why at its top).
for patch in "$patch_dir"/*.patch; do
	patch -p1 --quiet <"$patch" || { log "could not apply $(basename "$patch")"; exit 1; }
done
# Debian's packaging moves the default session.save_path to /var/lib/php/sessions, a
# directory only its php-common package creates; keep upstream's default (the temp dir).
sed -i 's|"session.save_path",\( *\)"/var/lib/php/sessions"|"session.save_path",\1""|' ext/session/session.c
grep -q '"session.save_path", *""' ext/session/session.c || { log "could not restore session.save_path's default"; exit 1; }
# Debian's tree ships a configure generated for its own packaging; regenerate to be sure.
./buildconf --force >/dev/null 2>&1 || true
config_flags=(--with-config-file-path="$prefix/etc" --with-config-file-scan-dir="$prefix/etc/conf.d")
[ -z "$config_dir" ] || config_flags=() # set in configure_flags
./configure --prefix="$prefix" "${config_flags[@]}" \
	"${configure_flags[@]}" >configure.log 2>&1 || { tail -n 30 configure.log >&2; exit 1; }
make -j"$(nproc)" >make.log 2>&1 || { tail -n 40 make.log >&2; exit 1; }
make install >install.log 2>&1 || { tail -n 40 install.log >&2; exit 1; }
# PHP installs libphp.so into lib/php; link it where -L$prefix/lib finds it.
[ -e "$prefix/lib/libphp.so" ] || [ -n "$config_dir" ] || ln -s php/libphp.so "$prefix/lib/libphp.so"
mkdir -p "$prefix/etc/conf.d"
cp php.ini-production "$prefix/etc/php.ini-production"
echo "zend_extension=opcache.so" >"$prefix/etc/conf.d/10-opcache.ini"
check_php "$prefix/bin/php-config"
touch "$prefix/.complete"
cd /
rm -rf "$build"
log "done"
echo "$prefix/bin/php-config"
