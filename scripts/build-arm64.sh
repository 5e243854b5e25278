#!/usr/bin/env bash
# Cross-builds php_worker for arm64 (aarch64) on an x86-64 Debian 12 host: what
# scripts/build-portable.sh, scripts/build-deb.sh and packaging/image/build-image.py make
# for this machine, made for arm64 (PHP_WORKER_TARGET=arm64, scripts/cross-env.sh), then
# tested under qemu-user:
#
#   dist/php_worker-arm64/           the portable binary (glibc 2.35+ and libgcc_s only)
#   dist/php-worker_<VERSION>_arm64.deb
#   dist/image-arm64/ (and .tar)     the OCI image, tested by tests/install/image.sh
#   dist/image/ (and .tar)           one multi-arch image of amd64 and arm64, when
#                                    dist/image-amd64/ is there (tests/install/image.sh
#                                    or packaging/image/build-image.py make it)
#
#   scripts/build-arm64.sh           all of it, with tests/install/arm64-smoke.sh and
#                                    tests/install/image.sh (needs root)
#   SMOKE=0 scripts/build-arm64.sh   the portable binary and the .deb only
#
# Not part of tests/run.sh: a cold build takes about 50 minutes on 2 cores
# (docs/building.md, "arm64").
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "build-arm64: $*" >&2; }
export PHP_WORKER_TARGET=arm64

scripts/build-portable.sh
scripts/build-deb.sh
[ "${SMOKE:-1}" != 0 ] || exit 0

tests/install/arm64-smoke.sh dist/php_worker-arm64/bin/caddy "$(scripts/arm64-sysroot.sh)"
tests/install/image.sh
if [ -f dist/image-amd64/index.json ]; then
	packaging/image/build-image.py --index dist/image-amd64 dist/image-arm64
	for a in amd64 arm64; do
		got=$(skopeo inspect --override-arch "$a" --format '{{.Architecture}}' oci:dist/image:latest)
		[ "$got" = "$a" ] || { log "the multi-arch image gives $got for $a"; exit 1; }
	done
	log "dist/image: one image for amd64 and arm64"
else
	log "no dist/image-amd64 (tests/install/image.sh makes it): no multi-arch image"
fi
