// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

// The fixed fields that start every request (php_worker_field in php_worker.h).
// buildRequest writes them in this order; TestBuildRequestVariables checks it.
const (
	fieldMethod         = C.PHP_WORKER_FIELD_METHOD
	fieldRequestURI     = C.PHP_WORKER_FIELD_REQUEST_URI
	fieldQueryString    = C.PHP_WORKER_FIELD_QUERY_STRING
	fieldContentType    = C.PHP_WORKER_FIELD_CONTENT_TYPE
	fieldScriptFilename = C.PHP_WORKER_FIELD_SCRIPT_FILENAME
	fieldPathTranslated = C.PHP_WORKER_FIELD_PATH_TRANSLATED
	fieldCookie         = C.PHP_WORKER_FIELD_COOKIE
	fieldAuthorization  = C.PHP_WORKER_FIELD_AUTHORIZATION
	fieldProtocol       = C.PHP_WORKER_FIELD_PROTOCOL
	fieldCount          = C.PHP_WORKER_FIELD_COUNT
)

// requestBuffer is a request in the layout php_worker_request_submit reads: every
// string NUL-terminated in one block, read-ahead body at its end, and (offset, length)
// spans. It holds no Go pointers, so cgo lets us pass it as is.
type requestBuffer struct {
	strings       []byte
	spans         []uint32
	pairs         int
	envPairs      int
	bodyLen       int
	contentLength int64
}

var requestBuffers = sync.Pool{New: func() any {
	return &requestBuffer{strings: make([]byte, 0, 4096), spans: make([]uint32, 0, 256)}
}}

func getRequestBuffer() *requestBuffer {
	b := requestBuffers.Get().(*requestBuffer)
	b.strings, b.spans = b.strings[:0], b.spans[:0]
	b.pairs, b.envPairs, b.bodyLen, b.contentLength = 0, 0, 0, -1
	return b
}

func putRequestBuffer(b *requestBuffer) {
	if cap(b.strings) <= 1<<20 {
		requestBuffers.Put(b)
	}
}

func (b *requestBuffer) add(s string) {
	b.spans = append(b.spans, uint32(len(b.strings)), uint32(len(s)))
	b.strings = append(b.strings, s...)
	b.strings = append(b.strings, 0)
}

func (b *requestBuffer) pair(name, value string) {
	b.add(name)
	b.add(value)
	b.pairs++
}

// headerPair adds HTTP_<NAME> for a request header, converting the name in place.
func (b *requestBuffer) headerPair(field string, values []string) {
	start := len(b.strings)
	b.strings = append(b.strings, "HTTP_"...)
	b.strings = append(b.strings, field...)
	for i := start + 5; i < len(b.strings); i++ {
		switch c := b.strings[i]; {
		case c >= 'a' && c <= 'z':
			b.strings[i] = c - ('a' - 'A')
		case c == '-':
			b.strings[i] = '_'
		}
	}
	b.spans = append(b.spans, uint32(start), uint32(len(b.strings)-start))
	b.strings = append(b.strings, 0)
	switch {
	case len(values) == 1:
		b.add(values[0])
	case field == "Cookie":
		b.add(strings.Join(values, "; "))
	default:
		b.add(strings.Join(values, ", "))
	}
	b.pairs++
}

// script is where a request goes in the document root.
type script struct {
	root     string // absolute document root
	name     string // SCRIPT_NAME, from the root, with a leading slash
	pathInfo string // PATH_INFO
	filename string // SCRIPT_FILENAME, absolute
}

