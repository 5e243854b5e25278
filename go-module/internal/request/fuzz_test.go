// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

// Native fuzz targets. `go test` runs each one on its seeds (and on any corpus kept in
// testdata/fuzz/<Name>/); tests/fuzz.sh fuzzes each for a bounded time:
//
//	go test -run '^$' -fuzz '^FuzzResolve$' -fuzztime 30s .

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/textproto"
	"path"
	"strings"
	"testing"

	"github.com/php-worker/php_worker/go-module/internal/core"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"golang.org/x/net/http/httpguts"
)

// splitRef is splitPos written the slow, obvious way: the smallest end q of a segment
// prefix p[:q] (q == len(p) or p[q] == '/') whose last bytes are one of exts, compared
// byte by byte with only A-Z folded.
func splitRef(p string, exts []string) int {
	for q := 1; q <= len(p); q++ {
		if q < len(p) && p[q] != '/' {
			continue
		}
		for _, ext := range exts {
			if len(ext) <= q && asciiFoldRef(p[q-len(ext):q]) == ext {
				return q
			}
		}
	}
	return -1
}

// asciiFoldRef lower-cases A-Z and nothing else.
func asciiFoldRef(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// FuzzSplitPos checks the PATH_INFO split against splitRef: the same position for any
// path and extensions, the split ends a segment, and only ASCII letters fold.
func FuzzSplitPos(f *testing.F) {
	for _, seed := range []struct{ path, ext1, ext2 string }{
		{"/index.php", ".php", ""},
		{"/index.php/a/b", ".php", ""},
		{"/INDEX.PHP/x", ".php", ""},
		{"/a.phpx", ".php", ""},
		{"/a.phpx/b.php", ".php", ""},
		{"/a.php.txt", ".php", ""},
		{"/noext", ".php", ""},
		{"/\u023a.php", ".php", ""},
		{"/a\uff0ephp", ".php", ""},
		{"/a.\u24df\u24d7\u24df", ".php", ""},
		{"/a.phtml/x", ".php", ".phtml"},
		{"/a.php/b.phtml", ".phtml", ".php"},
		{"/a.P\u212aP/x", ".pkp", ""}, // KELVIN SIGN folds to k in Unicode, never here
	} {
		f.Add(seed.path, seed.ext1, seed.ext2)
	}
	f.Fuzz(func(t *testing.T, p, ext1, ext2 string) {
		exts, ok := NormalizeSplit([]string{ext1, ext2})
		if ok != (isASCII(ext1) && isASCII(ext2)) {
			t.Fatalf("normalizeSplit(%q, %q): ok = %v, want it exactly for ASCII extensions", ext1, ext2, ok)
		}
		if !ok {
			return
		}
		for _, e := range exts {
			if e == "" || e != asciiFoldRef(e) {
				t.Fatalf("normalizeSplit(%q, %q) = %q: not lower-case and non-empty", ext1, ext2, exts)
			}
		}
		// splitRef folds only A-Z against ASCII extensions, so a match is never on a
		// byte at or above 0x80.
		got, want := SplitPos(p, exts), splitRef(p, exts)
		if got != want {
			t.Fatalf("splitPos(%q, %q) = %d, want %d", p, exts, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// FuzzResolve resolves arbitrary decoded request paths against a document root on a
// fake file system where every name with a dot is a file and every other name is a
// directory. Invariants: no panic; nothing outside the root is ever looked at or
// returned; a script's name is a clean rooted path, SCRIPT_FILENAME is the root joined
// with it, and SCRIPT_NAME + PATH_INFO is the cleaned request path when the request
// names a script (the front controller gets no PATH_INFO).
func FuzzResolve(f *testing.F) {
	for _, p := range []string{
		"/", "/app.php", "/app.php/x/y", "/style.css", "/dir", "/dir/", "/assets/", "/assets",
		"/users/42", "/missing.php/x", "/../../etc/passwd", "/dir/../app.php", "//app.php",
		"", "*", "/a.php/../../b", "/a.PHP/%2e%2e/x", "/x/.php", "/.php", "/a.php//b/",
	} {
		f.Add(p, uint8(0))
		f.Add(p, uint8(7))
	}
	f.Fuzz(func(t *testing.T, reqPath string, mode uint8) {
		// Roots are absolute and clean (Provision makes them so), "/" included.
		root := [...]string{"/srv", "/", "/srv/www"}[int(mode)%3]
		index := [...]string{"index.php", "", "app.php"}[int(mode/3)%3]
		split := [][]string{{".php"}, {".php", ".phtml"}}[int(mode/9)%2]
		under := func(name string) bool {
			r := strings.TrimSuffix(root, "/")
			return name == r || strings.HasPrefix(name, r+"/")
		}
		escapes := func(name string) bool {
			if !under(name) {
				return true
			}
			rel := strings.TrimPrefix(name, strings.TrimSuffix(root, "/"))
			for _, seg := range strings.Split(rel, "/") {
				if seg == ".." {
					return true
				}
			}
			return false
		}
		var outside []string
		stat := func(name string) FileKind {
			if escapes(name) {
				outside = append(outside, name)
			}
			if strings.Contains(path.Base(name), ".") {
				return regularFile
			}
			return directory
		}
		rs := Resolver{index: index, split: split, fileServer: mode&0x40 != 0, stat: stat}
		kind, s := rs.Resolve(root, reqPath)
		if kind == TargetPHP && escapes(s.Filename) {
			t.Fatalf("resolve(%q) under %q runs %q (SCRIPT_NAME %q, PATH_INFO %q), outside the root",
				reqPath, root, s.Filename, s.Name, s.PathInfo)
		}
		if len(outside) > 0 {
			t.Fatalf("resolve(%q) under %q looked at %q, outside the root", reqPath, root, outside)
		}

		if kind != TargetPHP {
			if s != (Script{}) {
				t.Fatalf("resolve(%q) = %v with a script %+v", reqPath, kind, s)
			}
			return
		}
		// The request path cleaned as a rooted path: ".." never climbs above "/".
		cleaned := reqPath
		if cleaned == "" || cleaned[0] != '/' {
			cleaned = "/" + cleaned
		}
		cleaned = caddyhttp.NormalizedPath(cleaned, true)
		switch {
		case s.Root != root:
			t.Fatalf("resolve(%q): root %q, want %q", reqPath, s.Root, root)
		case s.Name == "" || s.Name[0] != '/' || path.Clean(s.Name) != s.Name:
			t.Fatalf("resolve(%q): SCRIPT_NAME %q is not a clean rooted path", reqPath, s.Name)
		case escapes(s.Filename):
			t.Fatalf("resolve(%q): SCRIPT_FILENAME %q is outside the root %q", reqPath, s.Filename, root)
		case path.Clean(s.Filename) != path.Clean(joinRoot(root, s.Name)):
			t.Fatalf("resolve(%q): SCRIPT_FILENAME %q is not root %q + SCRIPT_NAME %q", reqPath, s.Filename, root, s.Name)
		case s.PathInfo != "" && s.PathInfo[0] != '/':
			t.Fatalf("resolve(%q): PATH_INFO %q does not start with a slash", reqPath, s.PathInfo)
		}
		if pos := SplitPos(cleaned, split); pos >= 0 && s.Name == cleaned[:pos] {
			if s.Name+s.PathInfo != cleaned {
				t.Fatalf("resolve(%q): SCRIPT_NAME %q + PATH_INFO %q != cleaned path %q", reqPath, s.Name, s.PathInfo, cleaned)
			}
		} else if s.PathInfo != "" {
			t.Fatalf("resolve(%q): PATH_INFO %q for a script %q the path does not name", reqPath, s.PathInfo, s.Name)
		} else if s.Name != "/"+index && s.Name != path.Join(cleaned, index) {
			t.Fatalf("resolve(%q): script %q is neither the path's nor an index", reqPath, s.Name)
		}
	})
}

// FuzzBuildRequest builds $_SERVER from requests that Go's HTTP/1 server would accept
// (the request line and header block are parsed by http.ReadRequest and checked as
// net/http's server checks them; HTTP/2 and HTTP/3 validate names the same way), with
// an arbitrary remote address, TLS or not, and an arbitrary script. Invariants: no
// panic; the block is in the layout the Rust core checks (every span in bounds and
// NUL-terminated, fields then pairs); every variable name is non-empty, without NUL,
// '=' or control bytes; every request header but Host, Proxy and names with '_' gives
// exactly HTTP_<NAME> (upper case, '-' as '_') with its values joined, or nothing for a
// name with '.'; no two headers
// give the same $_SERVER key, neither as written nor as PHP registers it ('.' and ' '
// become '_'), and none gives HTTP_PROXY (httpoxy).
func FuzzBuildRequest(f *testing.F) {
	f.Add("POST", "http://example.com:8080/app.php/extra?a=1&b=2", "example.com:8080",
		"Content-Type: application/json\r\nContent-Length: 7\r\nCookie: a=1\r\nCookie: b=2\r\nX-Many: one\r\nX-Many: two\r\n"+
			"Proxy: http://evil\r\nX_Forwarded_For: spoofed\r\nX-Forwarded-For: 10.0.0.1\r\nAuthorization: Basic YTpi\r\n",
		"[2001:db8::1]:5555", false, "/app.php", "/extra")
	f.Add("GET", "https://example.com/", "example.com", "", "1.2.3.4:80", true, "/index.php", "")
	f.Add("GET", "/pretty/url?x=1", "example.com", "X-Requested-With: XMLHttpRequest\r\naccept-language: en\r\nAccept-Language: fr\r\n",
		"unix-socket", false, "/index.php", "")
	f.Add("OPTIONS", "*", "[::1]:443", "x-a.b: 1\r\nX-~!#$%&'*+^`|: 2\r\n", "[::1]", true, "/a.php", "/%00")
	f.Add("CONNECT", "example.com:443", "example.com:443", "", "", false, "/index.php", "")
	f.Fuzz(func(t *testing.T, method, target, host, headers, remoteAddr string, useTLS bool, name, pathInfo string) {
		raw := method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + headers + "\r\n"
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil || !acceptedByServer(r) {
			return
		}
		r.RemoteAddr = remoteAddr
		if useTLS {
			r.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, CipherSuite: tls.TLS_AES_128_GCM_SHA256}
		}
		ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, *r.Clone(ctx))
		ctx = context.WithValue(ctx, http.LocalAddrContextKey, net.Addr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}))
		r = r.WithContext(ctx)

		b := core.GetRequestBuffer()
		defer core.PutRequestBuffer(b)
		s := Script{Root: "/srv", Name: name, PathInfo: pathInfo, Filename: joinRoot("/srv", name)}
		env := [][2]string{{"APP_ENV", "x{no.such.placeholder}y"}}
		BuildRequest(b, r, s, caddy.NewReplacer(), env)

		// The layout, as rust-core/src/layout.rs checks it.
		if len(b.Spans) != 2*core.FieldCount+4*b.Pairs || b.EnvPairs != len(env) {
			t.Fatalf("%d spans for %d pairs (%d env)", len(b.Spans), b.Pairs, b.EnvPairs)
		}
		str := func(i int) string {
			off, n := int(b.Spans[2*i]), int(b.Spans[2*i+1])
			if off+n >= len(b.Strings) || b.Strings[off+n] != 0 {
				t.Fatalf("string %d (%d, %d) is out of bounds or not NUL-terminated in %d bytes", i, off, n, len(b.Strings))
			}
			return string(b.Strings[off : off+n])
		}
		if got := str(core.FieldMethod); got != r.Method {
			t.Fatalf("method field %q, want %q", got, r.Method)
		}
		if got := str(core.FieldProtocol); got != r.Proto {
			t.Fatalf("protocol field %q, want %q", got, r.Proto)
		}
		vars := map[string][]string{}
		for i := core.FieldCount; i < len(b.Spans)/2; i += 2 {
			n, v := str(i), str(i+1)
			if n == "" || strings.ContainsAny(n, "=\x00") || strings.IndexFunc(n, func(c rune) bool { return c <= ' ' || c == 0x7f }) >= 0 {
				t.Fatalf("invalid variable name %q", n)
			}
			vars[n] = append(vars[n], v)
		}
		if got := vars["HTTP_HOST"]; len(got) != 1 || got[0] != r.Host {
			t.Fatalf("HTTP_HOST = %q, want [%q]", got, r.Host)
		}
		if _, ok := vars["HTTP_PROXY"]; ok {
			t.Fatal("HTTP_PROXY came from a request header (httpoxy)")
		}
		if got := vars["PHP_SELF"]; len(got) != 1 || got[0] != name+pathInfo {
			t.Fatalf("PHP_SELF = %q, want %q", got, name+pathInfo)
		}
		if got := vars["APP_ENV"]; len(got) != 1 || got[0] != "xy" {
			t.Fatalf("APP_ENV = %q: the unknown placeholder was not replaced with nothing", got)
		}
		// PHP registers a name that is not plain ([A-Za-z0-9_-]) through
		// php_register_variable_safe, which turns ' ' and '.' into '_' (and cuts at
		// '['): two headers must not end up as the same $_SERVER key there.
		registered := map[string]string{}
		for n := range vars {
			if !strings.HasPrefix(n, "HTTP_") {
				continue
			}
			key := phpMangle(n)
			if other, dup := registered[key]; dup {
				t.Fatalf("variables %q and %q are both $_SERVER[%q] in PHP (headers %q)", other, n, key, r.Header)
			}
			registered[key] = n
		}
		if n, ok := registered["HTTP_PROXY"]; ok {
			t.Fatalf("variable %q is $_SERVER['HTTP_PROXY'] in PHP (httpoxy)", n)
		}
		fromHeaders := map[string]string{}
		for field, values := range r.Header {
			if field == "Host" || field == "Proxy" || strings.Contains(field, "_") {
				continue
			}
			v := "HTTP_" + strings.ToUpper(strings.ReplaceAll(field, "-", "_"))
			if other, dup := fromHeaders[v]; dup {
				t.Fatalf("headers %q and %q both give %s", other, field, v)
			}
			fromHeaders[v] = field
			sep := ", "
			if field == "Cookie" {
				sep = "; "
			}
			got, ok := vars[v]
			if !ok && strings.Contains(field, ".") {
				continue // PHP would register it as its '_' twin: dropping it is fine
			}
			if len(got) != 1 || got[0] != strings.Join(values, sep) {
				t.Fatalf("header %q: %s = %q, want [%q]", field, v, got, strings.Join(values, sep))
			}
		}
		for n, v := range vars {
			if !strings.HasPrefix(n, "HTTP_") || n == "HTTP_HOST" {
				continue
			}
			if _, ok := fromHeaders[n]; !ok {
				t.Fatalf("%s = %q comes from no header", n, v)
			}
			for _, c := range []byte(n) {
				if !(c == '_' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+.^`|~", c) >= 0) {
					t.Fatalf("%s: byte %q is not an upper-case token byte", n, c)
				}
			}
		}
	})
}

// phpMangle is the key php_register_variable_ex gives a variable name: leading spaces
// dropped, ' ' and '.' turned into '_', cut at '[' (the start of an array index).
func phpMangle(name string) string {
	name = strings.TrimLeft(name, " ")
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	return strings.NewReplacer(" ", "_", ".", "_").Replace(name)
}

// acceptedByServer applies the checks net/http's server makes after http.ReadRequest.
func acceptedByServer(r *http.Request) bool {
	if hosts := r.Header["Host"]; len(hosts) > 1 || len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return false
	}
	delete(r.Header, "Host")
	for name, values := range r.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return false
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// FuzzCanonicalName checks the header names PHP sends: no panic; "" exactly for an
// invalid name, else the canonical form of the same name (only the case changes);
// the same answer on every call, from the cache once it is there, and unaffected by
// the caller reusing its buffer.
func FuzzCanonicalName(f *testing.F) {
	for _, s := range []string{
		"content-type", "X-Custom-Thing", "x_underscore", "Bad Name", "", "X-Ctl\x01", "Caf\xc3\xa9",
		"set-cookie", "LOCATION", "x-a.b~c", "Name:", " lead", "trail ", "\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := string(b)
		name, _ := canonicalName(b)
		valid := httpguts.ValidHeaderFieldName(in)
		switch {
		case !valid && name != "":
			t.Fatalf("canonicalName(%q) = %q for an invalid name", in, name)
		case valid && name == "":
			t.Fatalf("canonicalName(%q) refused a valid name", in)
		case valid && (name != textproto.CanonicalMIMEHeaderKey(name) || !strings.EqualFold(name, in) || !httpguts.ValidHeaderFieldName(name)):
			t.Fatalf("canonicalName(%q) = %q: not the canonical form of the same name", in, name)
		}
		for i := range b {
			b[i] = '!' // the caller's buffer is reused for the next header
		}
		again, first := canonicalName([]byte(in))
		if again != name {
			t.Fatalf("canonicalName(%q) = %q, then %q", in, name, again)
		}
		if first {
			if m := headerNames.m.Load(); m == nil || len(*m) < maxCachedHeaderNames {
				t.Fatalf("canonicalName(%q): not cached after its first call, with room in the cache", in)
			}
		}
	})
}
