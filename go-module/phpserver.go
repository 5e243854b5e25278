// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"fmt"
	"log"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "php-server",
		Usage: "[--root <dir>] [--listen <addr>] [--domain <example.com>] [--worker <file>[:<num>]]... [--watch[=<glob>]]... [--no-compress] [--access-log] [--debug]",
		Short: "Serves a PHP site from a folder, with no config file",
		Long: `
Serves a folder as the php_worker site directive does, with no Caddyfile: existing
static files, *.php scripts with PATH_INFO, and the index file (index.php) as the
front controller for everything else, so a Laravel or Symfony public/ folder works as
it is. As caddy file-server does for static sites.

--root is the folder (default: the current one). --listen is the address (default :80,
or :443 with --domain, which serves HTTPS for that name). --worker runs a worker script
for the requests whose script is its file (worker index.php serves every dynamic
request), with <num> threads (<file>,<num> as FrankenPHP writes it works too); it may
repeat. --watch restarts the workers when a PHP file under the root changes (for
development), or a file the glob matches; it may repeat. Responses are compressed
(zstd, br, gzip) unless --no-compress. The flags are FrankenPHP's php-server's, so
frankenphp php-server works as its documentation says (but --mercure: php_worker has
no Mercure hub).`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("root", "r", "", "The folder to serve (default: the current one)")
			cmd.Flags().StringP("listen", "l", "", "The address to listen on (default :80, or :443 with --domain)")
			cmd.Flags().StringP("domain", "d", "", "A domain name to serve over HTTPS")
			cmd.Flags().StringArrayP("worker", "w", nil, "A worker script, <file>[:<num>], relative to the root; repeatable")
			cmd.Flags().StringArray("watch", nil, "Restart the workers when a file changes: a PHP file under the root, or the glob given; repeatable")
			cmd.Flags().Lookup("watch").NoOptDefVal = phpruntime.DefaultWatchGlob
			cmd.Flags().Bool("no-compress", false, "Do not compress responses")
			cmd.Flags().BoolP("access-log", "a", false, "Log every request")
			cmd.Flags().BoolP("debug", "v", false, "Log at debug level")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdPHPServer)
		},
	})
}

// parseWorkerFlag reads --worker's <file>[:<num>], or FrankenPHP's <file>,<num>.
func parseWorkerFlag(v string) (WorkerConfig, error) {
	w := WorkerConfig{FileName: v}
	if i := strings.LastIndexAny(v, ":,"); i > 0 {
		if n, err := strconv.Atoi(v[i+1:]); err == nil {
			if n < 1 {
				return w, fmt.Errorf("--worker %s: the thread count must be positive", v)
			}
			w.FileName, w.Num = v[:i], n
		}
	}
	if w.FileName == "" {
		return w, fmt.Errorf("--worker needs a file")
	}
	return w, nil
}

// phpServerConfig is the config php-server runs: one site, the php_worker handler.
func phpServerConfig(fs caddycmd.Flags) (*caddy.Config, string, error) {
	root, err := filepath.Abs(fs.String("root"))
	if err != nil {
		return nil, "", err
	}
	handler := Handler{Root: root}
	workers, err := fs.GetStringArray("worker")
	if err != nil {
		return nil, "", err
	}
	watch, err := fs.GetStringArray("watch")
	if err != nil {
		return nil, "", err
	}
	for _, v := range workers {
		w, err := parseWorkerFlag(v)
		if err != nil {
			return nil, "", err
		}
		w.Watch = watch
		handler.Workers = append(handler.Workers, w)
	}
	route := caddyhttp.Route{}
	if !fs.Bool("no-compress") {
		compress := encode.Encode{
			EncodingsRaw: caddy.ModuleMap{"zstd": json.RawMessage("{}"), "br": json.RawMessage("{}"), "gzip": json.RawMessage("{}")},
			Prefer:       []string{"zstd", "br", "gzip"},
		}
		route.HandlersRaw = append(route.HandlersRaw, caddyconfig.JSONModuleObject(compress, "handler", "encode", nil))
	}
	route.HandlersRaw = append(route.HandlersRaw, caddyconfig.JSONModuleObject(handler, "handler", "php_worker", nil))
	domain, listen := fs.String("domain"), fs.String("listen")
	if domain != "" {
		route.MatcherSetsRaw = []caddy.ModuleMap{{"host": caddyconfig.JSON(caddyhttp.MatchHost{domain}, nil)}}
	}
	if listen == "" {
		listen = ":80"
		if domain != "" {
			listen = ":443"
		}
	}
	server := &caddyhttp.Server{
		Listen:            []string{listen},
		ReadHeaderTimeout: caddy.Duration(10 * time.Second),
		IdleTimeout:       caddy.Duration(30 * time.Second),
		Routes:            caddyhttp.RouteList{route},
	}
	if fs.Bool("access-log") {
		server.Logs = &caddyhttp.ServerLogConfig{}
	}
	persist := false
	cfg := &caddy.Config{
		Admin: &caddy.AdminConfig{Disabled: true, Config: &caddy.ConfigSettings{Persist: &persist}},
		AppsRaw: caddy.ModuleMap{
			"http":       caddyconfig.JSON(caddyhttp.App{Servers: map[string]*caddyhttp.Server{"php": server}}, nil),
			"php_worker": caddyconfig.JSON(App{}, nil),
		},
	}
	if fs.Bool("debug") {
		cfg.Logging = &caddy.Logging{Logs: map[string]*caddy.CustomLog{
			"default": {BaseLog: caddy.BaseLog{Level: zap.DebugLevel.CapitalString()}},
		}}
	}
	return cfg, listen, nil
}

func cmdPHPServer(fs caddycmd.Flags) (int, error) {
	caddy.TrapSignals()
	cfg, listen, err := phpServerConfig(fs)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if err := caddy.Run(cfg); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	log.Printf("Caddy serving PHP on %s", listen)
	select {}
}
