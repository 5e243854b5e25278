// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
)

func init() {
	caddy.RegisterModule(adminAPI{})
}

// adminAPI adds php_worker's routes to Caddy's admin API:
//
//	POST /php_worker/workers/restart   restart every worker script, rolling
//	GET  /php_worker/threads           the PHP threads and what they do, as JSON
//	GET  /php_worker/health            liveness: 200 while PHP can serve, else 503
//	GET  /php_worker/ready             readiness: 200 while the server takes traffic
//	GET  /php_worker/profile           a pprof profile of the PHP threads (profile.go)
//
// and FrankenPHP's names for the first two, /frankenphp/workers/restart and
// /frankenphp/threads (the JSON is php_worker's).
//
// (health.go says what each probe checks.)
//
// Admin routers are created again with every config load, and provisioned before the
// config's apps (Caddy starts the admin server first): they take the process's runtime
// (processRuntime), which every app of every config drives.
type adminAPI struct {
	rt *phpruntime.Runtime
}

// CaddyModule returns the Caddy module information.
func (adminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.php_worker",
		New: func() caddy.Module { return new(adminAPI) },
	}
}

// Provision takes the process's runtime.
func (a *adminAPI) Provision(caddy.Context) error {
	a.rt = processRuntime()
	return nil
}

// Routes returns the admin routes.
func (a *adminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/php_worker/workers/restart", Handler: caddy.AdminHandlerFunc(a.restartWorkers)},
		{Pattern: "/php_worker/threads", Handler: caddy.AdminHandlerFunc(a.threads)},
		{Pattern: "/php_worker/schedules", Handler: caddy.AdminHandlerFunc(a.schedules)},
		{Pattern: "/php_worker/profile", Handler: caddy.AdminHandlerFunc(a.profile)},
		{Pattern: "/frankenphp/workers/restart", Handler: caddy.AdminHandlerFunc(a.restartWorkers)},
		{Pattern: "/frankenphp/threads", Handler: caddy.AdminHandlerFunc(a.threads)},
		{Pattern: "/php_worker/health", Handler: caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			return a.probe(w, r, false)
		})},
		{Pattern: "/php_worker/ready", Handler: caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			return a.probe(w, r, true)
		})},
	}
}

// probe answers a probe on the admin API, whose errors are caddy.APIErrors.
func (a *adminAPI) probe(w http.ResponseWriter, r *http.Request, ready bool) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed, use GET")}
	}
	return writeProbe(w, r, a.rt, ready)
}

// restartTimeout bounds how long a restart waits for the new scripts to boot.
const restartTimeout = 60 * time.Second

// restartWorkers restarts every worker the way a reload does, without one: new threads
// boot the script beside the running ones and take over as they are ready. It answers
// once every worker's new threads are ready, or one failed to boot (the old ones keep
// serving it).
func (a *adminAPI) restartWorkers(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed, use POST")}
	}
	restarted, err := a.rt.RestartWorkers()
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	failed, err := a.rt.WaitForGenerations(restarted, time.Now().Add(restartTimeout))
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
	}
	if len(failed) > 0 {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError,
			Err: fmt.Errorf("the new scripts of %s did not boot (see the log); the running ones keep serving", strings.Join(failed, ", "))}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if strings.HasPrefix(r.URL.Path, "/frankenphp/") {
		// FrankenPHP's answer, which its clients and tests read.
		_, err = io.WriteString(w, "workers restarted successfully\n")
		return err
	}
	_, err = fmt.Fprintf(w, "restarted %d workers\n", len(restarted))
	return err
}

// schedules answers the running config's scheduled jobs (see scheduleStates).
func (a *adminAPI) schedules(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed, use GET")}
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(scheduleStates())
}

// threads answers the engine's snapshot of its threads and pools.
func (a *adminAPI) threads(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed, use GET")}
	}
	stats := threadsJSON(a.rt)
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(stats)
	return err
}

// Interface guards
var (
	_ caddy.AdminRouter = (*adminAPI)(nil)
	_ caddy.Provisioner = (*adminAPI)(nil)
)
