// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"crypto/subtle"
	"net/http"
	"path"
	"strings"

	"github.com/php-worker/php_worker/go-module/internal/request"
)

// Debugging and profiling a worker app. Debuggers and profilers (Xdebug, SPX, Blackfire)
// decide at request startup whether to act on a request, from a trigger it carries; a
// worker script starts its request once, at boot, so they never see a later request's
// trigger. A request to an HTTP worker that carries a debug trigger therefore runs the
// worker script in a request of its own, on a classic thread: a full request startup
// with that request's superglobals, the app booted for it, frankenphp_handle_request()
// serving it once and returning false, and a full request shutdown, as under php-fpm.
// Requests without a trigger are served by the booted workers as always.
//
// Such a request costs a boot of the whole app on the classic pool. So triggers are off
// until the config turns them on (debug_triggers), and a config can ask that a trigger
// carry a secret value (debug_trigger_value): a production server that loads Blackfire
// or Tideways for its own profiling does not let any client make it boot the app, and
// the agents' own checks (Blackfire's signed queries) run only after that boot.

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

// The debug_triggers values that are not trigger names.
const (
	triggersAuto = "auto" // the triggers of the debuggers php_ini loads
	triggersOff  = "off"  // none (the default)
)

// loadedDebuggerTriggers are the triggers of the debuggers and profilers php_ini loads.
func loadedDebuggerTriggers(ini PHPIni) []string {
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

// debugTriggers is what a config routes on: trigger names, and the value they must
// carry ("" for any).
type debugTriggers struct {
	names []string
	value string
}

// debugTriggers is the triggers this config routes on; nil when none (every worker
// request goes to its worker).
func (a *App) debugTriggers() *debugTriggers {
	var names []string
	switch {
	case len(a.DebugTriggers) == 0 || a.DebugTriggers[0] == triggersOff:
		return nil
	case a.DebugTriggers[0] == triggersAuto:
		names = loadedDebuggerTriggers(a.PHPIni)
	default:
		names = a.DebugTriggers
	}
	if len(names) == 0 {
		return nil
	}
	return &debugTriggers{names: names, value: a.DebugTriggerValue}
}

// maxTriggerForm is the largest form body looked into for a trigger field.
const maxTriggerForm = 64 << 10

// carriedBy tells whether r carries one of the triggers (with the required value): a
// cookie, a query parameter, a header or (in a small url-encoded form body) a field of
// that name. A header counts only when PHP would see it: CGI drops the headers whose
// name has '_' or '.', so XDEBUG_SESSION reaches PHP as a cookie, a query parameter or
// a form field, never as a header. Call it once r's body has its idle timeout
// (request.Site.WatchBody): the form is read here.
func (t *debugTriggers) carriedBy(r *http.Request) bool {
	query := r.URL.Query()
	for _, name := range t.names {
		if c, err := r.Cookie(name); err == nil && t.accepts(c.Value) {
			return true
		}
		if values, ok := query[name]; ok && t.acceptsAny(values) {
			return true
		}
		if !strings.ContainsAny(name, "_.") {
			if values := r.Header.Values(name); len(values) > 0 && t.acceptsAny(values) {
				return true
			}
		}
	}
	if r.Method != http.MethodPost {
		return false
	}
	form := request.PeekForm(r, maxTriggerForm)
	for _, name := range t.names {
		if values, ok := form[name]; ok && t.acceptsAny(values) {
			return true
		}
	}
	return false
}

// accepts tells whether a trigger's value is one that counts: any, or the configured
// secret (compared in constant time).
func (t *debugTriggers) accepts(value string) bool {
	return t.value == "" || subtle.ConstantTimeCompare([]byte(value), []byte(t.value)) == 1
}

func (t *debugTriggers) acceptsAny(values []string) bool {
	for _, v := range values {
		if t.accepts(v) {
			return true
		}
	}
	return false
}
