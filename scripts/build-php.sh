#!/usr/bin/env bash
# Builds a thread-safe (ZTS) PHP with the embed SAPI (libphp.a) and php_worker's extension
# set from Debian's source packages, once, into a cache outside the clone, and prints the
# path of its php-config. The same build serves ./caddy (linked with the system's shared
# libraries, xcaddy.sh) and the portable binary (with static ones,
# scripts/build-portable.sh).
#
#   scripts/build-php.sh                                   PHP 8.4 (the default)
#   PHP_VERSION=8.2 scripts/build-php.sh                   PHP 8.2, cached apart
#   PHP_CONFIG=/path/to/php-config scripts/build-php.sh   checks a build of your own instead
#   PHP_WORKER_CACHE=/somewhere scripts/build-php.sh       cache root (default ~/.cache/php_worker)
#   PHP_WORKER_PHP_ASAN=1 scripts/build-php.sh             AddressSanitizer build (scripts/asan.sh)
#   PHP_WORKER_PHP_PGO=1 scripts/build-php.sh              with profile-guided optimisation
#                                                          (cached apart; see below)
#   PHP_WORKER_PHP_MARCH=x86-64-v2 scripts/build-php.sh    for a higher CPU level (cached apart)
#   PHP_WORKER_PHP_OPT=1 scripts/build-php.sh              GCC's -O1 instead of -O2: a faster build
#                                                          of a slower PHP (cached apart), for tests
#   PHP_WORKER_TARGET=arm64 scripts/build-php.sh           PHP 8.4 for aarch64, cross-built (cached apart;
#                                                          see scripts/build-arm64.sh)
#   PHP_WORKER_REQUIRE_CURRENT_PHP=1 scripts/build-php.sh  fails, instead of warning, when PHP is
#                                                          not current (see below)
#
# Sources: PHP 8.2 is Debian 12's php8.2; PHP 8.4 is php8.4 from Debian 13 and sid, read
# through a private apt state (scripts/fetch-source.py: sources only, nothing installed).
# The PECL extensions come from Debian 13's and sid's source packages too (their upstream
# tarball is the whole source) and are built into PHP like the core ones, under ext/. The
# developer extensions (Xdebug, pcov, excimer) are built as shared objects beside PHP's
# OPcache, loaded only by a php_ini `zend_extension`/`extension` line. What went in, with
# versions, and what could not, with why, is in <prefix>/extensions.txt.
#
# PHP reads /etc/php_worker/php.ini and /etc/php_worker/conf.d/*.ini, whichever binary it
# is in; OPcache, a shared object, is loaded by the binary (go-module/bundle.go).
#
# The cache directory is named after the PHP minor version, the variant and a hash of the
# configure flags, the extension list, the patches and recipe_version, so changing any of
# them builds a new PHP next to the old one; the exact PHP version is in <prefix>/.version.
#
# Whether that PHP is current, the newest release of its branch that Debian lists, of a
# branch PHP still supports, is checked at every run, cached build or not
# (scripts/php-currency.py, against indexes read at most a day ago and the dates of
# go-module/php-eol.txt): a listed release the build does not have, or a branch past its
# end of life, makes a warning on stderr, and what was found is kept in <prefix>/.currency,
# which xcaddy.sh stamps into the binary. PHP_WORKER_REQUIRE_CURRENT_PHP=1 makes either a
# failure (before building, for a new build), for release pipelines.
# Progress goes to stderr; stdout carries only the php-config path.
set -euo pipefail

scripts=$(cd "$(dirname "$0")" && pwd)

log() { echo "build-php: $*" >&2; }

# The directory holding libphp (the embed SAPI), or nothing.
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
		log "$config has no libphp next to it: PHP was built without the embed SAPI"
		log "(configure --enable-embed)."
		return 1
	fi
	if ! "$config" --version | grep -Eq '^8\.([2-9]|[1-9][0-9])\.'; then
		log "$config is PHP $("$config" --version); php_worker needs PHP 8.2 or newer."
		return 1
	fi
}

