#!/usr/bin/env bash
# The benchmark suite: php_worker against nginx + php-fpm and bare Caddy, on loopback.
# Installs its peers from Debian (nginx, php8.2-fpm, PostgreSQL, MariaDB) and oha from crates.io.
#
#   tests/bench/run.sh           full run (about 15 minutes on 2 cores): writes
#                                tests/bench/RESULTS.md and tests/bench/results.png
#   tests/bench/run.sh --quick   every workload briefly, checking every server's answers
#                                (its own few requests: no oha)
#   tests/bench/run.sh --go-pgo  writes go-module/default.pgo (tests/bench/go-pgo.py)
#   tests/bench/run.sh --tools-only   installs the peers and oha, and stops
#   tests/bench/run.sh --frankenphp PATH --only hello laravel
#                                FrankenPHP in the same rounds; PATH is its binary, or a folder
#                                with build-frankenphp.sh and frankenphp-<version>.tar.gz (built
#                                once against ./caddy's PHP, cached in ~/.cache/php_worker/peer/);
#                                FRANKENPHP_PHP_CONFIG names the php-config of the PHP a given
#                                binary was built on (its OPcache), if not ./caddy's
set -euo pipefail
cd "$(dirname "$0")/../.."

OHA_VERSION=1.16.0

scripts/install-deps.sh --bench
export PATH="$HOME/.cargo/bin:$PATH" # rustup's cargo, where cargo install puts oha
# The smoke pass sends its few requests itself (tests/bench/quickload.py): building oha
# takes about 7 minutes of CPU on a fresh machine.
if [[ " $* " != *" --quick "* ]] && ! oha --version 2>/dev/null | grep -q "$OHA_VERSION"; then
	echo "bench: installing oha $OHA_VERSION from crates.io (a few minutes, once)"
	cargo install oha --version "$OHA_VERSION" --locked --quiet
fi
[ "${1:-}" != --tools-only ] || exit 0
[ -x ./caddy ] && [ "${SKIP_BUILD:-}" = 1 ] || ./xcaddy.sh
# The classic workload's php_worker on PHP 8.2, php-fpm's version (as tests/run.sh builds
# it). The smoke pass (--quick) uses it when it is there, else ./caddy.
if [[ " $* " != *" --quick "* ]] && { [ ! -x target/php-8.2/caddy ] || [ "${SKIP_BUILD:-}" != 1 ]; }; then
	mkdir -p target/php-8.2
	env -u PHP_CONFIG -u PHP_PREFIX -u PHP -u CGO_LDFLAGS PHP_VERSION=8.2 CARGO_TARGET_DIR="$PWD/target/php-8.2" \
		CADDY_OUTPUT=target/php-8.2/caddy ./xcaddy.sh
fi
source scripts/env.sh
INFERNO_VERSION=0.12.3
if [[ " $* " != *" --quick "* ]]; then
	python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install --quiet matplotlib
	# The profile's flame graph (tests/bench/profile.svg).
	if ! cargo install --list 2>/dev/null | grep -q "^inferno v$INFERNO_VERSION:"; then
		echo "bench: installing inferno $INFERNO_VERSION from crates.io (a few minutes, once)"
		cargo install inferno --version "$INFERNO_VERSION" --locked --quiet
	fi
fi
# --go-pgo: the profile Go's PGO builds Caddy with (go-module/default.pgo).
[ "${1:-}" != --go-pgo ] || exec python3 tests/bench/go-pgo.py
exec python3 tests/bench/bench.py "$@"
