// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package phpworker is the Caddy side of php_worker, a PHP application server: the
// php_worker app owns the process's PHP engine (a Rust core embedding a thread-safe
// PHP, linked through cgo), and the http.handlers.php_worker handler serves a PHP site
// the way FrankenPHP's php_server does.
package phpworker

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	// The `br` encoder, which FrankenPHP's and Octane's `encode zstd br gzip` needs:
	// building php_worker into Caddy registers it too.
	_ "github.com/php-worker/php_worker/go-module/encoders/brotli"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
	"github.com/php-worker/php_worker/go-module/internal/request"
)

// php is the PHP of this process. Only this file reads it: the core's callbacks get it
// in init, each App takes it at Provision and hands it down (its sites, the probe and
// status handlers, the metrics collector), and the admin routes, which Caddy provisions
// before any app, take it through processRuntime.
var php = phpruntime.New(moduleVersion(), coreBuildID)

// processRuntime is the process's PHP runtime, for a module that has no app to take it
// from.
func processRuntime() *phpruntime.Runtime { return php }

func init() {
	core.SetHost(request.Host{Runtime: php})
	caddy.RegisterModule(App{})
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterGlobalOption("php_worker", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("php_worker", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("php_worker", httpcaddyfile.Before, "file_server")
}
