// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"errors"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// FrankenPHP's names for php_worker's pieces, so that a FrankenPHP config, and Laravel
// Octane, which drives FrankenPHP through them, run unchanged:
//
//	{ frankenphp { ... } }     the php_worker global option, as the app apps.frankenphp
//	php_server [<matcher>]     the php_worker site directive
//	php [<matcher>]            the same without the file server and the front controller
//
// Their options are php_worker's, under FrankenPHP's names where those differ; a
// FrankenPHP option with no counterpart is refused with a message saying what to use.
func init() {
	caddy.RegisterModule(FrankenPHPApp{})
	httpcaddyfile.RegisterGlobalOption("frankenphp", parseFrankenPHPGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("php_server", parsePHPServer)
	httpcaddyfile.RegisterDirectiveOrder("php_server", httpcaddyfile.Before, "file_server")
	httpcaddyfile.RegisterHandlerDirective("php", parsePHP)
	httpcaddyfile.RegisterDirectiveOrder("php", httpcaddyfile.Before, "file_server")
}

// FrankenPHPApp is the php_worker app under FrankenPHP's app name, apps.frankenphp, so
// that `GET`/`PATCH /config/apps/frankenphp` (Octane's status and reload) reach it. Its
// JSON is the php_worker app's. A config holds one or the other, never both.
type FrankenPHPApp struct {
	App
}

// CaddyModule returns the Caddy module information.
func (FrankenPHPApp) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "frankenphp",
		New: func() caddy.Module { return new(FrankenPHPApp) },
	}
}

// Provision refuses a config that also has apps.php_worker: PHP runs once per process.
func (a *FrankenPHPApp) Provision(ctx caddy.Context) error {
	if _, err := ctx.AppIfConfigured("php_worker"); !errors.Is(err, caddy.ErrNotConfigured) {
		return fmt.Errorf("the config has both apps.php_worker and apps.frankenphp (the php_worker and frankenphp global options): they are one app under two names, keep one")
	}
	return a.App.Provision(ctx)
}

// configuredApp is the app the config names, as php_worker or as frankenphp; with
// neither, a php_worker app with its defaults.
func configuredApp(ctx caddy.Context) (*App, error) {
	fa, err := ctx.AppIfConfigured("frankenphp")
	switch {
	case err == nil:
		return &fa.(*FrankenPHPApp).App, nil
	case !errors.Is(err, caddy.ErrNotConfigured):
		return nil, err
	}
	a, err := ctx.App("php_worker")
	if err != nil {
		return nil, fmt.Errorf("loading the php_worker app: %w", err)
	}
	return a.(*App), nil
}

func parseFrankenPHPGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := &App{}
	if err := app.unmarshal(d, dialectFrankenPHP); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "frankenphp", Value: caddyconfig.JSON(app, nil)}, nil
}

func parsePHPServer(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	return handler, handler.unmarshal(h.Dispenser, dialectPHPServer)
}

func parsePHP(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := &Handler{Index: "off", DisableFileServer: true}
	return handler, handler.unmarshal(h.Dispenser, dialectPHP)
}

// dialect is the name a Caddyfile block was written under: php_worker's own, or one of
// FrankenPHP's.
type dialect string

const (
	dialectPHPWorker  dialect = "php_worker"
	dialectFrankenPHP dialect = "frankenphp" // the global option
	dialectPHPServer  dialect = "php_server"
	dialectPHP        dialect = "php"
)

func (dl dialect) frankenPHP() bool { return dl != dialectPHPWorker }

// unsupportedFrankenPHPOption is the error for a FrankenPHP option php_worker has no
// counterpart for, or nil when name is not one.
func unsupportedFrankenPHPOption(d *caddyfile.Dispenser, dl dialect, name string) error {
	var why string
	switch {
	case (dl == dialectPHPServer || dl == dialectPHP) && name == "hot_reload":
		why = "php_worker has no Mercure hub; `worker { watch }` restarts workers when files change"
	default:
		return nil
	}
	return d.Errf("%s %s: this FrankenPHP option has no php_worker counterpart: %s", dl, name, why)
}

// checkTryFiles takes php_server's try_files when it says what the handler's own
// resolution does: the path as a file (left out with file_server off), the index of
// the directory it names, then the index as the front controller. Octane's
// `try_files {path} frankenphp-worker.php` (with `index frankenphp-worker.php`) is one
// such list; the handler cannot try other files, so other lists are refused.
func (h *Handler) checkTryFiles(list []string) error {
	index := h.Index
	if index == "" {
		index = defaultIndex
	}
	refuse := func() error {
		return fmt.Errorf("try_files %s: php_worker tries the path, the directory's %s, then %s (set by index), "+
			"and takes try_files only in that form: {path} [{path}/%s] %s", strings.Join(list, " "), index, index, index, index)
	}
	if index == "off" {
		return fmt.Errorf("try_files needs an index file to fall back to, and index is off")
	}
	// The Caddyfile has already expanded the {path} shorthand.
	items := make([]string, len(list))
	for i, item := range list {
		items[i] = strings.ReplaceAll(item, "{http.request.uri.path}", "{path}")
	}
	list = items
	if items[0] == "{path}" {
		items = items[1:]
	} else if !h.DisableFileServer {
		return refuse()
	}
	if len(items) == 2 && items[0] == "{path}/"+index {
		items = items[1:]
	}
	if len(items) != 1 || strings.TrimPrefix(items[0], "/") != index {
		return refuse()
	}
	return nil
}

// Interface guards
var (
	_ caddy.App          = (*FrankenPHPApp)(nil)
	_ caddy.Provisioner  = (*FrankenPHPApp)(nil)
	_ caddy.Validator    = (*FrankenPHPApp)(nil)
	_ caddy.CleanerUpper = (*FrankenPHPApp)(nil)
)
