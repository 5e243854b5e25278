# Sourced by scripts/build-portable.sh: the settings for the machine the binary runs on.
# Without PHP_WORKER_TARGET, this machine. With PHP_WORKER_TARGET=arm64, aarch64, cross-built
# on an x86-64 Debian 12 host: Debian's aarch64 cross compilers (scripts/install-deps.sh
# --arm64) against the arm64 sysroot (scripts/arm64-sysroot.sh), rustup's
# aarch64-unknown-linux-gnu target, Go's GOARCH=arm64 with cgo, and qemu-user to run
# what the build asks the new binaries (ext-php-rs's build script runs PHP).
#
# It sets:
#   target_arch    the Debian and Go name: amd64 or arm64
#   target_suffix  "" or "-arm64", for output folders beside this machine's
#   multiarch      the library folder's name (x86_64-linux-gnu, aarch64-linux-gnu)
#   sysroot        "" or the arm64 sysroot
#   tool_prefix    "" or "aarch64-linux-gnu-" (gcc, objdump, readelf, ar)
#   cargo_target   () or (--target aarch64-unknown-linux-gnu)
#   run_target     () or (qemu-aarch64-static -L <sysroot>): put before a target binary
# and exports what cargo, cc-rs, bindgen and cgo read for the target.
# Needs PHP_CONFIG set to the target's PHP first.

target_arch=amd64 target_suffix= sysroot= tool_prefix= cargo_target=() run_target=()
multiarch=$(gcc -print-multiarch)
case ${PHP_WORKER_TARGET:-} in
"") ;;
arm64)
	target_arch=arm64 target_suffix=-arm64 multiarch=aarch64-linux-gnu tool_prefix=aarch64-linux-gnu-
	sysroot=$("$(dirname "${BASH_SOURCE[0]}")/arm64-sysroot.sh")
	run_target=(qemu-aarch64-static -L "$sysroot")
	rust_target=aarch64-unknown-linux-gnu
	rustup target list --installed | grep -qx "$rust_target" || rustup target add "$rust_target" >&2
	cargo_target=(--target "$rust_target")
	# ext-php-rs's build script asks the PHP binary about itself: the arm64 one, under qemu.
	cross_bin=${CARGO_TARGET_DIR:-$PWD/target}/cross-arm64
	mkdir -p "$cross_bin"
	printf '#!/bin/sh\nexec qemu-aarch64-static -L "%s" "%s" "$@"\n' "$sysroot" "$("$PHP_CONFIG" --prefix)/bin/php" \
		>"$cross_bin/php"
	chmod +x "$cross_bin/php"
	export PHP="$cross_bin/php"
	export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc CFLAGS_aarch64_unknown_linux_gnu="--sysroot=$sysroot"
	export BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu="--target=aarch64-linux-gnu --sysroot=$sysroot"
	export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
	export GOOS=linux GOARCH=arm64
	export CC="aarch64-linux-gnu-gcc --sysroot=$sysroot" CXX="aarch64-linux-gnu-g++ --sysroot=$sysroot"
	;;
*)
	echo "PHP_WORKER_TARGET must be arm64, or unset for this machine's architecture" >&2
	exit 2
	;;
esac
