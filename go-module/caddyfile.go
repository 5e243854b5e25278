// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
	"github.com/php-worker/php_worker/go-module/internal/request"
)

// UnmarshalCaddyfile sets up the app from the global option block:
//
//	{
//		php_worker {
//			num_threads <n>
//			max_threads <n>|auto
//			processes <n>
//			cpu_affinity auto|off
//			max_idle_time <duration>
//			max_wait_time <duration>
//			shutdown_timeout <duration>
//			timeout_grace <duration>|off
//			max_stuck_threads <n>
//			max_requests <n>
//			shared_store_size <size>
//			local_store_size <size>
//			response_buffer <size>|off
//			response_buffer_total <size>
//			request_buffer <size>|off
//			request_buffer_total <size>
//			php_ini <key> <value>
//			php_ini {
//				<key> <value>
//				...
//			}
//			debug_triggers auto|off|<name>...
//			debug_trigger_value <secret>
//			worker <file> [<num>]
//			worker {
//				file <path>
//				num <n>
//				max_threads <n>
//				max_requests <n>
//				max_memory <size>
//				name <name>
//				env <key> <value>
//				max_boot_backoff <duration>
//				watch [<glob>...]
//			}
//			background <file> [<num>]
//			background {
//				file <path>
//				name <name>
//				num <n>
//				env <key> <value>
//				max_boot_backoff <duration>
//				watch [<glob>...]
//			}
//			task_worker <file> [<num>]
//			task_worker {
//				(the settings of worker, but match)
//			}
//			schedule <cron expression> <script> [<args>...]
//			schedule <cron expression> <script> [<args>...] {
//				name <name>
//				env <key> <value>
//				lease <redis URL>
//			}
//		}
//	}
//
// num_threads is the number of PHP threads, workers included; it must exceed the worker
// threads (default 2 × CPUs, or the worker threads + 1 if more); max_threads (at least
// num_threads, or auto) lets autoscaling add threads while requests wait, and
// max_idle_time (default 5s) is how long an added thread may stay idle; max_wait_time
// bounds how long a request waits for a free thread before a 503 (default: no bound);
// shutdown_timeout bounds how long running scripts may take to finish on shutdown
// (default 30s); timeout_grace (default 5s) is how long a request may run past its PHP
// time limit before it is answered 504 and its thread replaced, and max_stuck_threads
// (default 16) how many stuck threads get a replacement (see App.TimeoutGrace);
// response_buffer (default 1MiB) and response_buffer_total (default
// 64MiB) bound the memory responses wait in while clients are slower than PHP, before
// they wait in temporary files, and response_buffer off makes PHP threads write to
// clients themselves (see App.UnbufferedResponses); request_buffer (default 1MiB)
// and request_buffer_total (default 64MiB) bound the memory request bodies are read
// into before PHP runs, before they go to temporary files, and request_buffer off lets
// PHP read large bodies from the client itself (see App.UnbufferedRequests); php_ini overrides php.ini settings and may repeat;
// debug_triggers names the cookies, query parameters, headers or form fields that make
// a worker request run in a request of its own for a debugger or profiler (auto: those
// of the debuggers php_ini loads; off, the default: none; see App.DebugTriggers), and
// debug_trigger_value the secret value a trigger must carry to count;
// worker starts a worker script for every site (see WorkerConfig); background runs a
// script with a loop of its own (see App.Background), task_worker a script that runs
// tasks for other PHP threads (see App.TaskWorkers), schedule a script at the times of
// a cron expression, quoted when it has spaces (see ScheduleConfig).
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return a.unmarshal(d, dialectPHPWorker)
}