// buildRequest writes the CGI variables of r for s: the fixed fields, then $_SERVER
// in the order php-fpm and FrankenPHP give them, then the configured env lists, later
// ones winning.
func buildRequest(b *requestBuffer, r *http.Request, s script, repl *caddy.Replacer, envs ...[][2]string) {
	requestURI := r.RequestURI
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		requestURI = orig.URL.RequestURI()
	}
	pathTranslated := ""
	if s.pathInfo != "" {
		pathTranslated = caddyhttp.SanitizedPathJoin(s.root, s.pathInfo)
	}
	cookie := ""
	if c := r.Header["Cookie"]; len(c) == 1 {
		cookie = c[0]
	} else if len(c) > 1 {
		cookie = strings.Join(c, "; ")
	}
	contentType := r.Header.Get("Content-Type")

	b.add(r.Method)
	b.add(requestURI)
	b.add(r.URL.RawQuery)
	b.add(contentType)
	b.add(s.filename)
	b.add(pathTranslated)
	b.add(cookie)
	b.add(r.Header.Get("Authorization"))
	b.add(r.Proto)

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

	b.pair("GATEWAY_INTERFACE", "CGI/1.1")
	b.pair("SERVER_SOFTWARE", "Caddy php_worker")
	b.pair("SERVER_PROTOCOL", r.Proto)
	b.pair("SERVER_NAME", host)
	b.pair("SERVER_PORT", serverPort)
	if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if tcp, ok := addr.(*net.TCPAddr); ok {
			b.pair("SERVER_ADDR", tcp.IP.String())
		}
	}
	b.pair("REMOTE_ADDR", ip)
	b.pair("REMOTE_HOST", ip)
	b.pair("REMOTE_PORT", port)
	if repl != nil {
		if user, _ := repl.GetString("http.auth.user.id"); user != "" {
			b.pair("REMOTE_USER", user)
		}
	}
	b.pair("REQUEST_SCHEME", scheme)
	b.pair("REQUEST_METHOD", r.Method)
	b.pair("REQUEST_URI", requestURI)
	b.pair("QUERY_STRING", r.URL.RawQuery)
	b.pair("DOCUMENT_ROOT", s.root)
	b.pair("DOCUMENT_URI", s.name)
	b.pair("SCRIPT_NAME", s.name)
	b.pair("SCRIPT_FILENAME", s.filename)
	b.pair("PATH_INFO", s.pathInfo)
	if pathTranslated != "" {
		b.pair("PATH_TRANSLATED", pathTranslated)
	}
	b.pair("PHP_SELF", s.name+s.pathInfo)
	b.pair("CONTENT_TYPE", contentType)
	contentLength := r.Header.Get("Content-Length")
	if contentLength == "" && r.ContentLength < 0 && b.contentLength >= 0 {
		contentLength = strconv.FormatInt(b.contentLength, 10) // a chunked body, buffered whole
	}
	b.pair("CONTENT_LENGTH", contentLength)
	if r.TLS != nil {
		b.pair("HTTPS", "on")
		addTLSVars(b, r.TLS)
	} else {
		b.pair("HTTPS", "")
	}
	b.pair("HTTP_HOST", r.Host)
	for field, values := range r.Header {
		// Host comes from r.Host above. Proxy must never become HTTP_PROXY (httpoxy,
		// CVE-2016-5385). A name with '_' or '.' would collide with its '-' twin once
		// PHP registers it ('.' becomes '_'): X_Forwarded_For or X.Forwarded-For
		// spoofing X-Forwarded-For. It is dropped.
		if field == "Host" || field == "Proxy" || strings.ContainsAny(field, "_.") {
			continue
		}
		b.headerPair(field, values)
	}
	for _, env := range envs {
		for _, kv := range env {
			value := kv[1]
			if repl != nil && hasPlaceholder(value) {
				value = repl.ReplaceAll(value, "")
			}
			b.pair(kv[0], value)
		}
		b.envPairs += len(env)
	}
}

func addTLSVars(b *requestBuffer, state *tls.ConnectionState) {
	switch state.Version {
	case tls.VersionTLS10:
		b.pair("SSL_PROTOCOL", "TLSv1")
	case tls.VersionTLS11:
		b.pair("SSL_PROTOCOL", "TLSv1.1")
	case tls.VersionTLS12:
		b.pair("SSL_PROTOCOL", "TLSv1.2")
	case tls.VersionTLS13:
		b.pair("SSL_PROTOCOL", "TLSv1.3")
	}
	for _, cs := range caddytls.SupportedCipherSuites() {
		if cs.ID == state.CipherSuite {
			b.pair("SSL_CIPHER", cs.Name)
			break
		}
	}
}

// checkEnv refuses env names and values that no environment variable can have: an
// empty name, a name with '=', or a NUL anywhere.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("env %q: a name must be non-empty without '=' or NUL, and a value without NUL", k)
		}
	}
	return nil
}

// hasPlaceholder reports whether an env value holds a Caddy placeholder, replaced per
// request.
func hasPlaceholder(value string) bool {
	return strings.IndexByte(value, '{') >= 0
}

// bootRequest is the request a worker script sees while it boots and between requests,
// written by buildRequest like every other: a GET of the script from its own folder
// (what FrankenPHP gives its workers). The pool's env comes with the spec; the values
// with placeholders are here unreplaced (there is no request to replace them from).
func (w *WorkerConfig) bootRequest() bootSpec {
	dir, base := filepath.Split(w.FileName)
	uri := "/" + base
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: uri}, RequestURI: uri, Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
	b := getRequestBuffer()
	defer putRequestBuffer(b)
	buildRequest(b, r, script{root: filepath.Clean(dir), name: uri, filename: w.FileName}, nil, w.requestEnv)
	return b.spec()
}

// bootSpec is a requestBuffer as JSON, for the worker spec (rust-core's BootRequest).
type bootSpec struct {
	Fields   []string    `json:"fields"`
	Vars     [][2]string `json:"vars"`
	EnvPairs int         `json:"env_pairs"`
}

// spec reads the buffer's strings back: its fields, then its pairs.
func (b *requestBuffer) spec() bootSpec {
	str := func(i int) string {
		off, n := b.spans[2*i], b.spans[2*i+1]
		return string(b.strings[off : off+n])
	}
	out := bootSpec{Fields: make([]string, fieldCount), Vars: make([][2]string, b.pairs), EnvPairs: b.envPairs}
	for i := range out.Fields {
		out.Fields[i] = str(i)
	}
	for i := range out.Vars {
		out.Vars[i] = [2]string{str(fieldCount + 2*i), str(fieldCount + 2*i + 1)}
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