if [ -n "${PHP_CONFIG:-}" ]; then
	check_php "$PHP_CONFIG" || exit 1
	# Both set and disagreeing is a mistake (a shell that sourced scripts/env.sh for one
	# version, then asked for the other): building on the wrong PHP would pass unnoticed.
	if [ -n "${PHP_VERSION:-}" ] && ! "$PHP_CONFIG" --version | grep -q "^$PHP_VERSION\."; then
		log "PHP_VERSION=$PHP_VERSION, but PHP_CONFIG=$PHP_CONFIG is PHP $("$PHP_CONFIG" --version): unset one of them."
		exit 2
	fi
	echo "$PHP_CONFIG"
	exit 0
fi

PHP_VERSION=${PHP_VERSION:-8.4}
case $PHP_VERSION in
8.4) php_fetch=(newer --probe 8 --max-upstream 8.4) ;; # Debian 13 and sid
8.2) php_fetch=(bookworm) ;;                            # Debian 12
*) log "PHP_VERSION must be 8.4 or 8.2, not $PHP_VERSION"; exit 2 ;;
esac
patch_dir=$scripts/php-patches/$PHP_VERSION

# A static embed SAPI: libtool compiles each file once (a shared one compiles every file
# twice, PIC for libphp.so and not for the CLI), and one build links both ways.
# libsodium carries its own copy of argon2, whose symbols clash with libargon2's once both
# are linked statically; without libargon2 (no --with-password-argon2), ext/sodium
# provides password_hash()'s argon2 algorithms, so scripts see the same
# PASSWORD_ARGON2I/ID.
config_dir=/etc/php_worker
configure_flags=(
	--enable-zts --enable-embed=static --disable-zend-signals --enable-zend-max-execution-timers
	--with-config-file-path="$config_dir" --with-config-file-scan-dir="$config_dir/conf.d"
	--enable-opcache --enable-cli --disable-cgi --disable-phpdbg
	--enable-ctype --enable-filter --enable-tokenizer --enable-session --enable-mbstring
	--with-iconv --enable-fileinfo
	--enable-pdo --with-pdo-sqlite --with-pdo-pgsql --with-pdo-mysql=mysqlnd
	--with-sqlite3 --with-mysqli=mysqlnd --with-pgsql
	--with-openssl --with-curl --with-zlib --with-bz2
	--enable-xml --enable-dom --enable-simplexml --enable-xmlreader --enable-xmlwriter
	--with-xsl --enable-soap
	--enable-bcmath --with-gmp --enable-calendar --enable-intl --with-gettext
	--with-sodium
	--enable-pcntl --enable-posix --enable-sockets --enable-ftp --enable-phar
	--enable-shmop --enable-sysvmsg --enable-sysvsem --enable-sysvshm --enable-dba
	--with-ldap --with-ldap-sasl --with-tidy --with-libedit
	--with-zip
	--enable-gd --with-jpeg --with-webp --with-freetype --enable-exif
	--with-mysql-sock=/run/mysqld/mysqld.sock
	--with-libdir=lib/x86_64-linux-gnu
)

# PECL extensions built into PHP: "<source package> <directory under ext/> <configure flags>",
# in build order (redis and memcached use igbinary's and msgpack's headers). The newest
# version of each that downloads is taken; --not-above=V keeps an older series.
pecl=(
	"php-igbinary igbinary --enable-igbinary"
	"php-msgpack msgpack --with-msgpack"
	"php-apcu apcu --enable-apcu"
	"php-redis redis --enable-redis --enable-redis-igbinary --enable-redis-msgpack --enable-redis-zstd --with-libzstd"
	"php-memcached memcached --enable-memcached --enable-memcached-igbinary --enable-memcached-msgpack --enable-memcached-json --enable-memcached-session --disable-memcached-sasl"
	"php-imagick imagick --with-imagick"
	"php-amqp amqp --with-amqp"
	"php-ssh2 ssh2 --with-ssh2"
	"php-yaml yaml --with-yaml"
	"php-zstd zstd --enable-zstd --with-libzstd"
	"php-ast ast --enable-ast"
)
# Developer extensions, built as shared objects: "<source package> <name> <zend|php>".
# Xdebug comes from Debian 12 (3.2, PHP 8.0-8.2): no newer version downloads here, so the
# 8.4 build goes without it and says so.
shared=(
	"php-xdebug xdebug zend"
	"php-pcov pcov php"
	"php-excimer excimer php"
)

