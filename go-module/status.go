// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
)

func init() {
	caddy.RegisterModule(StatusHandler{})
	httpcaddyfile.RegisterHandlerDirective("php_worker_status", parseStatusCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("php_worker_status", httpcaddyfile.Before, "reverse_proxy")
}

// statusPage is the status page: one HTML file, its script and styles inline (nothing
// loaded from elsewhere). It polls its own URL every second for the data below and
// keeps a few minutes of throughput and latency in the browser.
//
//go:embed status.html
var statusPage []byte

// StatusHandler serves the status page on a site route. A browser cannot open pages of
// Caddy's admin API (it refuses browser requests without an allowed Origin), so the
// page lives on a route you choose, and protect, as it shows the URIs requests run:
//
//	handle /php-status* {
//		basic_auth { admin <hash> }
//		php_worker_status
//	}
//
// The page's data comes from the same URL: ?data=threads is /php_worker/threads (the
// engine's snapshot), ?data=schedules is /php_worker/schedules, ?data=php says whether
// the linked PHP is current (phpcurrency.go).
type StatusHandler struct {
	rt *phpruntime.Runtime
}

// CaddyModule returns the Caddy module information.
func (StatusHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.php_worker_status",
		New: func() caddy.Module { return new(StatusHandler) },
	}
}

// Provision takes the runtime of the config's app.
func (h *StatusHandler) Provision(ctx caddy.Context) error {
	app, err := configuredApp(ctx)
	if err != nil {
		return err
	}
	h.rt = app.rt
	return nil
}

// ServeHTTP answers the page or its data; it never calls the next handler.
func (h *StatusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddyhttp.Error(http.StatusMethodNotAllowed, fmt.Errorf("the status page answers GET"))
	}
	w.Header().Set("Cache-Control", "no-store")
	switch data := r.URL.Query().Get("data"); data {
	case "":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy",
			"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
		_, err := w.Write(statusPage)
		return err
	case "threads":
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write(threadsJSON(h.rt))
		return err
	case "schedules":
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(scheduleStates())
	case "php":
		w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(w).Encode(currentPHP())
	default:
		return caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("unknown status data %q (threads, schedules or php)", data))
	}
}

// UnmarshalCaddyfile reads `php_worker_status`, which takes no argument.
func (h *StatusHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() || d.NextBlock(0) {
		return d.Err("php_worker_status takes no argument")
	}
	return nil
}

func parseStatusCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var sh StatusHandler
	err := sh.UnmarshalCaddyfile(h.Dispenser)
	return &sh, err
}

// threadsJSON is the engine's snapshot, or an empty one when PHP is not running.
func threadsJSON(rt *phpruntime.Runtime) []byte {
	if e := rt.Engine(); e != nil {
		if s, err := e.StatsJSON(); err == nil {
			return s
		}
	}
	return []byte(`{"threads":[],"pools":[]}`)
}

// scheduleState is a scheduled job as /php_worker/schedules shows it.
type scheduleState struct {
	Name    string    `json:"name"`
	Cron    string    `json:"cron"`
	Next    time.Time `json:"next"`
	Running bool      `json:"running"`
	OK      uint64    `json:"ok"`
	Failed  uint64    `json:"failed"`
	Skipped uint64    `json:"skipped"`
	// With a lease: the times another instance took.
	Elsewhere uint64 `json:"elsewhere"`
	Lease     bool   `json:"lease"`
}

// scheduleStates are the running config's scheduled jobs, soonest first: when each runs
// next, whether it runs now, and how its runs ended.
func scheduleStates() []scheduleState {
	list := []scheduleState{}
	counts := map[string]jobCount{}
	jobStats.each(func(name string, c jobCount) { counts[name] = c })
	if app := runningApp(); app != nil {
		now := time.Now()
		for _, sc := range app.Schedules {
			if sc.schedule == nil {
				continue
			}
			name := sc.worker.Name
			_, running := jobsRunning.Load(name)
			c := counts[name]
			list = append(list, scheduleState{Name: name, Cron: sc.Cron, Next: sc.schedule.Next(now), Running: running,
				OK: c.ok, Failed: c.failed, Skipped: c.skipped, Elsewhere: c.elsewhere, Lease: sc.lease != nil})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Next.Before(list[j].Next) })
	return list
}

// runningApp is the running config's php_worker app (under either name), or nil.
func runningApp() *App {
	ctx := caddy.ActiveContext()
	if a, err := ctx.AppIfConfigured("frankenphp"); err == nil {
		return &a.(*FrankenPHPApp).App
	}
	if a, err := ctx.AppIfConfigured("php_worker"); err == nil {
		return a.(*App)
	}
	return nil
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*StatusHandler)(nil)
	_ caddyfile.Unmarshaler       = (*StatusHandler)(nil)
)
