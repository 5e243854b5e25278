// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// Parameters are checked before anything else (400 naming the parameter), and without
// PHP running a valid request gets 503.
func TestProfileParameters(t *testing.T) {
	if php.Engine() != nil {
		t.Skip("an engine runs in this test binary")
	}
	for _, c := range []struct {
		method, query string
		status        int
		word          string
	}{
		{"GET", "seconds=0", 400, "seconds"},
		{"GET", "seconds=301", 400, "seconds"},
		{"GET", "seconds=2.5", 400, "seconds"},
		{"GET", "hz=0", 400, "hz"},
		{"GET", "hz=1001", 400, "hz"},
		{"GET", "mode=sideways", 400, "mode"},
		{"POST", "", 405, "GET"},
		{"GET", "seconds=1&hz=1000&mode=cpu", 503, "not running"},
		{"GET", "", 503, "not running"},
	} {
		r := httptest.NewRequest(c.method, "/php_worker/profile?"+c.query, nil)
		err := (&adminAPI{rt: php}).profile(httptest.NewRecorder(), r)
		var api caddy.APIError
		if !errors.As(err, &api) || api.HTTPStatus != c.status || !strings.Contains(api.Err.Error(), c.word) {
			t.Errorf("%s ?%s: %v, want %d mentioning %q", c.method, c.query, err, c.status, c.word)
		}
	}
	if profiling.Load() {
		t.Fatal("a refused request left the profiler marked busy")
	}

}
