// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/php-worker/php_worker/go-module/internal/core"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// decode reads a requestBuffer back the way the Rust core does, after checking that
// every string is NUL-terminated.
func decode(t *testing.T, b *core.RequestBuffer) (fields []string, vars [][2]string) {
	t.Helper()
	for i := 0; i < len(b.Spans); i += 2 {
		if b.Strings[b.Spans[i]+b.Spans[i+1]] != 0 {
			t.Fatalf("string %d is not NUL-terminated", i/2)
		}
	}
	if len(b.Spans) != 2*core.FieldCount+4*b.Pairs {
		t.Fatalf("%d spans for %d pairs", len(b.Spans), b.Pairs)
	}
	spec := bootSpec(b)
	return spec.Fields, spec.Vars
}

func lookup(vars [][2]string, name string) (string, bool) {
	value, found := "", false
	for _, kv := range vars {
		if kv[0] == name {
			value, found = kv[1], true // later wins, as in PHP
		}
	}
	return value, found
}

func newTestRequest(method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, *r.Clone(ctx))
	return r.WithContext(ctx)
}

func TestBuildRequestVariables(t *testing.T) {
	r := newTestRequest("POST", "http://example.com:8080/app.php/extra?a=1&b=2")
	r.RemoteAddr = "[2001:db8::1]:5555"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Content-Length", "7")
	r.Header.Add("Cookie", "a=1")
	r.Header.Add("Cookie", "b=2")
	r.Header.Add("X-Many", "one")
	r.Header.Add("X-Many", "two")
	r.Header.Set("Proxy", "http://evil")
	r.Header["X_Forwarded_For"] = []string{"spoofed"}
	r.Header.Set("X-Forwarded-For", "10.0.0.1")
	r.Header.Set("Authorization", "Basic YTpi")

	b := core.GetRequestBuffer()
	s := Script{Root: "/srv", Name: "/app.php", PathInfo: "/extra", Filename: "/srv/app.php"}
	BuildRequest(b, r, s, caddy.NewReplacer(), [][2]string{{"APP_ENV", "prod"}}, [][2]string{{"SERVER_SOFTWARE", "custom"}})
	fields, vars := decode(t, b)

	wantFields := map[int]string{
		core.FieldMethod: "POST", core.FieldRequestURI: "/app.php/extra?a=1&b=2", core.FieldQueryString: "a=1&b=2",
		core.FieldContentType: "application/json", core.FieldScriptFilename: "/srv/app.php",
		core.FieldPathTranslated: "/srv/extra", core.FieldCookie: "a=1; b=2", core.FieldAuthorization: "Basic YTpi",
		core.FieldProtocol: "HTTP/1.1",
	}
	for i, want := range wantFields {
		if fields[i] != want {
			t.Errorf("field %d = %q, want %q", i, fields[i], want)
		}
	}
	for name, want := range map[string]string{
		"REQUEST_METHOD": "POST", "REQUEST_URI": "/app.php/extra?a=1&b=2", "QUERY_STRING": "a=1&b=2",
		"SCRIPT_NAME": "/app.php", "SCRIPT_FILENAME": "/srv/app.php", "PATH_INFO": "/extra",
		"PATH_TRANSLATED": "/srv/extra", "PHP_SELF": "/app.php/extra", "DOCUMENT_ROOT": "/srv",
		"DOCUMENT_URI": "/app.php", "SERVER_NAME": "example.com", "SERVER_PORT": "8080",
		"SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1", "REMOTE_ADDR": "2001:db8::1",
		"REMOTE_PORT": "5555", "REQUEST_SCHEME": "http", "HTTPS": "", "CONTENT_TYPE": "application/json",
		"CONTENT_LENGTH": "7", "HTTP_HOST": "example.com:8080", "HTTP_X_MANY": "one, two",
		"HTTP_X_FORWARDED_FOR": "10.0.0.1", "HTTP_COOKIE": "a=1; b=2", "APP_ENV": "prod",
		"SERVER_SOFTWARE": "custom",
	} {
		if got, ok := lookup(vars, name); !ok || got != want {
			t.Errorf("%s = %q (set: %v), want %q", name, got, ok, want)
		}
	}
	if _, ok := lookup(vars, "HTTP_PROXY"); ok {
		t.Error("HTTP_PROXY must never come from a request header (httpoxy)")
	}
	if b.EnvPairs != 2 {
		t.Errorf("envPairs = %d", b.EnvPairs)
	}
	// The configured env comes last, so it wins and getenv() finds it.
	last := vars[len(vars)-2:]
	if last[0][0] != "APP_ENV" || last[1][0] != "SERVER_SOFTWARE" {
		t.Errorf("env is not last: %v", last)
	}
}

