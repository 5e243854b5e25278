// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

// workerFiles creates empty worker scripts in a temporary directory and returns it.
func workerFiles(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("<?php\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestWorkerDirectives(t *testing.T) {
	dir := workerFiles(t, "global.php", "other.php", "index.php", "api.php")
	global, other := filepath.Join(dir, "global.php"), filepath.Join(dir, "other.php")
	d := caddyfile.NewTestDispenser(`php_worker {
		shutdown_timeout 5s
		worker ` + global + ` 3
		worker {
			file ` + other + `
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
		{FileName: global, Num: 3},
		{FileName: other, Num: 2, MaxRequests: 500, Name: "api", Env: map[string]string{"APP_ENV": "prod"},
			MaxBootBackoff: caddy.Duration(2 * time.Second)},
	}
	if !reflect.DeepEqual(app.Workers, want) {
		t.Errorf("workers = %+v, want %+v", app.Workers, want)
	}

	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`php_worker {
		root ` + dir + `
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

func TestMissingWorkerFilesAreRefusedWhenAdapting(t *testing.T) {
	dir := workerFiles(t, "present.php")
	if err := os.Mkdir(filepath.Join(dir, "folder.php"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.php")
	for input, message := range map[string]string{
		"php_worker {\nworker " + missing + "\n}":                          "worker file " + missing + " does not exist",
		"php_worker {\nworker " + filepath.Join(dir, "folder.php") + "\n}": "is not a regular file",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("global %q: error %v, want one mentioning %q", input, err, message)
		}
	}
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\nworker missing.php\nroot " + dir + "\n}"))
	if err == nil || !strings.Contains(err.Error(), "worker file "+missing+" does not exist") {
		t.Errorf("a site worker is resolved from the directive's root: %v", err)
	}
	var ok Handler
	if err := ok.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\nroot " + dir + "\nworker present.php\n}")); err != nil {
		t.Errorf("an existing worker file: %v", err)
	}
}

func TestPlanSplitsThreadsAndKeysPools(t *testing.T) {
	app := &App{NumThreads: 6}
	app.setup(caddy.Context{Context: context.Background()})
	w1 := &WorkerConfig{FileName: "/a.php", Name: "/a.php", Num: 2, env: [][2]string{{"FRANKENPHP_WORKER", "1"}}}
	w2 := &WorkerConfig{FileName: "/b.php", Name: "/a.php", Num: 1}
	app.addWorkers([]*WorkerConfig{w1, w2})
	defer releasePool(w1.pool.key)
	defer releasePool(w2.pool.key)
	p, err := app.makePlan()
	if err != nil {
		t.Fatal(err)
	}
	if p.classic != 3 || len(p.workers) != 2 || string(p.settings) != "{}" {
		t.Errorf("plan %+v", p)
	}
	if w1.pool.key != "/a.php" || w2.pool.key != "/a.php#2" || w1.pool.id == w2.pool.id {
		t.Errorf("duplicate names get unique pools: %+v %+v", w1.pool, w2.pool)
	}
	var spec workerSpec
	if err := json.Unmarshal(w2.spec(), &spec); err != nil || spec.Name != "/a.php#2" || spec.Num != 1 {
		t.Errorf("spec %+v %v", spec, err)
	}
	if again := acquirePool("/a.php"); again != w1.pool {
		t.Error("a second config gets the same pool for the same worker")
	} else {
		releasePool("/a.php")
	}
	app.NumThreads = 3
	if _, err := app.makePlan(); err == nil || !strings.Contains(err.Error(), "must be greater") {
		t.Errorf("num_threads not above the worker threads: %v", err)
	}
}
