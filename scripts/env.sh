# Sourced by the build and test scripts: finds (or builds) the ZTS PHP and exports what
# cargo, cgo and xcaddy need to use it.
PHP_CONFIG=$(scripts/build-php.sh)
PHP_PREFIX=$("$PHP_CONFIG" --prefix)
export PHP_CONFIG PHP_PREFIX
export PHP="$PHP_PREFIX/bin/php"                # ext-php-rs finds PHP through this
export LD_LIBRARY_PATH="$PHP_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" # cargo test
export CGO_ENABLED=1                               # xcaddy builds without cgo otherwise
export CGO_LDFLAGS="-L$PHP_PREFIX/lib -Wl,-rpath,$PHP_PREFIX/lib${CGO_LDFLAGS:+ $CGO_LDFLAGS}"
export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"
