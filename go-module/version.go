// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"fmt"
	"runtime/debug"

	"github.com/caddyserver/caddy/v2"
	"github.com/php-worker/php_worker/go-module/internal/core"
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

// versionLine says which php_worker this is, which PHP it carries, how that PHP was
// built and whether it is current (phpcurrency.go), for `caddy version`, `caddy php-cli
// -v` and the log at start.
func versionLine() string {
	return fmt.Sprintf("php_worker %s (core %s), PHP %s (%s) %s", moduleVersion(), coreBuildID, phpVersion(), phpBuild(),
		currentPHP().summary())
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

// coreBuildID names the Rust core linked in; xcaddy.sh stamps it at link time.
var coreBuildID = "dev"

// phpVersion is the version of the linked PHP ("8.4.24").
func phpVersion() string { return core.PHPVersion() }

// phpBuild says how the linked PHP was built.
func phpBuild() string { return core.PHPBuild() }
