#!/usr/bin/env bash
# Builds dist/php_worker/: a caddy that carries PHP and its extensions' libraries,
# linked statically, so that it runs on a machine that did not build it (it needs glibc
# 2.35+, as on Debian 12 and Ubuntu 22.04, and libgcc_s only), and PHP's shared objects
# beside it:
#
#   dist/php_worker/bin/caddy
#   dist/php_worker/bin/frankenphp                a link to caddy, FrankenPHP's name
#   dist/php_worker/bin/php                       a link to caddy: invoked as php, it is
#                                                 PHP's command line (PHP_BINARY names it)
#   dist/php_worker/lib/php_worker/opcache.so     PHP builds OPcache only as a shared
#                                                 object; the binary loads it from
#                                                 ../lib/php_worker/ (and exports PHP's
#                                                 symbols for it)
#   dist/php_worker/lib/php_worker/<name>.so      the developer extensions (Xdebug on
#                                                 PHP 8.2, pcov, excimer), loaded only by
#                                                 `php_ini zend_extension|extension <name>`
#
# It links the same PHP build (scripts/build-php.sh, PHP_VERSION picks it) and Rust core
# as ./xcaddy.sh, with static libraries instead of the system's shared ones: Debian's,
# and those Debian has no usable archive of (scripts/build-static-deps.sh, about 15
# minutes on 2 cores the first time, cached in ~/.cache/php_worker/). PHP reads
# /etc/php_worker/php.ini and /etc/php_worker/conf.d/*.ini. With --cached-only it exits
# with status 3 instead when PHP or those libraries are not cached yet.
#
# PHP_WORKER_TARGET=arm64 cross-builds the same for aarch64 into dist/php_worker-arm64/
# (scripts/cross-env.sh; scripts/build-arm64.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."

CADDY_VERSION=v2.11.9
MODULE=github.com/php-worker/php_worker/go-module

case ${1:-} in
--cached-only) export PHP_WORKER_CACHED_ONLY=1 ;; # exit 3 rather than build PHP or its libraries
"") ;;
*) echo "usage: scripts/build-portable.sh [--cached-only]" >&2; exit 2 ;;
esac

scripts/install-deps.sh --portable ${PHP_WORKER_TARGET:+--$PHP_WORKER_TARGET}
deps=$(scripts/build-static-deps.sh)
PHP_CONFIG=$(env -u PHP_CONFIG scripts/build-php.sh)
prefix=$("$PHP_CONFIG" --prefix)
export PHP_CONFIG PHP="$prefix/bin/php" CGO_ENABLED=1
export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"
# xcaddy runs here, whatever the target.
command -v xcaddy >/dev/null || GOOS= GOARCH= go install "github.com/caddyserver/xcaddy/cmd/xcaddy@$(sed -n 's/^XCADDY_VERSION=//p' xcaddy.sh)"
. scripts/cross-env.sh
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
core_dir=$target_dir/${cargo_target[1]:-}/release

# Every library PHP links, as its archive: ours first, then Debian's. glibc's stay
# dynamic (a static glibc breaks getaddrinfo and dlopen), as does libgcc_s.
arch_dir=$sysroot/usr/lib/$multiarch
archives=("$prefix/lib/libphp.a")
# What those archives need in turn: libpq's, curl's, ImageMagick's, libmemcached's,
# libssh2's and libedit's own libraries.
extra=(pgcommon_shlib pgport_shlib nghttp2 brotlidec brotlicommon bz2 lzma jpeg png16 webp webpmux webpdemux sharpyuv hashkit
	p9y gpg-error tinfo bsd md ssl crypto z)
missing=()
for flag in $("$PHP_CONFIG" --libs) "${extra[@]/#/-l}"; do
	lib=${flag#-l}
	case $lib in
	-*) continue ;;                                       # not a library (-pthread)
	c | m | dl | pthread | rt | resolv | util | stdc++) continue ;;
	gomp) # imagick calls omp_pause_resource_all() at shutdown (Debian's ImageMagick uses
		# OpenMP); our ImageMagick does not, so libgomp is linked but starts no thread
		a=$("${tool_prefix}gcc" -print-file-name=libgomp.a)
		case " ${archives[*]} " in *" $a "*) ;; *) archives+=("$a") ;; esac
		continue ;;
	tidy) lib=tidys ;;                                    # Debian's static libtidy
	termcap) lib=tinfo ;;                                 # ncurses's terminfo
	ldap_r) lib=ldap ;;                                   # ours, thread-safe since OpenLDAP 2.5
	sasl2) continue ;;                                    # ours are built without SASL
	esac
	a=
	for d in "$deps/lib" "$arch_dir"; do
		if [ -f "$d/lib$lib.a" ]; then a=$d/lib$lib.a; break; fi
	done
	if [ -z "$a" ]; then
		case " ${extra[*]} " in *" $lib "*) ;; *) missing+=("$lib") ;; esac # extras only where they exist
		continue
	fi
	case " ${archives[*]} " in *" $a "*) ;; *) archives+=("$a") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "build-portable: no static archive for: ${missing[*]}" >&2
	exit 1
