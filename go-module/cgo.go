// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// The Rust core (rust-core/, built by `cargo build --release` into target/) and the ZTS
// libphp it embeds. The caller adds where libphp lives through CGO_LDFLAGS, as
// xcaddy.sh does: -L$(php-config --prefix)/lib -Wl,-rpath,$(php-config --prefix)/lib.

// #cgo CFLAGS: -I${SRCDIR}/../rust-core/include
// #cgo LDFLAGS: ${SRCDIR}/../target/release/libphp_worker.a -lphp -lm -ldl -lpthread -lrt -lutil -lgcc_s
import "C"
