// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package core is the Go side of the Rust core's C ABI (rust-core/include/php_worker.h),
// as rust-core/src/abi/ and src/exports.rs are the Rust side: the only package of the
// module that imports "C". It owns the engine handle, the callbacks the core calls on its
// PHP threads, the completion queue, the ABI's codes and the wire layouts of requests and
// statistics. Everything above it speaks Go types.
package core

// The Rust core (rust-core/, built by `cargo build --release`: libphp_worker.a) and the
// ZTS libphp.a it embeds. The caller says where both live, and adds the libraries PHP's
// extensions need, through CGO_LDFLAGS, as scripts/env.sh does:
// -L<cargo target dir>/release -L$(php-config --prefix)/lib -Wl,--export-dynamic $(php-config --libs).

// PHP's calls that start programs go to rust-core/csrc/spawn.c (--wrap), which starts
// them with no signal blocked: a PHP thread blocks the signals Go's runtime takes.

// #cgo CFLAGS: -I${SRCDIR}/../../../rust-core/include
// #cgo LDFLAGS: -lphp_worker -lphp -lm -ldl -lpthread -lrt -lutil -lgcc_s
// #cgo LDFLAGS: -Wl,--wrap=posix_spawn -Wl,--wrap=posix_spawnp -Wl,--wrap=fork -Wl,--wrap=popen -Wl,--wrap=pclose
import "C"
