#!/usr/bin/env bash
# Builds dist/php-worker_<VERSION>_amd64.deb from the portable binary (built first with
# scripts/build-portable.sh when dist/php_worker/ is missing) with debhelper, and checks
# it with lintian: it fails on any lintian error.
#
#   /usr/bin/php_worker                    the binary (not "caddy": no clash with Caddy's package)
#   /usr/lib/php_worker/opcache.so         OPcache, which the binary loads from ../lib/php_worker/
#   /usr/lib/php_worker/<name>.so          the developer extensions, which `php_ini zend_extension|extension <name>` loads
#   /etc/php_worker/Caddyfile              what the service serves (a small PHP page at first)
#   /etc/php_worker/php.ini, conf.d/       PHP's settings, for the server and php-cli alike
#   /usr/share/php_worker/www/index.php    that page
#   php_worker.service                     runs as the php_worker user (home /var/lib/php_worker)
#
# The package's files other than the binary are in packaging/. With PHP_WORKER_TARGET=arm64
# it packages dist/php_worker-arm64/ as dist/php-worker_<VERSION>_arm64.deb (a cross
# build: dpkg-shlibdeps reads the arm64 C library's package, which --arm64 installs).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --deb ${PHP_WORKER_TARGET:+--$PHP_WORKER_TARGET}
arch=amd64 dist=dist/php_worker
case ${PHP_WORKER_TARGET:-} in
"") ;;
arm64) arch=arm64 dist=dist/php_worker-arm64 ;;
*) echo "build-deb: PHP_WORKER_TARGET must be arm64, or unset" >&2; exit 2 ;;
esac
[ -x "$dist/bin/caddy" ] || scripts/build-portable.sh

version=$(cat VERSION)
stage_root=$(mktemp -d)
trap 'rm -rf "$stage_root"' EXIT
stage=$stage_root/php-worker-$version
mkdir -p "$stage"
cp -a packaging/debian packaging/files "$stage/"
cp -a "$dist" "$stage/dist"
# The README's links lead into docs/: both go to /usr/share/doc/php-worker.
cp -a README.md docs "$stage/files/"
# PHP's recommended production settings, from the PHP build the binary carries.
prefix=$(env -u PHP_CONFIG scripts/build-php.sh | xargs dirname | xargs dirname)
cp "$prefix/lib/php/php.ini-production" "$stage/files/php.ini"
# The changelog's one entry is VERSION, dated by the commit it is built from.
cat >"$stage/debian/changelog" <<CHANGELOG
php-worker ($version) unstable; urgency=medium

  * php_worker $version, built from commit $(git rev-parse --short=12 HEAD).

 -- php_worker maintainers <maintainers@php-worker.org>  $(git log -1 --format=%aD)
CHANGELOG

(cd "$stage" && dpkg-buildpackage --build=binary --no-sign --host-arch "$arch") >"$stage_root/build.log" 2>&1 ||
	{ tail -n 40 "$stage_root/build.log" >&2; exit 1; }
deb=php-worker_${version}_$arch.deb
mv "$stage_root/$deb" dist/
echo "build-deb: dist/$deb"
dpkg-deb --info "dist/$deb" | sed -n '/Package:/,/Description:/p'
echo "build-deb: lintian"
lintian --fail-on error --info "dist/$deb"
echo "build-deb: lintian found no error"