# PHP_WORKER_PHP_ASAN=1 (set by scripts/asan.sh) adds PHP's own --enable-address-sanitizer
# (-fsanitize=address -fno-omit-frame-pointer -DZEND_TRACK_ARENA_ALLOC): the flag joins the
# hashed flags and "-asan" the directory name, so that build is cached next to the normal
# one. The build runs the PHP it just built (phar); leak reports at its exit would fail it,
# hence detect_leaks=0.
variant=
if [ -n "${PHP_WORKER_PHP_ASAN:-}" ]; then
	configure_flags+=(--enable-address-sanitizer)
	variant=-asan
	export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi

# PHP_WORKER_TARGET=arm64 builds PHP 8.4 for aarch64 on an x86-64 host
# (scripts/build-arm64.sh): Debian's aarch64 cross compilers, with the arm64 sysroot of
# scripts/arm64-sysroot.sh, whose pkg-config files place every library. The build runs
# the PHP it built (phar, the extension check below) under qemu-user. The developer
# extensions are not cross-built. Cached apart ("-arm64").
target=${PHP_WORKER_TARGET:-}
run_php=()      # runs the built PHP: nothing before it, or qemu for another architecture
tool_prefix=""  # binutils of the target (ld, ar)
not_built=()    # extensions.txt lines for what this target leaves out
case $target in
"") ;;
arm64)
	[ -z "$variant" ] || { log "PHP_WORKER_TARGET=arm64 does not combine with another variant ($variant)"; exit 2; }
	[ "$PHP_VERSION" = 8.4 ] || { log "PHP_WORKER_TARGET=arm64 builds PHP 8.4 only"; exit 2; }
	"$scripts/install-deps.sh" --arm64
	sysroot=$("$scripts/arm64-sysroot.sh")
	host=aarch64-linux-gnu
	variant=-arm64
	tool_prefix=$host-
	run_php=(qemu-aarch64-static -L "$sysroot")
	export CC="$host-gcc --sysroot=$sysroot" CXX="$host-g++ --sysroot=$sysroot"
	export PKG_CONFIG_LIBDIR="$sysroot/usr/lib/$host/pkgconfig:$sysroot/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR=$sysroot
	# amqp's configure learns librabbitmq's version by running a program; say it instead.
	ac_cv_librabbitmq_version=$(pkg-config --modversion librabbitmq)
	export ac_cv_librabbitmq_version
	# Options that look for their library in a folder rather than ask pkg-config.
	for i in "${!configure_flags[@]}"; do
		case ${configure_flags[$i]} in
		--with-bz2 | --with-gmp | --with-gettext | --with-ldap | --with-tidy) configure_flags[i]+="=$sysroot/usr" ;;
		--with-libdir=*) configure_flags[i]=--with-libdir=lib/$host ;;
		esac
	done
	configure_flags+=(--host="$host" --build=x86_64-pc-linux-gnu)
	for i in "${!pecl[@]}"; do
		case ${pecl[$i]} in
		php-memcached*) pecl[i]+=" --with-libmemcached-dir=$sysroot/usr" ;;
		php-amqp*) pecl[i]+=" --with-librabbitmq-dir=$sysroot/usr" ;;
		php-ssh2* | php-yaml*) pecl[i]+="=$sysroot/usr" ;;
		esac
	done
	# The developer extensions are named in extensions.txt as not built.
	for entry in "${shared[@]}"; do
		read -r pkg name _ <<<"$entry"
		not_built+=("$name missing $pkg - developer extensions are not cross-built for arm64")
	done
	shared=()
	;;
