// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// App is the php_worker app. It owns the PHP engine of the process: PHP starts in
// Start (never in Provision, so `caddy validate` and `caddy adapt` start no PHP) and
// keeps running across config reloads that leave the engine settings unchanged.
type App struct {
	// Number of PHP threads. Default: 2 × the number of CPUs.
	NumThreads int `json:"num_threads,omitempty"`

	// How long a request may wait for a free PHP thread before it is answered
	// 503 with a Retry-After header. Default: 0, wait as long as the client does.
	MaxWaitTime caddy.Duration `json:"max_wait_time,omitempty"`

	// php.ini settings, applied after the php.ini files PHP reads.
	PHPIni map[string]string `json:"php_ini,omitempty"`

	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "php_worker",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision sets defaults. It starts nothing.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	if a.NumThreads == 0 {
		a.NumThreads = 2 * runtime.GOMAXPROCS(0)
	}
	return nil
}

// Validate checks the settings.
func (a *App) Validate() error {
	if a.NumThreads < 0 {
		return fmt.Errorf("num_threads must be positive, got %d", a.NumThreads)
	}
	if a.MaxWaitTime < 0 {
		return fmt.Errorf("max_wait_time must not be negative")
	}
	return nil
}

// engineConfig is the JSON read by php_worker_engine_new (rust-core/src/config.rs).
type engineConfig struct {
	NumThreads int               `json:"num_threads"`
	PHPIni     map[string]string `json:"php_ini,omitempty"`
}

func (a *App) engineConfig() []byte {
	b, _ := json.Marshal(engineConfig{NumThreads: a.NumThreads, PHPIni: a.PHPIni})
	return b
}

// Start starts the PHP engine, or keeps the running one when its settings are the same.
func (a *App) Start() error {
	return startEngine(a, a.engineConfig(), a.logger)
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
	_ caddy.App         = (*App)(nil)
	_ caddy.Provisioner = (*App)(nil)
	_ caddy.Validator   = (*App)(nil)
)
