#!/usr/bin/env bash
# Builds ./caddy with php_worker inside: the Debian packages it needs, a ZTS PHP
# (cached, see scripts/build-php.sh), the Rust core, then Caddy through xcaddy.
#
#   ./xcaddy.sh                      build ./caddy on PHP 8.4
#   PHP_VERSION=8.2 ./xcaddy.sh      build ./caddy on PHP 8.2 (cached apart)
#   PHP_CONFIG=... ./xcaddy.sh       use your own ZTS PHP build (libphp.a) instead
#   CADDY_OUTPUT=dir/caddy CARGO_TARGET_DIR=dir ./xcaddy.sh
#                                    build elsewhere, leaving ./caddy and target/ alone
#                                    (tests/run.sh builds its PHP 8.2 binary this way)
#   PHP_WORKER_REQUIRE_CURRENT_PHP=1 ./xcaddy.sh
#                                    fail unless PHP is current: the newest release of its
#                                    branch Debian lists, of a supported branch (see below)
set -euo pipefail
cd "$(dirname "$0")"

CADDY_VERSION=v2.11.9
XCADDY_VERSION=v0.4.5
MODULE=github.com/php-worker/php_worker/go-module

output=${CADDY_OUTPUT:-./caddy}
target_dir=${CARGO_TARGET_DIR:-target}

scripts/install-deps.sh
# shellcheck source=scripts/env.sh
source scripts/env.sh

echo "xcaddy.sh: building rust-core"
cargo build --release --locked -p php-worker-core

if ! xcaddy version 2>/dev/null | grep -q "^$XCADDY_VERSION"; then
	echo "xcaddy.sh: installing xcaddy $XCADDY_VERSION"
	go install "github.com/caddyserver/xcaddy/cmd/xcaddy@$XCADDY_VERSION"
fi

# Go's build cache does not see a changed .a behind #cgo LDFLAGS: stamping the core's
# hash into the binary forces a relink whenever the core changes.
core_id=$(sha256sum "$target_dir/release/libphp_worker.a" | cut -c1-16)
echo "xcaddy.sh: building $output (Caddy $CADDY_VERSION, PHP $("$PHP_CONFIG" --version), core $core_id)"
# OPcache and the developer extensions stay in the PHP build's extension_dir.
ext_dir=$("$PHP_CONFIG" --extension-dir)
# Whether PHP is current, as scripts/build-php.sh found (<prefix>/.currency): the newer
# releases Debian lists and the day it looked are stamped into the binary, which reports
# them (`caddy version`, a warning at start, the status page, php_worker_php_info). With
# PHP_WORKER_REQUIRE_CURRENT_PHP=1, a PHP that is behind, past its end of life, or has no
# record (one of your own) stops the build here, cached or not.
currency=$(python3 scripts/php-currency.py ldflags --log-name xcaddy.sh --prefix "$PHP_PREFIX" --module "$MODULE")
# PHP_WORKER_GO_PGO=on: Go's profile-guided optimisation, from the bench's workloads
# (tests/bench/go-pgo.py). Off by default: the bench has not shown it pays yet.
pgo=off
[ "${PHP_WORKER_GO_PGO:-}" != on ] || pgo=$PWD/go-module/default.pgo
XCADDY_GO_BUILD_FLAGS="-ldflags='-X $MODULE.coreBuildID=$core_id -X $MODULE.phpExtensionDir=$ext_dir $currency' -tags=nobadger,nomysql,nopgx -pgo=$pgo" \
	xcaddy build "$CADDY_VERSION" --output "$output" --with "$MODULE@v$(cat VERSION)=./go-module"
# Not a pipe into grep -q: grep exits at its match, and with pipefail the SIGPIPE that
# caddy, still writing the modules listed after it, then gets would fail the build.
modules=$("$output" list-modules)
grep -qx 'http.handlers.php_worker' <<<"$modules"
# FrankenPHP's name for the same binary, which Laravel Octane looks for on PATH.
ln -sfn "$(basename "$output")" "$(dirname "$output")/frankenphp"
echo "xcaddy.sh: $output is ready (and frankenphp beside it, a link to it)"