*) log "PHP_WORKER_TARGET must be arm64, or unset for this machine's architecture"; exit 2 ;;
esac

# Without debug information (PHP's default CFLAGS are "-g -O2"): it costs a third of the
# compile time; symbols stay, for a backtrace. PHP_WORKER_PHP_OPT=1 builds at -O1, which
# tests/run.sh uses for its PHP 8.2 stage: that build is on the test command's critical
# path on a fresh machine, and what it checks is behaviour, not speed.
opt=${PHP_WORKER_PHP_OPT:-2}
case $opt in 1 | 2) ;; *) log "PHP_WORKER_PHP_OPT must be 1 or 2"; exit 2 ;; esac
compile_flags="-O$opt"

# PHP_WORKER_PHP_MARCH=x86-64-v2 (or any GCC -march level) builds for that CPU level instead
# of GCC's default, plain x86-64. The flag is hashed, so each level is cached apart.
[ -z "${PHP_WORKER_PHP_MARCH:-}" ] || compile_flags="$compile_flags -march=$PHP_WORKER_PHP_MARCH"

# Profile-guided optimisation (GCC), with PHP_WORKER_PHP_PGO=1: PHP is built once
# instrumented, its CLI runs the small training set of scripts/php-pgo/train.php (the test
# Laravel app in worker and classic mode, hello world, data handling), and PHP is built
# again with what GCC learnt. Code the training never ran keeps its plain -O2
# (-fprofile-partial-training). Off by default: it doubles the compile time, and the
# bench measured no gain from it (docs/building.md, "How PHP is built", gives the numbers).
pgo=${PHP_WORKER_PHP_PGO:-0}
[ -z "$variant" ] || pgo=0
pgo_use_flags="-fprofile-use -fprofile-partial-training -fprofile-correction -Wno-missing-profile"