func TestBuildRequestTLSAndDefaults(t *testing.T) {
	r := newTestRequest("GET", "https://example.com/")
	r.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, CipherSuite: tls.TLS_AES_128_GCM_SHA256}
	b := core.GetRequestBuffer()
	BuildRequest(b, r, Script{Root: "/srv", Name: "/index.php", Filename: "/srv/index.php"}, nil)
	_, vars := decode(t, b)
	for name, want := range map[string]string{
		"HTTPS": "on", "REQUEST_SCHEME": "https", "SERVER_PORT": "443", "SSL_PROTOCOL": "TLSv1.3",
		"SSL_CIPHER": "TLS_AES_128_GCM_SHA256", "PATH_INFO": "",
	} {
		if got, _ := lookup(vars, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, ok := lookup(vars, "PATH_TRANSLATED"); ok {
		t.Error("PATH_TRANSLATED is only set with a PATH_INFO (RFC 3875)")
	}
}

func TestBuildRequestOriginalURIAfterRewrite(t *testing.T) {
	r := newTestRequest("GET", "http://example.com/pretty/url?x=1")
	r.URL.Path = "/index.php" // what a rewrite would do
	r.RequestURI = "/index.php"
	b := core.GetRequestBuffer()
	BuildRequest(b, r, Script{Root: "/srv", Name: "/index.php", Filename: "/srv/index.php"}, nil)
	fields, vars := decode(t, b)
	if fields[core.FieldRequestURI] != "/pretty/url?x=1" {
		t.Errorf("REQUEST_URI field = %q, want the original", fields[core.FieldRequestURI])
	}
	if got, _ := lookup(vars, "REQUEST_URI"); got != "/pretty/url?x=1" {
		t.Errorf("REQUEST_URI = %q", got)
	}
}

func TestHeaderNamesAreConvertedInPlace(t *testing.T) {
	b := core.GetRequestBuffer()
	headerPair(b, "X-Requested-With", []string{"XMLHttpRequest"})
	headerPair(b, "accept-language", []string{"en", "fr"})
	if !bytes.Contains(b.Strings, []byte("HTTP_X_REQUESTED_WITH\x00XMLHttpRequest\x00")) ||
		!bytes.Contains(b.Strings, []byte("HTTP_ACCEPT_LANGUAGE\x00en, fr\x00")) {
		t.Fatalf("got %q", b.Strings)
	}
}

func TestSplitRemoteAddr(t *testing.T) {
	for in, want := range map[string][2]string{
		"1.2.3.4:80":  {"1.2.3.4", "80"},
		"[::1]:443":   {"::1", "443"},
		"[::1]":       {"::1", ""},
		"unix-socket": {"unix-socket", ""},
		"":            {"", ""},
		"1.2.3.4:":    {"1.2.3.4", ""},
	} {
		ip, port := splitRemoteAddr(in)
		if ip != want[0] || port != want[1] {
			t.Errorf("splitRemoteAddr(%q) = %q %q, want %q", in, ip, port, want)
		}
	}
}

func TestBootRequestIsAGetOfTheScriptWithThePerRequestEnv(t *testing.T) {
	file := "/srv/app/public/worker.php"
	requestEnv := [][2]string{{"APP_ENV", "{env.APP_ENV}"}, {"APP_HOST", "{http.request.host}"}}
	boot := BootRequest(file, requestEnv)
	if len(boot.Fields) != core.FieldCount || boot.Fields[core.FieldMethod] != "GET" || boot.Fields[core.FieldScriptFilename] != file ||
		boot.Fields[core.FieldRequestURI] != "/worker.php" || boot.Fields[core.FieldProtocol] != "HTTP/1.1" {
		t.Fatalf("fields %q", boot.Fields)
	}
	for name, want := range map[string]string{
		"REQUEST_METHOD": "GET", "SCRIPT_NAME": "/worker.php", "PHP_SELF": "/worker.php", "REQUEST_URI": "/worker.php",
		"SCRIPT_FILENAME": file, "DOCUMENT_ROOT": "/srv/app/public", "SERVER_SOFTWARE": "Caddy php_worker",
		"GATEWAY_INTERFACE": "CGI/1.1", "APP_ENV": "{env.APP_ENV}",
	} {
		if got, ok := lookup(boot.Vars, name); !ok || got != want {
			t.Errorf("%s = %q (set: %v), want %q", name, got, ok, want)
		}
	}
	env := boot.Vars[len(boot.Vars)-boot.EnvPairs:]
	if boot.EnvPairs != 2 || env[0] != requestEnv[0] || env[1] != requestEnv[1] {
		t.Errorf("the env with placeholders is the last pairs, unreplaced: %d, %q", boot.EnvPairs, env)
	}
}
