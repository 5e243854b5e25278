// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Debugging and profiling a worker app. Debuggers and profilers (Xdebug, SPX, Blackfire)
// decide at request startup whether to act on a request, from a trigger it carries; a
// worker script starts its request once, at boot, so they never see a later request's
// trigger. A request to an HTTP worker that carries a debug trigger therefore runs the
// worker script in a request of its own, on a classic thread: a full request startup
// with that request's superglobals, the app booted for it, frankenphp_handle_request()
// serving it once and returning false, and a full request shutdown, as under php-fpm.
// Requests without a trigger are served by the booted workers as always.

// debuggers names the extensions (by a part of their file name in php_ini's extension
// and zend_extension lines) that act on triggers, with the triggers they take: names
// looked up as a cookie, a query parameter, a form field or a request header.
var debuggers = []struct {
	extension string
	triggers  []string
}{
	{"xdebug", []string{"XDEBUG_SESSION", "XDEBUG_SESSION_START", "XDEBUG_TRIGGER", "XDEBUG_PROFILE", "XDEBUG_TRACE"}},
	{"spx", []string{"SPX_ENABLED", "SPX_KEY"}},
	{"blackfire", []string{"X-Blackfire-Query"}},
	{"tideways", []string{"X-Tideways-Profiler", "_tideways"}},
}

// defaultDebugTriggers are the triggers of the debuggers and profilers php_ini loads.
func defaultDebugTriggers(ini PHPIni) []string {
	var triggers []string
	for _, key := range []string{"extension", "zend_extension"} {
		for _, file := range ini[key] {
			name := strings.ToLower(path.Base(file))
			for _, d := range debuggers {
				if strings.Contains(name, d.extension) {
					triggers = append(triggers, d.triggers...)
				}
			}
		}
	}
	return triggers
}

// debugTriggers is the triggers this config routes on (none: every worker request goes
// to its worker).
func (a *App) debugTriggers() []string {
	switch {
	case len(a.DebugTriggers) == 1 && a.DebugTriggers[0] == "off":
		return nil
	case len(a.DebugTriggers) > 0:
		return a.DebugTriggers
	default:
		return defaultDebugTriggers(a.PHPIni)
	}
}

// maxTriggerForm is the largest form body looked into for a trigger field; the body
// is read before the request goes to PHP either way (request.Site.Serve).
const maxTriggerForm = 64 << 10

// carriesTrigger tells whether r carries one of triggers: a cookie, a query parameter,
// a header or (in a small url-encoded form body) a field of that name.
func carriesTrigger(r *http.Request, triggers []string) bool {
	query := r.URL.Query()
	for _, t := range triggers {
		if _, err := r.Cookie(t); err == nil {
			return true
		}
		if query.Has(t) || r.Header.Get(t) != "" {
			return true
		}
	}
	if r.Method != http.MethodPost || r.ContentLength <= 0 || r.ContentLength > maxTriggerForm || r.Body == nil ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return false
	}
	// Read whole and put back: PHP reads the same bytes.
	body := make([]byte, r.ContentLength)
	n, err := io.ReadFull(r.Body, body)
	r.Body = readBack{Reader: io.MultiReader(bytes.NewReader(body[:n]), errorReader{err}), Closer: r.Body}
	if err != nil {
		return false
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return false
	}
	for _, t := range triggers {
		if form.Has(t) {
			return true
		}
	}
	return false
}

// readBack is a request body read ahead, then read again from its bytes.
type readBack struct {
	io.Reader
	io.Closer
}

// errorReader ends a body read back with the error its first read met (nil: io.EOF).
type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) {
	if e.err == nil {
		return 0, io.EOF
	}
	return 0, e.err
}
