// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// The Rust core (rust-core/, built by `cargo build --release`: libphp_worker.a) and the
// ZTS libphp.a it embeds. The caller says where both live, and adds the libraries PHP's
// extensions need, through CGO_LDFLAGS, as scripts/env.sh does:
// -L<cargo target dir>/release -L$(php-config --prefix)/lib -Wl,--export-dynamic $(php-config --libs).

// #cgo CFLAGS: -I${SRCDIR}/../rust-core/include
// #cgo LDFLAGS: -lphp_worker -lphp -lm -ldl -lpthread -lrt -lutil -lgcc_s
import "C"
