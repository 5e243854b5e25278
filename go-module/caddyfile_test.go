// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestGlobalOption(t *testing.T) {
	d := caddyfile.NewTestDispenser(`php_worker {
		num_threads 3
		max_wait_time 2s
		php_ini memory_limit 256M
		php_ini {
			display_errors 0
			error_reporting "E_ALL & ~E_DEPRECATED"
		}
	}`)
	var app App
	if err := app.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := App{
		NumThreads:  3,
		MaxWaitTime: caddy.Duration(2 * time.Second),
		PHPIni:      map[string]string{"memory_limit": "256M", "display_errors": "0", "error_reporting": "E_ALL & ~E_DEPRECATED"},
	}
	if !reflect.DeepEqual(app, want) {
		t.Errorf("got %+v, want %+v", app, want)
	}
}

func TestGlobalOptionErrors(t *testing.T) {
	for input, message := range map[string]string{
		"php_worker {\nnum_threads 0\n}":         "positive integer",
		"php_worker {\nnum_threads x\n}":         "positive integer",
		"php_worker {\nnum_threads\n}":           "argument",
		"php_worker {\nmax_wait_time soon\n}":    "duration",
		"php_worker {\nshutdown_timeout -1s\n}":  "shutdown_timeout must be a duration",
		"php_worker {\nphp_ini a\n}":             "argument",
		"php_worker {\nmax_threads 8\n}":         "autoscaling",
		"php_worker {\nshared_store_size 1MB\n}": "shared store",
		"php_worker {\nnonsense 1\n}":            "unknown php_worker option",
		"php_worker extra":                       "argument",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}

func TestSiteDirective(t *testing.T) {
	d := caddyfile.NewTestDispenser(`php_worker {
		root public
		index app.php
		split .php .phtml
		file_server off
		env APP_ENV production
		env DEBUG 0
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Root != "public" || h.Index != "app.php" || !reflect.DeepEqual(h.SplitPath, []string{".php", ".phtml"}) ||
		!h.DisableFileServer || !reflect.DeepEqual(h.Env, map[string]string{"APP_ENV": "production", "DEBUG": "0"}) {
		t.Errorf("got %+v", h)
	}

	var bare Handler
	if err := bare.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`php_worker`)); err != nil {
		t.Fatalf("bare directive: %v", err)
	}
	if !reflect.DeepEqual(bare, Handler{}) {
		t.Errorf("bare directive set fields: %+v", bare)
	}
}

func TestSiteDirectiveErrors(t *testing.T) {
	for input, message := range map[string]string{
		"php_worker {\nfile_server on\n}":  "off",
		"php_worker {\nenv ONLY_KEY\n}":    "key and a value",
		"php_worker {\nsplit\n}":           "argument",
		"php_worker {\nsplit .p\u0125p\n}": "ASCII",
		"php_worker {\nwat\n}":             "unknown php_worker subdirective",
		"php_worker {\nroot a b\n}":        "argument",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}

func TestWorkerDirectives(t *testing.T) {
	d := caddyfile.NewTestDispenser(`php_worker {
		shutdown_timeout 5s
		worker global.php 3
		worker {
			file other.php
			num 2
			max_requests 500
			name api
			env APP_ENV prod
			max_boot_backoff 2s
		}
	}`)
	var app App
	if err := app.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if app.ShutdownTimeout != caddy.Duration(5*time.Second) {
		t.Errorf("shutdown_timeout = %v", app.ShutdownTimeout)
	}
	want := []WorkerConfig{
		{FileName: "global.php", Num: 3},
		{FileName: "other.php", Num: 2, MaxRequests: 500, Name: "api", Env: map[string]string{"APP_ENV": "prod"},
			MaxBootBackoff: caddy.Duration(2 * time.Second)},
	}
	if !reflect.DeepEqual(app.Workers, want) {
		t.Errorf("workers = %+v, want %+v", app.Workers, want)
	}

	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`php_worker {
		worker index.php
		worker {
			file api.php
			match /api/* /graphql
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Workers) != 2 || h.Workers[0].FileName != "index.php" ||
		!reflect.DeepEqual(h.Workers[1].MatchPath, []string{"/api/*", "/graphql"}) {
		t.Errorf("site workers = %+v", h.Workers)
	}
}

func TestWorkerDirectiveErrors(t *testing.T) {
	for input, message := range map[string]string{
		"php_worker {\nworker {\nfile a.php\nmatch /x\n}\n}":            "only allowed in a site",
		"php_worker {\nworker a.php zero\n}":                            "positive integer",
		"php_worker {\nworker {\nnum 2\n}\n}":                           "file is required",
		"php_worker {\nworker {\nfile a.php\nwatch\n}\n}":               "not available",
		"php_worker {\nworker {\nfile a.php\nbogus 1\n}\n}":             "unknown worker subdirective",
		"php_worker {\nworker a.php 1 2\n}":                             "argument",
		"php_worker {\nworker {\nfile a.php\nnum 0\n}\n}":               "num must be a positive integer",
		"php_worker {\nworker {\nfile a.php\nmax_requests -1\n}\n}":     "max_requests must be a non-negative integer",
		"php_worker {\nworker {\nfile a.php\nmax_boot_backoff 0s\n}\n}": "max_boot_backoff must be a positive duration",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}

func TestEngineConfigSplitsThreads(t *testing.T) {
	app := &App{NumThreads: 6, registry: &workerRegistry{}}
	w1 := &WorkerConfig{FileName: "/a.php", Name: "/a.php", Num: 2, env: [][2]string{{"FRANKENPHP_WORKER", "1"}}}
	w2 := &WorkerConfig{FileName: "/b.php", Name: "/a.php", Num: 1}
	app.addSiteWorkers([]*WorkerConfig{w1, w2})
	raw, err := app.engineConfig()
	if err != nil {
		t.Fatal(err)
	}
	var cfg engineConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.NumThreads != 3 || len(cfg.Workers) != 2 || w1.pool != 1 || w2.pool != 2 {
		t.Errorf("config %+v, pools %d %d", cfg, w1.pool, w2.pool)
	}
	if cfg.Workers[1].Name != "/a.php#2" {
		t.Errorf("duplicate names are made unique: %q", cfg.Workers[1].Name)
	}
	app.NumThreads = 3
	if _, err := app.engineConfig(); err == nil || !strings.Contains(err.Error(), "must be greater") {
		t.Errorf("num_threads not above the worker threads: %v", err)
	}
}
