// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/php-worker/php_worker/go-module/internal/core"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

// headerPair adds HTTP_<NAME> for a request header, converting the name in place.
func headerPair(b *core.RequestBuffer, field string, values []string) {
	start := len(b.Strings)
	b.Strings = append(b.Strings, "HTTP_"...)
	b.Strings = append(b.Strings, field...)
	for i := start + 5; i < len(b.Strings); i++ {
		switch c := b.Strings[i]; {
		case c >= 'a' && c <= 'z':
			b.Strings[i] = c - ('a' - 'A')
		case c == '-':
			b.Strings[i] = '_'
		}
	}
	b.Spans = append(b.Spans, uint32(start), uint32(len(b.Strings)-start))
	b.Strings = append(b.Strings, 0)
	switch {
	case len(values) == 1:
		b.Add(values[0])
	case field == "Cookie":
		b.Add(strings.Join(values, "; "))
	default:
		b.Add(strings.Join(values, ", "))
	}
	b.Pairs++
}

// Script is where a request goes in the document root.
type Script struct {
	Root     string // absolute document root
	Name     string // SCRIPT_NAME, from the root, with a leading slash
	PathInfo string // PATH_INFO
	Filename string // SCRIPT_FILENAME, absolute
}

// BuildRequest writes the CGI variables of r for s: the fixed fields, then $_SERVER
// in the order php-fpm and FrankenPHP give them, then the configured env lists, later
// ones winning.
func BuildRequest(b *core.RequestBuffer, r *http.Request, s Script, repl *caddy.Replacer, envs ...[][2]string) {
	requestURI := r.RequestURI
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		requestURI = orig.URL.RequestURI()
	}
	pathTranslated := ""
	if s.PathInfo != "" {
		pathTranslated = caddyhttp.SanitizedPathJoin(s.Root, s.PathInfo)
	}
	cookie := ""
	if c := r.Header["Cookie"]; len(c) == 1 {
		cookie = c[0]
	} else if len(c) > 1 {
		cookie = strings.Join(c, "; ")
	}
	contentType := r.Header.Get("Content-Type")

	b.Add(r.Method)
	b.Add(requestURI)
	b.Add(r.URL.RawQuery)
	b.Add(contentType)
	b.Add(s.Filename)
	b.Add(pathTranslated)
	b.Add(cookie)
	b.Add(r.Header.Get("Authorization"))
	b.Add(r.Proto)

	ip, port := splitRemoteAddr(r.RemoteAddr)
	host, serverPort, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if serverPort == "" {
		serverPort = "80"
		if r.TLS != nil {
			serverPort = "443"
		}
	}

	b.Pair("GATEWAY_INTERFACE", "CGI/1.1")
	b.Pair("SERVER_SOFTWARE", "Caddy php_worker")
	b.Pair("SERVER_PROTOCOL", r.Proto)
	b.Pair("SERVER_NAME", host)
	b.Pair("SERVER_PORT", serverPort)
	if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if tcp, ok := addr.(*net.TCPAddr); ok {
			b.Pair("SERVER_ADDR", tcp.IP.String())
		}
	}
	b.Pair("REMOTE_ADDR", ip)
	b.Pair("REMOTE_HOST", ip)
	b.Pair("REMOTE_PORT", port)
	// CGI's identity variables, present (empty) as under FrankenPHP: code written for
	// it reads them without a fallback. REMOTE_USER is the user Caddy authenticated
	// (basic_auth and the like), never a name the client claims in its Authorization
	// header (PHP_AUTH_USER has that).
	b.Pair("AUTH_TYPE", "")
	b.Pair("REMOTE_IDENT", "")
	if repl != nil {
		if user, _ := repl.GetString("http.auth.user.id"); user != "" {
			b.Pair("REMOTE_USER", user)
		}
	}
	b.Pair("REQUEST_SCHEME", scheme)
	b.Pair("REQUEST_METHOD", r.Method)
	b.Pair("REQUEST_URI", requestURI)
	b.Pair("QUERY_STRING", r.URL.RawQuery)
	b.Pair("DOCUMENT_ROOT", s.Root)
	b.Pair("DOCUMENT_URI", s.Name)
	b.Pair("SCRIPT_NAME", s.Name)
	b.Pair("SCRIPT_FILENAME", s.Filename)
	b.Pair("PATH_INFO", s.PathInfo)
	if pathTranslated != "" {
		b.Pair("PATH_TRANSLATED", pathTranslated)
	}
	b.Pair("PHP_SELF", s.Name+s.PathInfo)
	b.Pair("CONTENT_TYPE", contentType)
	contentLength := r.Header.Get("Content-Length")
	if contentLength == "" && r.ContentLength < 0 && b.ContentLength >= 0 {
		contentLength = strconv.FormatInt(b.ContentLength, 10) // a chunked body, buffered whole
	}
	b.Pair("CONTENT_LENGTH", contentLength)
	if r.TLS != nil {
		b.Pair("HTTPS", "on")
		addTLSVars(b, r.TLS)
	} else {
		// Present and empty over plain HTTP, as under FrankenPHP.
		b.Pair("HTTPS", "")
		b.Pair("SSL_PROTOCOL", "")
		b.Pair("SSL_CIPHER", "")
	}
	b.Pair("HTTP_HOST", r.Host)
	for field, values := range r.Header {
		// Host comes from r.Host above. Proxy must never become HTTP_PROXY (httpoxy,
		// CVE-2016-5385). A name with '_' or '.' would collide with its '-' twin once
		// PHP registers it ('.' becomes '_'): X_Forwarded_For or X.Forwarded-For
		// spoofing X-Forwarded-For. It is dropped.
		if field == "Host" || field == "Proxy" || strings.ContainsAny(field, "_.") {
			continue
		}
		headerPair(b, field, values)
	}
	for _, env := range envs {
		for _, kv := range env {
			value := kv[1]
			if repl != nil && HasPlaceholder(value) {
				value = repl.ReplaceAll(value, "")
			}
			b.Pair(kv[0], value)
		}
		b.EnvPairs += len(env)
	}
}

