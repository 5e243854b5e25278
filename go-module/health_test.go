// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
)

func TestHealthDirective(t *testing.T) {
	for in, want := range map[string]string{"php_worker_health": "", "php_worker_health live": "live", "php_worker_health ready": "ready"} {
		var h HealthHandler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil || h.Probe != want {
			t.Errorf("%q: probe %q, error %v", in, h.Probe, err)
		}
	}
	for _, in := range []string{"php_worker_health alive", "php_worker_health live ready", "php_worker_health {\nx\n}"} {
		var h HealthHandler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err == nil || !strings.Contains(err.Error(), "live or ready") {
			t.Errorf("%q: error %v", in, err)
		}
	}
}

func TestProbesFailWithoutPHP(t *testing.T) {
	if php.Engine() != nil {
		t.Skip("an engine runs")
	}
	for _, probe := range []string{"live", "ready"} {
		w := httptest.NewRecorder()
		h := HealthHandler{Probe: probe, rt: php}
		if err := h.ServeHTTP(w, httptest.NewRequest("GET", "/"+probe, nil), nil); err != nil {
			t.Fatal(err)
		}
		var st healthState
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusServiceUnavailable || st.Status != "unavailable" || st.Engine != "starting" || len(st.Reasons) == 0 {
			t.Errorf("%s without PHP: %d %+v", probe, w.Code, st)
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: probes must not be cached", probe)
		}
	}
	err := (&HealthHandler{}).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/ready", nil), nil)
	if err == nil || !strings.Contains(err.Error(), "method not allowed") {
		t.Errorf("POST: error %v", err)
	}
}

// processEngine is an engine of child processes of which running run now.
type processEngine struct {
	phpruntime.Engine
	running int
}

func (e processEngine) Running() int { return e.running }

// With processes above 1, a snapshot taken while no child runs lists no pool, which no
// pool check fails: the probes fail for it themselves.
func TestProbesFailWhileNoChildProcessRuns(t *testing.T) {
	snapshot := func(states ...string) *core.Stats {
		s := &core.Stats{}
		for _, state := range states {
			s.Processes = append(s.Processes, core.ProcessStats{State: state})
		}
		return s
	}
	cases := []struct {
		engine phpruntime.Engine
		stats  *core.Stats
		down   bool
	}{
		{processEngine{running: 2}, snapshot("running", "running"), false},
		{processEngine{running: 1}, snapshot("restarting", "running"), false},
		{processEngine{running: 0}, snapshot("restarting", "restarting"), true},
		{processEngine{running: 0}, snapshot("running", "restarting"), true},    // one died since the snapshot
		{processEngine{running: 1}, snapshot("restarting", "restarting"), true}, // it died while answering
		{struct{ phpruntime.Engine }{}, &core.Stats{}, false},                   // one process: PHP runs here
	}
	for i, c := range cases {
		if got := noProcessRuns(c.engine, c.stats); got != c.down {
			t.Errorf("case %d: no process runs = %v, want %v", i, got, c.down)
		}
	}
}