// unmarshal reads the global option block written as dl: php_worker's, or FrankenPHP's
// frankenphp block, which takes the same options (see frankenphp.go).
func (a *App) unmarshal(d *caddyfile.Dispenser, dl dialect) error {
	for d.Next() {
		if d.NextArg() {
			return d.ArgErr()
		}
		for d.NextBlock(0) {
			switch name := d.Val(); name {
			case "num_threads":
				n, err := intArg(d, 1)
				if err != nil {
					return err
				}
				a.NumThreads = n
			case "max_requests":
				n, err := intArg(d, 0)
				if err != nil {
					return err
				}
				a.MaxRequests = n
			case "processes":
				n, err := intArg(d, 1)
				if err != nil {
					return err
				}
				a.Processes = n
			case "cpu_affinity":
				if !d.AllArgs(&a.CPUAffinity) {
					return d.ArgErr()
				}
			case "max_threads":
				var v string
				if !d.AllArgs(&v) {
					return d.ArgErr()
				}
				limit, err := parseThreadLimit(v)
				if err != nil {
					return d.Err(err.Error())
				}
				a.MaxThreads = limit
			case "max_idle_time":
				dur, err := durationArg(d, true)
				if err != nil {
					return err
				}
				a.MaxIdleTime = dur
			case "shared_store_size", "local_store_size", "response_buffer", "response_buffer_total",
				"request_buffer", "request_buffer_total":
				var v string
				if !d.AllArgs(&v) {
					return d.ArgErr()
				}
				if name == "response_buffer" && v == "off" {
					a.UnbufferedResponses = true
					continue
				}
				if name == "request_buffer" && v == "off" {
					a.UnbufferedRequests = true
					continue
				}
				n, err := parseSize(d, name, v)
				if err != nil {
					return err
				}
				switch name {
				case "shared_store_size":
					a.SharedStoreSize = n
				case "local_store_size":
					a.LocalStoreSize = n
				case "response_buffer":
					a.ResponseBuffer = n
				case "response_buffer_total":
					a.ResponseBufferTotal = n
				case "request_buffer":
					a.RequestBuffer = n
				default:
					a.RequestBufferTotal = n
				}
			case "max_wait_time":
				dur, err := durationArg(d, false)
				if err != nil {
					return err
				}
				a.MaxWaitTime = dur
			case "shutdown_timeout":
				dur, err := durationArg(d, false)
				if err != nil {
					return err
				}
				a.ShutdownTimeout = dur
			case "timeout_grace":
				if !d.NextArg() {
					return d.ArgErr()
				}
				if d.Val() == "off" {
					a.TimeoutGrace = -1
					break
				}
				d.Prev()
				dur, err := durationArg(d, true)
				if err != nil {
					return err
				}
				a.TimeoutGrace = dur
			case "max_stuck_threads":
				n, err := intArg(d, 1)
				if err != nil {
					return err
				}
				a.MaxStuckThreads = n
			case "worker":
				w, err := parseWorker(d, false, dl)
				if err != nil {
					return err
				}
				if _, err := workerFile(w.FileName, ""); err != nil {
					return d.Err(err.Error())
				}
				a.Workers = append(a.Workers, w)
			case "background", "task_worker":
				w, err := parseWorker(d, false, dl)
				if err != nil {
					return err
				}
				if _, err := workerFile(w.FileName, ""); err != nil {
					return d.Err(err.Error())
				}
				if name == "background" {
					a.Background = append(a.Background, w)
				} else {
					a.TaskWorkers = append(a.TaskWorkers, w)
				}
			case "schedule":
				sc, err := parseSchedule(d)
				if err != nil {
					return err
				}
				a.Schedules = append(a.Schedules, sc)
			case "debug_triggers":
				a.DebugTriggers = d.RemainingArgs()
				if len(a.DebugTriggers) == 0 {
					return d.ArgErr()
				}
			case "debug_trigger_value":
				if !d.AllArgs(&a.DebugTriggerValue) || a.DebugTriggerValue == "" {
					return d.ArgErr()
				}
			case "php_ini":
				if a.PHPIni == nil {
					a.PHPIni = PHPIni{}
				}
				if err := parseINI(d, a.PHPIni); err != nil {
					return err
				}
			default:
				if err := unsupportedFrankenPHPOption(d, dl, name); err != nil {
					return err
				}
				return d.Errf("unknown %s option %q (known: num_threads, max_threads, max_idle_time, max_wait_time, shutdown_timeout, timeout_grace, max_stuck_threads, shared_store_size, local_store_size, response_buffer, response_buffer_total, request_buffer, request_buffer_total, php_ini, debug_triggers, debug_trigger_value, worker, background, task_worker, schedule)", dl, name)
			}
		}
	}
	return nil
}