fi

# glibc 2.36's arc4random, for the static libstdc++ (see the file): an archive after
# libstdc++'s, so that it is searched once libstdc++ asks for the function, and before
# the C library. (Go repeats CGO_LDFLAGS for each cgo package: an object would clash.)
compat_dir=target/portable$target_suffix
mkdir -p "$compat_dir"
"${tool_prefix}gcc" -O2 -fPIC -c scripts/portable/glibc-compat.c -o "$compat_dir/glibc-compat.o"
"${tool_prefix}ar" rcs "$compat_dir/libglibc-compat.a" "$compat_dir/glibc-compat.o"

echo "build-portable: building rust-core (the same as ./xcaddy.sh's)"
cargo build --release --locked -p php-worker-core "${cargo_target[@]}"
core_id=$(sha256sum "$core_dir/libphp_worker.a" | cut -c1-16)

echo "build-portable: linking caddy"
export CGO_LDFLAGS="-L$core_dir -L$prefix/lib -Wl,--export-dynamic -Wl,--start-group ${archives[*]} -Wl,--end-group -l:libstdc++.a $PWD/$compat_dir/libglibc-compat.a"
out=dist/php_worker$target_suffix
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/php_worker"
# Whether PHP is current, stamped in as for ./xcaddy.sh (PHP_WORKER_REQUIRE_CURRENT_PHP=1
# stops the build when it is not).
currency=$(python3 scripts/php-currency.py ldflags --log-name build-portable --prefix "$prefix" --module "$MODULE")
# Go's profile-guided optimisation with PHP_WORKER_GO_PGO=on, as for ./xcaddy.sh.
pgo=off
[ "${PHP_WORKER_GO_PGO:-}" != on ] || pgo=$PWD/go-module/default.pgo
XCADDY_GO_BUILD_FLAGS="-ldflags='-s -w -X $MODULE.coreBuildID=$core_id -X $MODULE.portable=1 $currency' -tags=nobadger,nomysql,nopgx -pgo=$pgo" \
	xcaddy build "$CADDY_VERSION" --output "$out/bin/caddy" --with "$MODULE@v$(cat VERSION)=./go-module"
cp "$("$PHP_CONFIG" --extension-dir)"/*.so "$out/lib/php_worker/" # OPcache and the developer extensions
# A cross build's libtool writes the sysroot's folders into OPcache's RUNPATH: a path of
# the build machine, which the binary's machine must not search.
[ -z "$sysroot" ] || chrpath -d "$out"/lib/php_worker/*.so >/dev/null
ln -s caddy "$out/bin/frankenphp" # FrankenPHP's name, which Laravel Octane looks for
ln -s caddy "$out/bin/php"        # PHP's command line, for Composer, artisan and PHP_BINARY

echo "build-portable: $out/bin/caddy links:"
"${tool_prefix}readelf" -d "$out/bin/caddy" | grep NEEDED
newest=$("${tool_prefix}objdump" -T "$out/bin/caddy" "$out"/lib/php_worker/*.so | grep -o 'GLIBC_2\.[0-9]*' | sort -Vu | tail -n1)
if [ "$(printf '%s\n' "$newest" GLIBC_2.35 | sort -V | tail -n1)" != GLIBC_2.35 ]; then
	echo "build-portable: the binary needs $newest, newer than Ubuntu 22.04's glibc 2.35" >&2
	exit 1
fi
"${run_target[@]}" "$out/bin/caddy" php-cli -r 'exit(function_exists("opcache_get_status") ? 0 : 1);' ||
	{ echo "build-portable: the binary does not load its OPcache" >&2; exit 1; }
echo "build-portable: $out is ready"
