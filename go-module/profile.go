// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/php-worker/php_worker/go-module/internal/phpprofile"
)

// The bounds of GET /php_worker/profile's parameters.
const (
	profileDefaultSeconds = 10
	profileMaxSeconds     = 300
	profileDefaultHz      = 100
	profileMaxHz          = 1000
)

// profiling is set while a profile is taken: one at a time.
var profiling atomic.Bool

// profile answers GET /php_worker/profile?seconds=N&hz=N&mode=wall|cpu: a pprof profile
// of every PHP thread over the next N seconds (see docs/debugging-and-profiling.md, "Profiling").
func (a *adminAPI) profile(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method not allowed, use GET")}
	}
	q := r.URL.Query()
	seconds, err := intParam(q.Get("seconds"), "seconds", profileDefaultSeconds, 1, profileMaxSeconds)
	if err != nil {
		return err
	}
	hz, err := intParam(q.Get("hz"), "hz", profileDefaultHz, 1, profileMaxHz)
	if err != nil {
		return err
	}
	mode := q.Get("mode")
	switch mode {
	case "":
		mode = "wall"
	case "wall", "cpu":
	default:
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("mode must be wall or cpu, not %q", mode)}
	}
	e := a.rt.Engine()
	if e == nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: errors.New("PHP is not running")}
	}
	if !profiling.CompareAndSwap(false, true) {
		return caddy.APIError{HTTPStatus: http.StatusConflict, Err: errors.New("a profile is being taken; try again when it ends")}
	}
	defer profiling.Store(false)

	// The admin server's read timeout (10 s) would end a longer request's context.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Duration(seconds)*time.Second + time.Minute))
	start := time.Now()
	if err := e.ProfileStart(hz, mode == "cpu"); err != nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("cannot start the profile: %w", err)}
	}
	timer := time.NewTimer(time.Duration(seconds) * time.Second)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.Context().Done(): // the client left: stop sampling now
	}
	data, err := e.ProfileStop()
	if err != nil {
		// PHP stopped or restarted meanwhile (a php_ini change), taking the profile.
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("the profile was lost: %w", err)}
	}
	if r.Context().Err() != nil {
		return nil
	}
	p, err := phpprofile.Build(data, start)
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="php.pprof"`)
	return p.Write(w) // gzipped protobuf, as go tool pprof reads it
}

// intParam reads an integer query parameter between lo and hi; def when absent.
func intParam(v, name string, def, lo, hi int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("%s must be an integer from %d to %d, not %q", name, lo, hi, v)}
	}
	return n, nil
}