// parseEnv reads an `env <key> <value>` line into *into, which it makes if needed.
func parseEnv(d *caddyfile.Dispenser, into *map[string]string) error {
	var key, value string
	if !d.AllArgs(&key, &value) {
		return d.Errf("env takes a key and a value")
	}
	if *into == nil {
		*into = map[string]string{}
	}
	(*into)[key] = value
	return nil
}

// parseINI reads `php_ini <key> <value>` or a `php_ini { <key> <value> ... }` block. A
// repeated extension or zend_extension adds a line, as in php.ini.
func parseINI(d *caddyfile.Dispenser, into PHPIni) error {
	args := d.RemainingArgs()
	switch len(args) {
	case 2:
		into.Set(args[0], args[1])
		return nil
	case 0:
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			key := d.Val()
			var value string
			if !d.AllArgs(&value) {
				return d.Errf("php_ini %s: expected exactly one value", key)
			}
			into.Set(key, value)
		}
		return nil
	default:
		return d.ArgErr()
	}
}

func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := &App{}
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "php_worker", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the handler from the site directive:
//
//	php_worker [<matcher>] {
//		root <dir>
//		index <file>|off
//		split <ext...>
//		file_server off
//		env <key> <value>
//		request_body_timeout <duration>|off
//		name <name>
//		worker <file> [<num>]
//		worker {
//			file <path>
//			num <n>
//			max_requests <n>
//			max_memory <size>
//			name <name>
//			env <key> <value>
//			match <path...>
//			max_boot_backoff <duration>
//			max_threads <n>
//			watch [<glob>...]
//		}
//	}
//
// root defaults to the site root; index (default index.php) is the directory index and
// front controller, "off" disables both; split (default .php) sets where SCRIPT_NAME
// ends and PATH_INFO starts; file_server off sends every non-script request to the
// index instead of serving files; env adds $_SERVER and getenv() values and may
// repeat; name names the site in its log lines and its workers' names (see
// Handler.Name); worker runs a worker script for the requests whose script is its
// file, or whose path matches one of its match patterns (see WorkerConfig).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return h.unmarshal(d, dialectPHPWorker)
}

