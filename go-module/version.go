// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"fmt"
	"runtime/debug"

	"github.com/caddyserver/caddy/v2"
)

// modulePath is this module's import path, as Go's build info names it.
const modulePath = "github.com/php-worker/php_worker/go-module"

func init() {
	// `caddy version` and `caddy --version` print CustomVersion before Caddy's own
	// version; a packager's own CustomVersion (set at link time) is kept.
	if caddy.CustomVersion == "" {
		caddy.CustomVersion = versionLine() + "; caddy"
	}
}

// versionLine says which php_worker this is, which PHP it carries and how that PHP was
// built, for `caddy version`, `caddy php-cli -v` and the log at start.
func versionLine() string {
	return fmt.Sprintf("php_worker %s (core %s), PHP %s (%s)", moduleVersion(), coreBuildID, phpVersion(), phpBuild())
}

// moduleVersion is php_worker's version as Go's build info records it: the VERSION file,
// which xcaddy.sh and scripts/build-portable.sh give xcaddy as the module's version.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == modulePath {
				return m.Version
			}
		}
	}
	return "(devel)"
}

// phpVersion is the version of the linked PHP ("8.4.24").
func phpVersion() string {
	return C.GoString(C.php_worker_php_version())
}

// phpBuild says how the linked PHP was built ("ZTS, static embed SAPI, build …").
func phpBuild() string {
	return C.GoString(C.php_worker_php_build())
}
