#!/usr/bin/env bash
# Builds ./caddy with php_worker inside: the Debian packages it needs, a ZTS PHP
# (cached, see scripts/build-php.sh), the Rust core, then Caddy through xcaddy.
#
#   ./xcaddy.sh                 build ./caddy
#   PHP_CONFIG=... ./xcaddy.sh  use your own ZTS PHP build instead of the cached one
set -euo pipefail
cd "$(dirname "$0")"

CADDY_VERSION=v2.11.9
XCADDY_VERSION=v0.4.5
MODULE=github.com/php-worker/php_worker/go-module

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
core_id=$(sha256sum target/release/libphp_worker.a | cut -c1-16)
echo "xcaddy.sh: building ./caddy (Caddy $CADDY_VERSION, core $core_id)"
XCADDY_GO_BUILD_FLAGS="-ldflags='-X $MODULE.coreBuildID=$core_id' -tags=nobadger,nomysql,nopgx" \
	xcaddy build "$CADDY_VERSION" --output ./caddy --with "$MODULE@v$(cat VERSION)=./go-module"
# Not a pipe into grep -q: grep exits at its match, and with pipefail the SIGPIPE that
# caddy, still writing the modules listed after it, then gets would fail the build.
modules=$(./caddy list-modules)
grep -qx 'http.handlers.php_worker' <<<"$modules"
# FrankenPHP's name for the same binary, which Laravel Octane looks for on PATH.
ln -sfn caddy ./frankenphp
echo "xcaddy.sh: ./caddy is ready (and ./frankenphp, a link to it)"