// unmarshal reads the site directive written as dl: php_worker's, or FrankenPHP's
// php_server or php, which take the same options under FrankenPHP's names (split_path
// for split; try_files in the one form the handler's resolution has); php has no index,
// file server or try_files.
func (h *Handler) unmarshal(d *caddyfile.Dispenser, dl dialect) error {
	var tryFiles []string
	for d.Next() {
		if d.NextArg() {
			return d.ArgErr()
		}
		for d.NextBlock(0) {
			name := d.Val()
			if dl.frankenPHP() && name == "split_path" {
				name = "split"
			}
			if dl == dialectPHP && (name == "index" || name == "file_server" || name == "try_files") {
				return d.Errf("php has no %s: it runs the scripts requests name; php_server serves files and the front controller", name)
			}
			switch name {
			case "root":
				if !d.AllArgs(&h.Root) {
					return d.ArgErr()
				}
			case "index":
				if !d.AllArgs(&h.Index) {
					return d.ArgErr()
				}
			case "split":
				h.SplitPath = d.RemainingArgs()
				if len(h.SplitPath) == 0 {
					return d.ArgErr()
				}
				if _, ok := request.NormalizeSplit(h.SplitPath); !ok {
					return d.Errf("split extensions must be ASCII: %q", h.SplitPath)
				}
			case "file_server":
				var v string
				if !d.AllArgs(&v) || v != "off" {
					return d.Errf("file_server takes one argument, off")
				}
				h.DisableFileServer = true
			case "try_files":
				if dl != dialectPHPServer {
					return d.Errf("try_files is php_server's; php_worker resolves requests as php_server's default does (see index)")
				}
				tryFiles = d.RemainingArgs()
				if len(tryFiles) == 0 {
					return d.ArgErr()
				}
			case "resolve_root_symlink":
				resolve := true
				if d.NextArg() {
					v, err := strconv.ParseBool(d.Val())
					if err != nil || d.NextArg() {
						return d.Errf("resolve_root_symlink takes true, false or nothing (true)")
					}
					resolve = v
				}
				h.ResolveRootSymlink = &resolve
			case "env":
				if err := parseEnv(d, &h.Env); err != nil {
					return err
				}
			case "request_body_timeout":
				var v string
				if !d.AllArgs(&v) {
					return d.ArgErr()
				}
				if v == "off" || v == "0" {
					h.RequestBodyTimeout = -1
					break
				}
				t, err := caddy.ParseDuration(v)
				if err != nil || t <= 0 {
					return d.Errf("request_body_timeout takes a duration, 0 or off: %q", v)
				}
				h.RequestBodyTimeout = caddy.Duration(t)
			case "name":
				if !d.AllArgs(&h.Name) || h.Name == "" {
					return d.ArgErr()
				}
			case "worker":
				w, err := parseWorker(d, true, dl)
				if err != nil {
					return err
				}
				h.Workers = append(h.Workers, w)
			default:
				if err := unsupportedFrankenPHPOption(d, dl, name); err != nil {
					return err
				}
				return d.Errf("unknown %s subdirective %q (known: root, index, split, file_server, env, resolve_root_symlink, request_body_timeout, name, worker; php_server and php also split_path, php_server try_files)", dl, name)
			}
		}
	}
	if tryFiles != nil {
		if err := h.checkTryFiles(tryFiles); err != nil {
			return d.Err(err.Error())
		}
	}
	// Worker files resolve as Provision resolves them: from a root without
	// placeholders, else from the working directory.
	base := ""
	if h.Root != "" && !strings.Contains(h.Root, "{") {
		base = h.Root
	}
	for _, w := range h.Workers {
		if _, err := workerFile(w.FileName, base); err != nil {
			return d.Err(err.Error())
		}
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	err := handler.UnmarshalCaddyfile(h.Dispenser)
	return handler, err
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)

// parseSize reads the value v of option name as a size in bytes, in Caddy's syntax
// ("64MB", "512KiB", "1048576"), at least 1 KiB.
func parseSize(d *caddyfile.Dispenser, name, v string) (int64, error) {
	n, err := humanize.ParseBytes(v)
	if err != nil || n < 1024 || n > 1<<50 {
		return 0, d.Errf("%s must be a size of at least 1KiB, such as 64MB, got %q", name, v)
	}
	return int64(n), nil
}

// intArg reads the only argument of the current option as an integer of at least min.
func intArg(d *caddyfile.Dispenser, min int) (int, error) {
	name := d.Val()
	var v string
	if !d.AllArgs(&v) {
		return 0, d.ArgErr()
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		kind := "positive"
		if min == 0 {
			kind = "non-negative"
		}
		return 0, d.Errf("%s must be a %s integer, got %q", name, kind, v)
	}
	return n, nil
}

// durationArg reads the only argument of the current option as a duration, above zero
// when positive is set.
func durationArg(d *caddyfile.Dispenser, positive bool) (caddy.Duration, error) {
	name := d.Val()
	var v string
	if !d.AllArgs(&v) {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur < 0 || (positive && dur == 0) {
		kind := "a"
		if positive {
			kind = "a positive"
		}
		return 0, d.Errf("%s must be %s duration, got %q", name, kind, v)
	}
	return caddy.Duration(dur), nil
}
