// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
)

func init() {
	caddy.RegisterModule(HealthHandler{})
	httpcaddyfile.RegisterHandlerDirective("php_worker_health", parseHealthCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("php_worker_health", httpcaddyfile.Before, "reverse_proxy")
}

// Probes, as a load balancer or Kubernetes asks them:
//
//   - live: 200 while PHP runs (with processes above 1, while a child process runs) and
//     every pool has a thread that can take requests (a booted worker script, a classic
//     thread) or is restarting (a reload: the pool's entry says "restarting"); else 503.
//     A failing liveness probe restarts the server, so it fails only when PHP itself
//     cannot serve.
//   - ready: 503 while PHP starts or restarts (a php_ini change), while a worker has no
//     booted thread, while stuck threads have reached max_stuck_threads, and from the
//     moment the server begins to stop (Caddy's shutdown_delay keeps serving, PHP
//     included, while the probe tells the load balancer to move away); else 200.
//
// Both answer a small JSON body saying why.

// stopping is set once the process begins to stop: readiness fails from then on.
var stopping atomic.Bool

// processCounter is an engine of child processes (processes above 1), which tells how
// many of them run.
type processCounter interface {
	Running() int
}

// noProcessRuns tells whether e runs PHP in child processes and none of them runs now
// (each that died waits for its replacement): its snapshot s then lists no pool, for it
// has only the running children's. One that died since the snapshot counts as gone too.
func noProcessRuns(e phpruntime.Engine, s *core.Stats) bool {
	pc, ok := e.(processCounter)
	if !ok {
		return false
	}
	if pc.Running() == 0 {
		return true
	}
	for _, p := range s.Processes {
		if p.State == "running" {
			return false
		}
	}
	return true
}

// healthState is the answer of a probe.
type healthState struct {
	Status  string       `json:"status"` // "ok" or "unavailable"
	Reasons []string     `json:"reasons,omitempty"`
	Engine  string       `json:"engine"` // running, starting, stopping
	Pools   []healthPool `json:"pools,omitempty"`
	Stuck   *healthStuck `json:"stuck_threads,omitempty"`
}

type healthPool struct {
	Worker  string `json:"worker,omitempty"` // empty for the classic pool
	Kind    string `json:"kind,omitempty"`   // http, task or background
	Threads int    `json:"threads"`
	Ready   int    `json:"ready"`
	// A restart under way (a reload, a restart through the admin API): old threads
	// still ending, or a new generation booting while the old one serves. Not a failure.
	Restarting bool `json:"restarting,omitempty"`
	Leaving    int  `json:"leaving,omitempty"` // old threads still ending
}

type healthStuck struct {
	Threads int `json:"threads"`
	Limit   int `json:"limit"`
}

// probe computes the answer of the live (ready false) or ready probe.
func probe(rt *phpruntime.Runtime, ready bool) healthState {
	st := healthState{Engine: "running"}
	fail := func(format string, args ...any) { st.Reasons = append(st.Reasons, fmt.Sprintf(format, args...)) }
	e := rt.Engine()
	switch {
	case e == nil:
		st.Engine = "starting"
		fail("PHP is not running (it starts, or restarts for a php_ini change)")
	case e.Stopping():
		st.Engine = "stopping"
		fail("PHP is stopping")
	}
	if ready && stopping.Load() {
		fail("the server is stopping")
	}
	if e != nil {
		s, err := rt.Stats()
		switch {
		case err != nil:
			fail("cannot read PHP's threads: %v", err)
		case s != nil:
			if !e.Stopping() && noProcessRuns(e, s) {
				fail("no PHP process runs (those that died wait for their replacement)")
			}
			for _, p := range s.Pools {
				st.Pools = append(st.Pools, healthPool{Worker: string(p.Worker), Kind: p.Kind, Threads: p.Threads, Ready: p.Ready,
					Restarting: p.Restarting, Leaving: p.Leaving})
				// A restarting pool passes: a background script's old copy may take its
				// whole shutdown_timeout to end, and an HTTP worker's old generation
				// serves until the new one has booted. Busy and Idle include threads of
				// a generation taking over.
				if p.Ready == 0 && p.Busy+p.Idle == 0 && !p.Restarting {
					if p.Worker == "" {
						fail("no classic PHP thread can take requests")
					} else {
						fail("worker %s has no booted thread", p.Worker)
					}
				}
			}
			if limit := rt.MaxStuck(); ready && limit > 0 && s.StuckThreads > 0 {
				st.Stuck = &healthStuck{Threads: s.StuckThreads, Limit: limit}
				if s.StuckThreads >= limit {
					fail("%d PHP threads are stuck: max_stuck_threads is reached", s.StuckThreads)
				}
			}
		}
	}
	st.Status = "ok"
	if len(st.Reasons) > 0 {
		st.Status = "unavailable"
	}
	return st
}

// writeProbe answers a probe: 200 or 503, with the state as JSON.
func writeProbe(w http.ResponseWriter, r *http.Request, rt *phpruntime.Runtime, ready bool) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddyhttp.Error(http.StatusMethodNotAllowed, fmt.Errorf("method not allowed, use GET"))
	}
	st := probe(rt, ready)
	body, err := json.Marshal(st)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if st.Status == "ok" {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if r.Method == http.MethodHead {
		return nil
	}
	_, err = w.Write(append(body, '\n'))
	return err
}

// HealthHandler answers the live or ready probe on a site route, for probes that reach
// the public port and not the admin API:
//
//	handle /ready {
//		php_worker_health ready
//	}
type HealthHandler struct {
	// "live" or "ready". Default: ready.
	Probe string `json:"probe,omitempty"`

	rt *phpruntime.Runtime
}

// Provision takes the runtime of the config's app.
func (h *HealthHandler) Provision(ctx caddy.Context) error {
	app, err := configuredApp(ctx)
	if err != nil {
		return err
	}
	h.rt = app.rt
	return nil
}

// CaddyModule returns the Caddy module information.
func (HealthHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.php_worker_health",
		New: func() caddy.Module { return new(HealthHandler) },
	}
}

// Validate checks the probe's name.
func (h *HealthHandler) Validate() error {
	switch h.Probe {
	case "", "live", "ready":
		return nil
	}
	return fmt.Errorf("php_worker_health: the probe is live or ready, got %q", h.Probe)
}

// ServeHTTP answers the probe; it never calls the next handler.
func (h *HealthHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	return writeProbe(w, r, h.rt, h.Probe != "live")
}

// UnmarshalCaddyfile reads `php_worker_health [live|ready]`.
func (h *HealthHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		h.Probe = d.Val()
	}
	if d.NextArg() || d.NextBlock(0) {
		return d.Errf("php_worker_health takes one argument, live or ready")
	}
	return h.Validate()
}

func parseHealthCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var hh HealthHandler
	err := hh.UnmarshalCaddyfile(h.Dispenser)
	return &hh, err
}

// Interface guards
var (
	_ caddy.Provisioner           = (*HealthHandler)(nil)
	_ caddy.Validator             = (*HealthHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*HealthHandler)(nil)
	_ caddyfile.Unmarshaler       = (*HealthHandler)(nil)
)
