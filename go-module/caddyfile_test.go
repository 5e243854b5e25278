// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
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
		"php_worker {\nphp_ini a\n}":             "argument",
		"php_worker {\nmax_threads 8\n}":         "autoscaling",
		"php_worker {\nworker index.php\n}":      "worker mode",
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
		"php_worker {\nfile_server on\n}":   "off",
		"php_worker {\nenv ONLY_KEY\n}":     "key and a value",
		"php_worker {\nsplit\n}":            "argument",
		"php_worker {\nsplit .p\u0125p\n}":  "ASCII",
		"php_worker {\nworker index.php\n}": "worker mode",
		"php_worker {\nwat\n}":              "unknown php_worker subdirective",
		"php_worker {\nroot a b\n}":         "argument",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}