func addTLSVars(b *core.RequestBuffer, state *tls.ConnectionState) {
	switch state.Version {
	case tls.VersionTLS10:
		b.Pair("SSL_PROTOCOL", "TLSv1")
	case tls.VersionTLS11:
		b.Pair("SSL_PROTOCOL", "TLSv1.1")
	case tls.VersionTLS12:
		b.Pair("SSL_PROTOCOL", "TLSv1.2")
	case tls.VersionTLS13:
		b.Pair("SSL_PROTOCOL", "TLSv1.3")
	}
	for _, cs := range caddytls.SupportedCipherSuites() {
		if cs.ID == state.CipherSuite {
			b.Pair("SSL_CIPHER", cs.Name)
			break
		}
	}
}

// CheckEnv refuses env names and values that no environment variable can have: an
// empty name, a name with '=', or a NUL anywhere.
func CheckEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("env %q: a name must be non-empty without '=' or NUL, and a value without NUL", k)
		}
	}
	return nil
}

// HasPlaceholder reports whether an env value holds a Caddy placeholder, replaced per
// request.
func HasPlaceholder(value string) bool {
	return strings.IndexByte(value, '{') >= 0
}

// BootRequest is the request a worker script (filename) sees while it boots and
// between requests, written by BuildRequest like every other: a GET of the script from
// its own folder (what FrankenPHP gives its workers). The pool's env comes with the
// spec; env's values with placeholders are here unreplaced (there is no request to
// replace them from).
func BootRequest(filename string, env [][2]string) BootSpec {
	dir, base := filepath.Split(filename)
	uri := "/" + base
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: uri}, RequestURI: uri, Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
	b := core.GetRequestBuffer()
	defer core.PutRequestBuffer(b)
	BuildRequest(b, r, Script{Root: filepath.Clean(dir), Name: uri, Filename: filename}, nil, env)
	return bootSpec(b)
}

// BootSpec is a request buffer as JSON, for the worker spec (rust-core's BootRequest).
type BootSpec struct {
	Fields   []string    `json:"fields"`
	Vars     [][2]string `json:"vars"`
	EnvPairs int         `json:"env_pairs"`
}

// bootSpec reads the buffer's strings back: its fields, then its pairs.
func bootSpec(b *core.RequestBuffer) BootSpec {
	out := BootSpec{Fields: make([]string, core.FieldCount), Vars: make([][2]string, b.Pairs), EnvPairs: b.EnvPairs}
	for i := range out.Fields {
		out.Fields[i] = b.Span(i)
	}
	for i := range out.Vars {
		out.Vars[i] = [2]string{b.Span(core.FieldCount + 2*i), b.Span(core.FieldCount + 2*i + 1)}
	}
	return out
}

// splitRemoteAddr splits "ip:port" and "[ipv6]:port"; more lenient than
// net.SplitHostPort, so a malformed address never fails a request.
func splitRemoteAddr(addr string) (ip, port string) {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr[i:], ']') < 0 {
		ip, port = addr[:i], addr[i+1:]
	} else {
		ip = addr
	}
	return strings.TrimSuffix(strings.TrimPrefix(ip, "["), "]"), port
}
