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

func TestDebugTriggersAreOffUntilTheConfigTurnsThemOn(t *testing.T) {
	xdebug := &App{PHPIni: PHPIni{"zend_extension": {"opcache", "/usr/lib/php/xdebug.so"}}}
	if got := xdebug.debugTriggers(); got != nil {
		t.Errorf("Xdebug loaded, triggers not turned on: none, got %v", got)
	}
	if got := (&App{DebugTriggers: []string{"auto"}}).debugTriggers(); got != nil {
		t.Errorf("auto with no debugger loaded: none, got %v", got)
	}
	xdebug.DebugTriggers = []string{"auto"}
	if got := xdebug.debugTriggers(); got == nil || !reflect.DeepEqual(got.names, debuggers[0].triggers) || got.value != "" {
		t.Errorf("auto with Xdebug loaded: %v", got)
	}
	spx := &App{PHPIni: PHPIni{"extension": {"spx"}}, DebugTriggers: []string{"auto"}, DebugTriggerValue: "s3cret"}
	if got := spx.debugTriggers(); got == nil || !reflect.DeepEqual(got.names, []string{"SPX_ENABLED", "SPX_KEY"}) || got.value != "s3cret" {
		t.Errorf("auto with SPX loaded: %v", got)
	}
	xdebug.DebugTriggers = []string{"off"}
	if got := xdebug.debugTriggers(); got != nil {
		t.Errorf("off: %v", got)
	}
	spx.DebugTriggers = []string{"MY_TRIGGER"}
	if got := spx.debugTriggers(); got == nil || !reflect.DeepEqual(got.names, []string{"MY_TRIGGER"}) {
		t.Errorf("a list of names: %v", got)
	}
	for _, bad := range [][]string{{"off", "X"}, {"auto", "X"}, {""}, {"A B"}, {"A=1"}} {
		if err := (&App{DebugTriggers: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "debug_triggers") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestATriggerIsACookieAQueryParameterAHeaderOrAFormField(t *testing.T) {
	triggers := &debugTriggers{names: []string{"XDEBUG_SESSION", "X-Blackfire-Query"}}
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
		// CGI drops a header whose name has '_': PHP would never see this one.
		{"header with '_'", get("/app", "XDEBUG_SESSION", "1"), false},
		{"another cookie", get("/app", "Cookie", "XDEBUG=1"), false},
	} {
		if got := triggers.carriedBy(tc.r); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// With a value, only a trigger carrying it counts, wherever it is.
	secret := &debugTriggers{names: triggers.names, value: "s3cret"}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"query, other value", get("/app?XDEBUG_SESSION=PHPSTORM"), false},
		{"query, no value", get("/app?XDEBUG_SESSION"), false},
		{"query, the value", get("/app?XDEBUG_SESSION=s3cret"), true},
		{"query, the value second", get("/app?XDEBUG_SESSION=x&XDEBUG_SESSION=s3cret"), true},
		{"cookie, other value", get("/app", "Cookie", "XDEBUG_SESSION=vscode"), false},
		{"cookie, the value", get("/app", "Cookie", "XDEBUG_SESSION=s3cret"), true},
		{"header, other value", get("/app", "X-Blackfire-Query", "signature=x"), false},
		{"header, the value", get("/app", "X-Blackfire-Query", "s3cret"), true},
		{"prefix of the value", get("/app?XDEBUG_SESSION=s3cre"), false},
	} {
		if got := secret.carriedBy(tc.r); got != tc.want {
			t.Errorf("with a value, %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	post := func(body string) *http.Request {
		r := httptest.NewRequest("POST", "/app", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	for body, want := range map[string]bool{"a=1&XDEBUG_SESSION=1": true, "a=1&b=2": false} {
		r := post(body)
		if got := triggers.carriedBy(r); got != want {
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
	if triggers.carriedBy(short) {
		t.Error("a short body carries no trigger")
	}
	if _, err := io.ReadAll(short.Body); err != io.ErrUnexpectedEOF {
		t.Errorf("the short body's read ends with %v", err)
	}
}
