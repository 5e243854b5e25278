#!/usr/bin/env bash
# Cross-builds php_worker for arm64 (aarch64) on an x86-64 Debian 12 host, then smoke-tests
# it under qemu-user: PHP 8.4 with its extensions (scripts/build-php.sh with
# PHP_WORKER_TARGET=arm64, on the sysroot of scripts/arm64-sysroot.sh), the Rust core
# (rustup's aarch64-unknown-linux-gnu target), and Caddy with cgo (GOARCH=arm64).
#
#   scripts/build-arm64.sh           target/arm64/caddy, then tests/install/arm64-smoke.sh
#   SMOKE=0 scripts/build-arm64.sh   the build only
#
# The binary links the sysroot's shared libraries, as ./caddy links the host's: run it on
# a Debian 12 arm64 machine with the same library packages (scripts/install-deps.sh's
# list), or under qemu-aarch64-static -L <sysroot>. Not part of tests/run.sh: a cold
# build takes about 35 minutes on 2 cores (docs/building.md, "arm64").
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "build-arm64: $*" >&2; }

CADDY_VERSION=$(sed -n 's/^CADDY_VERSION=//p' xcaddy.sh)
XCADDY_VERSION=$(sed -n 's/^XCADDY_VERSION=//p' xcaddy.sh)
MODULE=github.com/php-worker/php_worker/go-module
rust_target=aarch64-unknown-linux-gnu
host=aarch64-linux-gnu
out=$PWD/target/arm64

scripts/install-deps.sh --arm64
sysroot=$(scripts/arm64-sysroot.sh)
PHP_CONFIG=$(PHP_WORKER_TARGET=arm64 scripts/build-php.sh)
prefix=$("$PHP_CONFIG" --prefix)
mkdir -p "$out"

# ext-php-rs's build script asks the PHP binary about itself: the arm64 one, under qemu.
cat >"$out/php" <<EOF
#!/bin/sh
exec qemu-aarch64-static -L "$sysroot" "$prefix/bin/php" "\$@"
EOF
chmod +x "$out/php"

log "rust-core for $rust_target"
rustup target list --installed | grep -qx "$rust_target" || rustup target add "$rust_target"
export PHP_CONFIG PHP="$out/php"
export "CC_${rust_target//-/_}=$host-gcc" "CFLAGS_${rust_target//-/_}=--sysroot=$sysroot"
export "BINDGEN_EXTRA_CLANG_ARGS_${rust_target//-/_}=--target=$host --sysroot=$sysroot"
export "CARGO_TARGET_$(tr '[:lower:]-' '[:upper:]_' <<<"$rust_target")_LINKER=$host-gcc"
cargo build --release --locked -p php-worker-core --target "$rust_target"
core="$PWD/target/$rust_target/release"

log "caddy for arm64"
export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"
if ! xcaddy version 2>/dev/null | grep -q "^$XCADDY_VERSION"; then
	GOARCH= go install "github.com/caddyserver/xcaddy/cmd/xcaddy@$XCADDY_VERSION"
fi
core_id=$(sha256sum "$core/libphp_worker.a" | cut -c1-16)
ext_dir=$("$PHP_CONFIG" --extension-dir)
export CGO_ENABLED=1 GOOS=linux GOARCH=arm64
export CC="$host-gcc --sysroot=$sysroot" CXX="$host-g++ --sysroot=$sysroot"
export CGO_LDFLAGS="-L$core -L$prefix/lib -Wl,--export-dynamic $("$PHP_CONFIG" --libs)"
XCADDY_GO_BUILD_FLAGS="-ldflags='-X $MODULE.coreBuildID=$core_id -X $MODULE.phpExtensionDir=$ext_dir' -tags=nobadger,nomysql,nopgx" \
	xcaddy build "$CADDY_VERSION" --output "$out/caddy" --with "$MODULE@v$(cat VERSION)=./go-module"
file "$out/caddy" | grep -q 'ARM aarch64' || { log "$out/caddy is not an arm64 binary"; exit 1; }
log "$out/caddy is ready ($(du -h "$out/caddy" | cut -f1))"

if [ "${SMOKE:-1}" != 0 ]; then
	tests/install/arm64-smoke.sh "$out/caddy" "$sysroot"
fi
