// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestDebugTriggersFollowWhatPHPIniLoads(t *testing.T) {
	if got := (&App{}).debugTriggers(); got != nil {
		t.Errorf("no debugger loaded: no triggers, got %q", got)
	}
	xdebug := &App{PHPIni: PHPIni{"zend_extension": {"opcache", "/usr/lib/php/xdebug.so"}}}
	if got := xdebug.debugTriggers(); !reflect.DeepEqual(got, debuggers[0].triggers) {
		t.Errorf("Xdebug loaded: %q", got)
	}
	spx := &App{PHPIni: PHPIni{"extension": {"spx"}}}
	if got := spx.debugTriggers(); !reflect.DeepEqual(got, []string{"SPX_ENABLED", "SPX_KEY"}) {
		t.Errorf("SPX loaded: %q", got)
	}
	xdebug.DebugTriggers = []string{"off"}
	if got := xdebug.debugTriggers(); got != nil {
		t.Errorf("off: %q", got)
	}
	spx.DebugTriggers = []string{"MY_TRIGGER"}
	if got := spx.debugTriggers(); !reflect.DeepEqual(got, []string{"MY_TRIGGER"}) {
		t.Errorf("a list replaces the defaults: %q", got)
	}
	for _, bad := range [][]string{{"off", "X"}, {""}, {"A B"}, {"A=1"}} {
		if err := (&App{DebugTriggers: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "debug_triggers") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestATriggerIsACookieAQueryParameterAHeaderOrAFormField(t *testing.T) {
	triggers := []string{"XDEBUG_SESSION", "X-Blackfire-Query"}
	get := func(target string, header ...string) *http.Request {
		r := httptest.NewRequest("GET", target, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"none", get("/app?x=1"), false},
		{"query", get("/app?XDEBUG_SESSION=PHPSTORM"), true},
		{"query without a value", get("/app?XDEBUG_SESSION"), true},
		{"cookie", get("/app", "Cookie", "a=b; XDEBUG_SESSION=vscode"), true},
		{"header", get("/app", "X-Blackfire-Query", "signature=x"), true},
		{"another cookie", get("/app", "Cookie", "XDEBUG=1"), false},
	} {
		if got := carriesTrigger(tc.r, triggers); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	post := func(body string) *http.Request {
		r := httptest.NewRequest("POST", "/app", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	for body, want := range map[string]bool{"a=1&XDEBUG_SESSION=1": true, "a=1&b=2": false} {
		r := post(body)
		if got := carriesTrigger(r, triggers); got != want {
			t.Errorf("form %q: %v, want %v", body, got, want)
		}
		// PHP reads the same body afterwards.
		if again, err := io.ReadAll(r.Body); err != nil || string(again) != body {
			t.Errorf("form %q read back as %q, %v", body, again, err)
		}
	}
	// A body that ends early keeps its error for PHP's read (a 400, not a silent cut).
	short := post("a=1")
	short.ContentLength = 10
	if carriesTrigger(short, triggers) {
		t.Error("a short body carries no trigger")
	}
	if _, err := io.ReadAll(short.Body); err != io.ErrUnexpectedEOF {
		t.Errorf("the short body's read ends with %v", err)
	}
}
