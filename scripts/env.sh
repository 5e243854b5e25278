# Sourced by the build and test scripts: finds (or builds) the ZTS PHP (PHP_VERSION picks
# 8.4, the default, or 8.2) and exports what cargo, cgo and xcaddy need to use it and the
# Rust core (built into CARGO_TARGET_DIR, default target/).
PHP_CONFIG=$(scripts/build-php.sh)
PHP_PREFIX=$("$PHP_CONFIG" --prefix)
export PHP_CONFIG PHP_PREFIX
export PHP="$PHP_PREFIX/bin/php" # ext-php-rs finds PHP through this
export CGO_ENABLED=1             # xcaddy builds without cgo otherwise
# The core and libphp.a, then the system's shared libraries PHP's extensions need; PHP's
# symbols exported, for the shared objects it loads (OPcache, Xdebug).
export CGO_LDFLAGS="-L${CARGO_TARGET_DIR:-$PWD/target}/release -L$PHP_PREFIX/lib -Wl,--export-dynamic $("$PHP_CONFIG" --libs)${CGO_LDFLAGS:+ $CGO_LDFLAGS}"
export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"
