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