cache_root=${PHP_WORKER_CACHE:-$HOME/.cache/php_worker}
recipe_version=7
build_key=$(
	{
		printf '%s\n' "recipe=$recipe_version" "cflags=$compile_flags" "${configure_flags[@]}" "${pecl[@]}" "${shared[@]}"
		cat "$patch_dir"/*.patch
		[ "$pgo" = 0 ] || { echo "pgo=$pgo_use_flags"; cat "$scripts/php-pgo/train.php"; }
	} | sha256sum | cut -c1-8
)
prefix="$cache_root/php-$PHP_VERSION-zts$variant-$build_key"

# Says whether the PHP of the arguments (--prefix of a build, or --version and --source
# before building) is current; fails when it is not and PHP_WORKER_REQUIRE_CURRENT_PHP is set.
php_currency() {
	python3 "$scripts/php-currency.py" check --log-name build-php --package "php$PHP_VERSION" \
		--suites "${php_fetch[0]}" --branch "$PHP_VERSION" "$@"
}

if [ -f "$prefix/.complete" ]; then
	check_php "$prefix/bin/php-config" || exit 1
	php_currency --prefix "$prefix" || exit 1
	echo "$prefix/bin/php-config"
	exit 0
fi
if [ -n "${PHP_WORKER_CACHED_ONLY:-}" ]; then
	log "no cached PHP $PHP_VERSION build with these flags (PHP_WORKER_CACHED_ONLY is set: not building one)"
	exit 3
fi

# One build of a version at a time: a second run (another shell sourcing scripts/env.sh)
# waits for the first instead of deleting its build directory, then reuses what it built.
# Each version and variant (ASan) locks a file of its own, so that PHP 8.4 and 8.2 build
# side by side (tests/run.sh); scripts/fetch-source.py serialises what they fetch.
mkdir -p "$cache_root/src"
exec 9>"$cache_root/.lock-$PHP_VERSION$variant"
flock 9
if [ -f "$prefix/.complete" ]; then
	php_currency --prefix "$prefix" || exit 1
	echo "$prefix/bin/php-config"
	exit 0
fi

# The unpacked source of a Debian package from the given suites (bookworm: Debian 12;
# newer: Debian 13 and sid): the cached one, else the newest that downloads
# (scripts/fetch-source.py).
source_of() {
	local suites=$1 pkg=$2 existing
	shift 2
	mkdir -p "$cache_root/src/$suites"
	existing=$(find "$cache_root/src/$suites" -mindepth 2 -maxdepth 2 -name .debian-version -path "*/$pkg-[0-9]*" -printf '%h\n' | sort -V | tail -n 1)
	if [ -n "$existing" ]; then echo "$existing"; return; fi
	python3 "$scripts/fetch-source.py" --suites "$suites" "$@" "$pkg" "$cache_root/src/$suites"
}
# The directory of a PECL source holding its config.m4 (<src>/<name>-<version>/ in PECL's
# tarball layout; the newest of them when a package carries several, as Xdebug's does).
pecl_dir() {
	if [ -f "$1/config.m4" ]; then echo "$1"; return; fi
	find "$1" -mindepth 2 -maxdepth 2 -name config.m4 -path "$1/$2-*" -printf '%h\n' | sort -V | tail -n 1
}

srcdir=$(source_of "${php_fetch[0]}" "php$PHP_VERSION" "${php_fetch[@]:1}") || { log "no php$PHP_VERSION source could be fetched"; exit 1; }
pecl_dirs=()
for entry in "${pecl[@]}"; do
	read -r pkg name _ <<<"$entry"
	src=$(source_of newer "$pkg" --upstream-only) || { log "no $pkg source could be fetched"; exit 1; }
	pecl_dirs+=("$(pecl_dir "$src" "$name")")
done
shared_dirs=()
for entry in "${shared[@]}"; do
	read -r pkg name _ <<<"$entry"
	suites=newer
	[ "$name" != xdebug ] || [ "$PHP_VERSION" != 8.2 ] || suites=bookworm
	src=$(source_of "$suites" "$pkg" --upstream-only) && shared_dirs+=("$(pecl_dir "$src" "$name")") || shared_dirs+=("")
done

# The training run of a profile-guided build, by the instrumented CLI in build directory $1;
# what it ran goes to $build/pgo.txt (then <prefix>/pgo.txt). The Laravel parts need the
# framework, unpacked from Debian's package (scripts/fetch-php-app.py); without it the
# training goes on without them and says so.
pgo_train() {
	local php=("$1/sapi/cli/php" -n -d "zend_extension=$1/modules/opcache.so" -d opcache.enable_cli=1
		-d memory_limit=512M -d log_errors=0)
	local cache laravel_root
	cache=$(mktemp -d)
	train() {
		"${php[@]}" "$scripts/php-pgo/train.php" "$@" >/dev/null 2>>"$build/pgo-errors.log" ||
			{ log "the training run failed: train.php $*"; tail -n 20 "$build/pgo-errors.log" >&2; exit 1; }
	}
	echo "PHP $upstream, trained with scripts/php-pgo/train.php:" >"$build/pgo.txt"
	train hello 20000 && echo "  hello 20000" >>"$build/pgo.txt"
	train data 20000 && echo "  data 20000" >>"$build/pgo.txt"
	if laravel_root=$(python3 "$scripts/fetch-php-app.py" --suite sid php-laravel-framework 2>/dev/null); then
		export LARAVEL_PHP_ROOT=$laravel_root LARAVEL_CACHE_DIR=$cache
		train worker-laravel 400 && echo "  worker-laravel 400 (framework: $laravel_root)" >>"$build/pgo.txt"
		for _ in $(seq 20); do train classic-laravel; done && echo "  classic-laravel, 20 processes" >>"$build/pgo.txt"
		unset LARAVEL_PHP_ROOT LARAVEL_CACHE_DIR
	else
		echo "  no Laravel parts: Debian's php-laravel-framework did not download" >>"$build/pgo.txt"
	fi
	rm -rf "$cache"
	log "profile-guided: trained ($(tail -n +2 "$build/pgo.txt" | tr -s ' \n' ' '))"
}

upstream=$(cat "$srcdir/.debian-version"); upstream=${upstream%%-*}
# A release pipeline learns that PHP is behind now, not after the build (which says it).
case ${PHP_WORKER_REQUIRE_CURRENT_PHP:-0} in
0 | "") ;;
*) php_currency --version "$upstream" --source "$srcdir" || exit 1 ;;
esac
build="$cache_root/build-$PHP_VERSION$variant-$build_key"
log "building PHP $upstream (ZTS, embed${variant:+, $variant}) with ${#pecl[@]} PECL extensions into $prefix; this takes several minutes"

