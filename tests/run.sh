#!/usr/bin/env bash
# Builds everything and runs every test: rust-core's unit tests (property tests
# included) and header check, the Go module's unit tests and fuzz targets, the
# end-to-end suite against the built ./caddy, and a quick pass of the benchmark suite
# as a smoke check.
#
# Last, when the portable build's caches are there (PHP_WORKER_INSTALL_TEST=1 builds them
# first, about 25 minutes; =0 skips it), the install test: the portable binary and the
# .deb in a clean Debian root (tests/install/clean-root.sh).
#
#   tests/run.sh                 everything
#   tests/run.sh -k session      pytest arguments select end-to-end tests
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --tests
./xcaddy.sh
source scripts/env.sh

echo "== rust-core: unit tests and header check"
cargo test --locked -p php-worker-core

echo "== rust-core: clippy, warnings denied (every unsafe block documented)"
if cargo clippy --version >/dev/null 2>&1; then
	cargo clippy --locked -p php-worker-core --all-targets -- -D warnings
else
	echo "skipped: this Rust toolchain has no clippy (rustup component add clippy)"
fi

echo "== go-module: formatting, vet, and unit tests under the race detector"
unformatted=$(cd go-module && gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt would change: $unformatted"; exit 1; }
(cd go-module && go vet ./... && go test -race -count=1 ./...)

echo "== go-module: fuzz targets, 10 s each from their corpora (tests/fuzz.sh)"
FUZZ_TIME=${FUZZ_TIME:-10s} tests/fuzz.sh

echo "== end to end"
python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install --quiet pytest
# The HTTP/3 tests' client (Debian's curl has no HTTP/3).
python3 -c 'import aioquic' 2>/dev/null || python3 -m pip install --quiet aioquic==1.7.2
python3 -m pytest -q tests/e2e "$@"

echo "== benchmark smoke check (every workload briefly, every server must answer correctly)"
SKIP_BUILD=1 tests/bench/run.sh --quick

echo "== install test: the portable binary and the .deb in a clean Debian 12 root"
install_test=${PHP_WORKER_INSTALL_TEST:-auto}
if [ "$install_test" = auto ] && [ $# -gt 0 ]; then install_test=0; fi # a selection of tests
if [ "$install_test" = auto ] && [ "$(id -u)" != 0 ]; then install_test=0; fi # chroot needs root
case $install_test in
0) echo "skipped (PHP_WORKER_INSTALL_TEST=0, pytest arguments, or not root)" ;;
1 | auto)
	status=0
	if [ "$install_test" = 1 ]; then
		scripts/build-portable.sh || status=$?
	else
		scripts/build-portable.sh --cached-only || status=$?
	fi
	case $status in
	0) scripts/build-deb.sh && tests/install/clean-root.sh ;;
	3) echo "skipped: the static PHP and its libraries are not cached yet (PHP_WORKER_INSTALL_TEST=1 builds them)" ;;
	*) exit "$status" ;;
	esac
	;;
*) echo "PHP_WORKER_INSTALL_TEST must be 0, 1 or auto" >&2; exit 2 ;;
esac
