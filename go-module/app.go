// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"
)

// App is the php_worker app. It owns the PHP engine of the process: PHP starts in
// Start (never in Provision, so `caddy validate` and `caddy adapt` start no PHP) and
// keeps running across config reloads that leave the engine settings unchanged.
type App struct {
	// Number of PHP threads, worker threads included. Default: 2 × the number of CPUs,
	// or the worker threads plus one if that is more.
	NumThreads int `json:"num_threads,omitempty"`

	// How long a request may wait for a free PHP thread before it is answered
	// 503 with a Retry-After header. Default: 0, wait as long as the client does.
	MaxWaitTime caddy.Duration `json:"max_wait_time,omitempty"`

	// On shutdown, how long running scripts may take to finish before they are stopped
	// the way max_execution_time stops them. Default: 30s.
	ShutdownTimeout caddy.Duration `json:"shutdown_timeout,omitempty"`

	// php.ini settings, applied after the php.ini files PHP reads.
	PHPIni map[string]string `json:"php_ini,omitempty"`

	// Workers serving any site whose resolved script is their file. Relative files are
	// relative to Caddy's working directory; match is not allowed here.
	Workers []WorkerConfig `json:"workers,omitempty"`

	logger   *zap.Logger
	registry *workerRegistry
}

// workerRegistry holds the workers of one config: the global ones and those the site
// handlers register while they provision.
type workerRegistry struct {
	mu          sync.Mutex
	site        []*WorkerConfig
	globalFiles map[string]*WorkerConfig // global workers by absolute file
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "php_worker",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision sets defaults and prepares the global workers. It starts nothing.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	if a.ShutdownTimeout == 0 {
		a.ShutdownTimeout = caddy.Duration(30 * time.Second)
	}
	a.registry = &workerRegistry{globalFiles: map[string]*WorkerConfig{}}
	globals := make([]*WorkerConfig, 0, len(a.Workers))
	for i := range a.Workers {
		w := &a.Workers[i]
		if len(w.MatchPath) > 0 {
			return fmt.Errorf("global worker %s: match is only allowed in a site's php_worker directive", w.FileName)
		}
		if err := w.provision(ctx, "", nil); err != nil {
			return err
		}
		a.registry.globalFiles[w.FileName] = w
		globals = append(globals, w)
	}
	if err := checkUniqueFiles("php_worker global option", globals); err != nil {
		return err
	}

	// On process exit Caddy may stop the http app first, and that waits for the PHP
	// requests in flight: start PHP's bounded shutdown as soon as stopping begins.
	events, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading the events app: %w", err)
	}
	return events.(*caddyevents.App).On("stopping", caddyevents.Handler(exitHook{a}))
}

// exitHook starts the engine's shutdown when Caddy stops for good.
type exitHook struct{ app *App }

func (h exitHook) Handle(context.Context, caddy.Event) error {
	if caddy.Exiting() {
		go stopEngine(h.app)
	}
	return nil
}

// Validate checks the settings.
func (a *App) Validate() error {
	if a.NumThreads < 0 {
		return fmt.Errorf("num_threads must be positive, got %d", a.NumThreads)
	}
	if a.MaxWaitTime < 0 || a.ShutdownTimeout < 0 {
		return fmt.Errorf("max_wait_time and shutdown_timeout must not be negative")
	}
	return nil
}

// addSiteWorkers registers the workers of a site's handler, in its Provision.
func (a *App) addSiteWorkers(workers []*WorkerConfig) {
	a.registry.mu.Lock()
	defer a.registry.mu.Unlock()
	a.registry.site = append(a.registry.site, workers...)
}

// globalWorker is the global worker whose file is filename, or nil.
func (a *App) globalWorker(filename string) *WorkerConfig {
	return a.registry.globalFiles[filename]
}

// engineConfig is the JSON read by php_worker_engine_new (rust-core/src/config.rs).
type engineConfig struct {
	NumThreads      int                  `json:"num_threads"`
	PHPIni          map[string]string    `json:"php_ini,omitempty"`
	Workers         []engineWorkerConfig `json:"workers,omitempty"`
	ShutdownGraceMS int64                `json:"shutdown_grace_ms"`
}

type engineWorkerConfig struct {
	Name             string      `json:"name"`
	File             string      `json:"file"`
	Num              int         `json:"num"`
	MaxRequests      int         `json:"max_requests,omitempty"`
	Env              [][2]string `json:"env"`
	MaxBootBackoffMS int64       `json:"max_boot_backoff_ms,omitempty"`
}

// engineConfig assigns pool ids to every worker and splits the threads between the
// classic pool and the workers.
func (a *App) engineConfig() ([]byte, error) {
	a.registry.mu.Lock()
	defer a.registry.mu.Unlock()
	all := make([]*WorkerConfig, 0, len(a.Workers)+len(a.registry.site))
	for i := range a.Workers {
		all = append(all, &a.Workers[i])
	}
	all = append(all, a.registry.site...)

	workerThreads := 0
	cfg := engineConfig{PHPIni: a.PHPIni, ShutdownGraceMS: time.Duration(a.ShutdownTimeout).Milliseconds()}
	names := map[string]int{}
	for i, w := range all {
		w.pool = uint32(i + 1)
		workerThreads += w.Num
		name := w.Name
		if names[name]++; names[name] > 1 {
			name = fmt.Sprintf("%s#%d", name, names[name])
		}
		cfg.Workers = append(cfg.Workers, engineWorkerConfig{
			Name: name, File: w.FileName, Num: w.Num, MaxRequests: w.MaxRequests, Env: w.env,
			MaxBootBackoffMS: time.Duration(w.MaxBootBackoff).Milliseconds(),
		})
	}
	total := a.NumThreads
	if total == 0 {
		total = max(2*cpus(), workerThreads+1)
	} else if total <= workerThreads {
		return nil, fmt.Errorf("num_threads (%d) must be greater than the worker threads (%d): one thread at least serves classic scripts", total, workerThreads)
	}
	cfg.NumThreads = total - workerThreads
	return json.Marshal(cfg)
}

// Start starts the PHP engine, or keeps the running one when its settings are the same.
func (a *App) Start() error {
	config, err := a.engineConfig()
	if err != nil {
		return err
	}
	return startEngine(a, config, a.logger)
}

// Stop stops the engine unless a newer config already took it over (on a reload the
// new config starts before the old one stops).
func (a *App) Stop() error {
	stopEngine(a)
	return nil
}

func (a *App) maxWaitTime() time.Duration {
	return time.Duration(a.MaxWaitTime)
}

// Interface guards
var (
	_ caddy.App           = (*App)(nil)
	_ caddy.Provisioner   = (*App)(nil)
	_ caddy.Validator     = (*App)(nil)
	_ caddyevents.Handler = exitHook{}
)