rm -rf "$build" "$prefix"
cp -a "$srcdir" "$build"
cd "$build"
# OPcache only runs under SAPIs it knows by name; add ours next to FrankenPHP's.
sed -i 's/^\(\t*\)"frankenphp",$/&\n\1"php_worker",/' ext/opcache/ZendAccelerator.c
grep -q '"php_worker",' ext/opcache/ZendAccelerator.c || { log "could not teach OPcache the php_worker SAPI name"; exit 1; }
# php_worker's patches for this minor (scripts/php-patches/<minor>/, each says why at its top).
for patch in "$patch_dir"/*.patch; do
	patch -p1 --quiet <"$patch" || { log "could not apply $PHP_VERSION/$(basename "$patch")"; exit 1; }
done
# Debian's packaging moves the default session.save_path to /var/lib/php/sessions, a
# directory only its php-common package creates; keep upstream's default (the temp dir).
sed -i 's|"session.save_path",\( *\)"/var/lib/php/sessions"|"session.save_path",\1""|' ext/session/session.c
grep -q '"session.save_path", *""' ext/session/session.c || { log "could not restore session.save_path's default"; exit 1; }
# The PECL extensions join the tree as if they were PHP's own.
pecl_flags=()
for i in "${!pecl[@]}"; do
	read -r _ name flags <<<"${pecl[$i]}"
	rm -rf "ext/$name"
	cp -a "${pecl_dirs[$i]}" "ext/$name"
	read -ra f <<<"$flags"
	pecl_flags+=("${f[@]}")
done
./buildconf --force >buildconf.log 2>&1 || { tail -n 30 buildconf.log >&2; exit 1; }
CFLAGS=$compile_flags CXXFLAGS=$compile_flags ./configure --prefix="$prefix" "${configure_flags[@]}" "${pecl_flags[@]}" >configure.log 2>&1 || { tail -n 30 configure.log >&2; exit 1; }
# libtool compiles every file twice, PIC and not, when a build makes shared objects at all
# (OPcache's). Only OPcache's objects (ZEND_COMPILE_DL_EXT) need PIC: everything else goes
# into libphp.a or the CLI, so it is compiled once, not PIC (libtool's -static).
sed -i '/ZEND_COMPILE_DL_EXT/!s/--mode=compile \$(\(CC\|CXX\)) /--mode=compile $(\1) -static /' Makefile
if [ "$pgo" = 1 ]; then
	log "profile-guided: the instrumented build first"
	make -j"$(nproc)" PROF_FLAGS=-fprofile-generate >make-generate.log 2>&1 || { tail -n 40 make-generate.log >&2; exit 1; }
	find . -name '*.gcda' -delete # the build itself ran PHP (phar)
	pgo_train "$build"
	make prof-clean >/dev/null 2>&1
	log "profile-guided: the optimised build"
	make -j"$(nproc)" PROF_FLAGS="$pgo_use_flags" >make.log 2>&1 || { tail -n 40 make.log >&2; exit 1; }
else
	# phar.phar is made by the PHP just built: under qemu for another architecture.
	make_args=()
	[ ${#run_php[@]} = 0 ] || make_args=(PHP_PHARCMD_EXECUTABLE="${run_php[*]} $build/sapi/cli/php -n")
	make -j"$(nproc)" "${make_args[@]}" >make.log 2>&1 || { tail -n 40 make.log >&2; exit 1; }
fi
make install >install.log 2>&1 || { tail -n 40 install.log >&2; exit 1; }
cp php.ini-production php.ini-development "$prefix/lib/php/"
# libphp.a as one member holding all of PHP: a binary that links any of it gets all of it.
# The shared objects PHP loads (OPcache, Xdebug, an extension of yours) may call any PHP
# function, not only those the binary itself uses (OPcache's JIT needs zend_gdb.c's).
"${tool_prefix}ld" -r --whole-archive "$prefix/lib/libphp.a" -o libphp-all.o
rm "$prefix/lib/libphp.a"
"${tool_prefix}ar" rcs "$prefix/lib/libphp.a" libphp-all.o
echo "$upstream" >"$prefix/.version"
[ "$pgo" = 0 ] || cp "$build/pgo.txt" "$prefix/pgo.txt"

# What went in: PHP's own and the PECL extensions (built in), then the shared ones.
{
	for i in "${!pecl[@]}"; do
		read -r pkg name _ <<<"${pecl[$i]}"
		echo "$name built-in $pkg $(cat "$(dirname "${pecl_dirs[$i]}")/.debian-version" 2>/dev/null || cat "${pecl_dirs[$i]}/.debian-version")"
	done
	for line in "${not_built[@]}"; do echo "$line"; done
} >"$prefix/extensions.txt"

# The developer extensions, with this PHP's phpize. Debian's phpize wants shtool, libtool
# and pkg-config's m4 files from the system (scripts/install-deps.sh installs them), but
# looks for the m4 files under PHP's prefix: point it at the system's.
sed -i 's|^aclocaldir=.*|aclocaldir="/usr/share/aclocal"|' "$prefix/bin/phpize"
ext_dir=$("$prefix/bin/php-config" --extension-dir)
for i in "${!shared[@]}"; do
	read -r pkg name kind <<<"${shared[$i]}"
	dir=${shared_dirs[$i]}
	if [ -z "$dir" ]; then
		echo "$name missing $pkg no version of its source downloads for PHP $PHP_VERSION" >>"$prefix/extensions.txt"
		log "$name: no source downloads; built without it"
		continue
	fi
	version=$(cat "$(dirname "$dir")/.debian-version" 2>/dev/null || cat "$dir/.debian-version")
	rm -rf "$build/shared-$name"
	cp -a "$dir" "$build/shared-$name"
	if (cd "$build/shared-$name" && "$prefix/bin/phpize" && ./configure --with-php-config="$prefix/bin/php-config" &&
		make -j"$(nproc)" && make install) >"$build/shared-$name.log" 2>&1; then
		echo "$name shared-$kind $pkg $version" >>"$prefix/extensions.txt"
	else
		reason=$(grep -m1 -iE 'error:|requires PHP|not supported' "$build/shared-$name.log" | cut -c1-120 || true)
		echo "$name missing $pkg $version does not build for PHP $PHP_VERSION: ${reason:-see its build log}" >>"$prefix/extensions.txt"
		log "$name $version does not build for PHP $PHP_VERSION; built without it (${reason:-no reason found})"
		rm -f "$ext_dir/$name.so"
	fi
done

check_php "$prefix/bin/php-config"
# Every PECL extension must have made it in: a configure check that quietly turned one off
# would otherwise ship a PHP without it.
loaded=$("${run_php[@]}" "$prefix/bin/php" -n -m)
for entry in "${pecl[@]}"; do
	read -r _ name _ <<<"$entry"
	grep -qix "$name" <<<"$loaded" || { log "PECL extension $name is not in the built PHP (see $build/configure.log)"; exit 1; }
done
touch "$prefix/.complete"
cd /
rm -rf "$build"
log "done: PHP $upstream"
php_currency --prefix "$prefix" --source "$srcdir" || exit 1
echo "$prefix/bin/php-config"
