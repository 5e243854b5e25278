#!/usr/bin/env bash
# Installs the Debian packages php_worker needs to build PHP, its extensions, rust-core and
# Caddy. Only missing packages are installed, so a second run costs a few milliseconds.
# Source packages are not fetched through the system's apt: scripts/fetch-source.py keeps
# its own apt state (Debian 12, 13 and sid source indexes) in the cache.
#
#   scripts/install-deps.sh            build dependencies
#   scripts/install-deps.sh --tests    plus what the end-to-end tests use
#   scripts/install-deps.sh --bench    plus the benchmark peers (nginx, php-fpm, PostgreSQL)
#   scripts/install-deps.sh --portable plus what scripts/build-static-deps.sh uses (cmake)
#   scripts/install-deps.sh --deb      plus what scripts/build-deb.sh uses (debhelper, lintian)
#   scripts/install-deps.sh --install-test  plus debootstrap (tests/install/clean-root.sh)
#   scripts/install-deps.sh --image    plus umoci and skopeo (the image's test)
#   scripts/install-deps.sh --arm64    plus the aarch64 cross compilers and qemu (scripts/build-arm64.sh)
#   scripts/install-deps.sh --print-lib-pkgs   lists the library packages PHP links, installs nothing
set -euo pipefail

# The libraries PHP and its extensions link, as headers and libraries of the machine the
# binary runs on; scripts/arm64-sysroot.sh unpacks the same list for arm64.
lib_pkgs=(
	libxml2-dev libsqlite3-dev libonig-dev libssl-dev libcurl4-openssl-dev zlib1g-dev
	libicu-dev libsodium-dev libzip-dev libpq-dev libargon2-dev
	libpng-dev libjpeg62-turbo-dev libwebp-dev libfreetype-dev
	libgmp-dev libbz2-dev libldap-dev libsasl2-dev libxslt1-dev libtidy-dev libedit-dev
	libmagickwand-dev libmemcached-dev libssh2-1-dev libyaml-dev librabbitmq-dev libzstd-dev
)
build_pkgs=(
	build-essential autoconf bison re2c pkg-config dpkg-dev file patch
	libclang-dev clang
	"${lib_pkgs[@]}"
	shtool libtool python3 # phpize (the developer extensions); scripts/fetch-source.py
)
test_pkgs=(curl python3 php-laravel-framework redis-server memcached chromium) # chromium: tests/e2e/test_status.py
bench_pkgs=(nginx php8.2-fpm php8.2-pgsql php8.2-mysql php8.2-cli postgresql mariadb-server procps linux-perf)
portable_pkgs=(cmake flex automake libbz2-dev liblzma-dev libnghttp2-dev) # scripts/build-static-deps.sh
deb_pkgs=(debhelper lintian)                                # scripts/build-deb.sh
install_test_pkgs=(debootstrap)                             # tests/install/clean-root.sh
image_pkgs=(umoci skopeo libcap2-bin iproute2)               # tests/install/image.sh
# scripts/build-arm64.sh; the arm64 C library's package for dpkg-shlibdeps (build-deb.sh)
arm64_pkgs=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static libc6:arm64 libgcc-s1:arm64 chrpath)

want=("${build_pkgs[@]}")
for arg in "$@"; do
	case "$arg" in
	--tests) want+=("${test_pkgs[@]}") ;;
	--bench) want+=("${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
	--portable) want+=("${portable_pkgs[@]}") ;;
	--deb) want+=("${deb_pkgs[@]}") ;;
	--install-test) want+=("${install_test_pkgs[@]}") ;;
	--image) want+=("${image_pkgs[@]}") ;;
	--arm64) want+=("${arm64_pkgs[@]}") ;;
	--print-lib-pkgs) printf '%s\n' "${lib_pkgs[@]}"; exit 0 ;;
	*) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
	esac
done

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Packages for arm64 (libc6:arm64) need it among dpkg's architectures.
if [[ " ${want[*]} " == *:arm64* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
	as_root dpkg --add-architecture arm64
fi
missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}"
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
