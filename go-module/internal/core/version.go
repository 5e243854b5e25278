// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

// #include "php_worker.h"
import "C"

// PHPVersion is the version of the linked PHP ("8.4.24").
func PHPVersion() string {
	return C.GoString(C.php_worker_php_version())
}

// PHPBuild says how the linked PHP was built ("ZTS, static embed SAPI, build …").
func PHPBuild() string {
	return C.GoString(C.php_worker_php_build())
}
