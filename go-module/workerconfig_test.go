// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/php-worker/php_worker/go-module/internal/core"
)

func TestWorkerProvision(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	dir := workerFiles(t, "w.php", "worker.php")

	w := WorkerConfig{FileName: "w.php", Env: map[string]string{"A": "worker", "H": "{http.request.host}"}, MatchPath: []string{"/api/*"}}
	if err := w.provision(ctx, dir, map[string]string{"A": "site", "B": "site", "H": "site"}); err != nil {
		t.Fatal(err)
	}
	if w.FileName != filepath.Join(dir, "w.php") || w.Name != w.FileName {
		t.Errorf("file %q name %q: relative files are resolved from the root", w.FileName, w.Name)
	}
	if w.Num != 2*core.CPUs() {
		t.Errorf("num defaults to 2 × CPUs, got %d", w.Num)
	}
	want := [][2]string{{"A", "worker"}, {"B", "site"}, {"FRANKENPHP_WORKER", "1"}}
	if !reflect.DeepEqual(w.poolEnv, want) {
		t.Errorf("pool env = %v, want %v (the worker's values win over the site's)", w.poolEnv, want)
	}
	if want := [][2]string{{"H", "{http.request.host}"}}; !reflect.DeepEqual(w.requestEnv, want) {
		t.Errorf("request env = %v, want %v (values with placeholders, replaced per request)", w.requestEnv, want)
	}
	if !w.matches(matchRequest("http://x/api/users")) || w.matches(matchRequest("http://x/web")) {
		t.Error("match patterns")
	}

	file := filepath.Join(dir, "worker.php")
	abs := WorkerConfig{FileName: file, Name: "app"}
	if err := abs.provision(ctx, "/elsewhere", nil); err != nil || abs.FileName != file || abs.Name != "app" {
		t.Errorf("absolute file: %q %q %v", abs.FileName, abs.Name, err)
	}
	if err := (&WorkerConfig{}).provision(ctx, dir, nil); err == nil {
		t.Error("a worker without a file was accepted")
	}
	err := (&WorkerConfig{FileName: "nope.php"}).provision(ctx, dir, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "nope.php")+" does not exist") {
		t.Errorf("a missing worker file: %v", err)
	}
	for _, env := range []map[string]string{{"A": "x\x00y"}, {"A\x00B": "x"}, {"": "x"}, {"A=B": "x"}} {
		err := (&WorkerConfig{FileName: "w.php", Env: env}).provision(ctx, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "a name must be non-empty") {
			t.Errorf("env %q: %v, want a configuration error (no variable can have it)", env, err)
		}
	}
	app := &App{}
	app.setup(ctx)
	h := &Handler{Root: dir, DisableFileServer: true, Env: map[string]string{"A": "x\x00y"}}
	if err := h.setup(ctx, app); err == nil || !strings.Contains(err.Error(), "a name must be non-empty") {
		t.Errorf("a site env with NUL: %v, want a configuration error", err)
	}
}

func TestCheckUniqueFiles(t *testing.T) {
	a, b := &WorkerConfig{FileName: "/a.php"}, &WorkerConfig{FileName: "/b.php"}
	if err := checkUniqueFiles("site", []*WorkerConfig{a, b}); err != nil {
		t.Fatal(err)
	}
	err := checkUniqueFiles("site", []*WorkerConfig{a, b, {FileName: "/a.php"}})
	if err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("duplicate file: %v", err)
	}
	routed := []*WorkerConfig{a, {FileName: "/a.php", MatchPath: []string{"/x"}}, {FileName: "/a.php", MatchPath: []string{"/y"}}}
	if err := checkUniqueFiles("site", routed); err != nil {
		t.Errorf("workers that route by match may share a file: %v", err)
	}
}

// TestThePoolEnvTravelsInTheSpec: the pool's env (FRANKENPHP_WORKER...) goes to the core
// once, in the worker's spec, not in its boot request, which has the per-request env.
func TestThePoolEnvTravelsInTheSpec(t *testing.T) {
	w := &WorkerConfig{FileName: "/srv/app/public/worker.php", poolEnv: [][2]string{{"FRANKENPHP_WORKER", "1"}},
		requestEnv: [][2]string{{"APP_ENV", "{env.APP_ENV}"}}}
	var spec workerSpec
	if err := json.Unmarshal(w.spec(), &spec); err != nil || !reflect.DeepEqual(spec.Env, w.poolEnv) {
		t.Errorf("the spec's env %q (%v), want %q", spec.Env, err, w.poolEnv)
	}
	for _, kv := range spec.Boot.Vars {
		if kv[0] == "FRANKENPHP_WORKER" {
			t.Error("the pool's env travels in the spec, not in the boot request")
		}
	}
	if n := spec.Boot.EnvPairs; n != 1 || spec.Boot.Vars[len(spec.Boot.Vars)-1] != w.requestEnv[0] {
		t.Errorf("the boot request ends with the per-request env: %d pairs, %q", n, spec.Boot.Vars)
	}
}

// matchRequest is a GET as Caddy hands it to handlers, its replacer in the context.
func matchRequest(target string) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	return r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
}
