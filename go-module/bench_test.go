// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"testing"
)

// The Go side of the request path, without PHP: resolving the script and writing the
// CGI variables. Run with: go test -bench . -benchmem
func BenchmarkBuildRequest(b *testing.B) {
	r := newTestRequest("GET", "http://example.com/index.php?a=1")
	r.RemoteAddr = "127.0.0.1:5555"
	r.Header.Set("Accept", "text/html")
	r.Header.Set("Accept-Encoding", "gzip")
	r.Header.Set("User-Agent", "bench")
	env := [][2]string{{"APP_ENV", "prod"}}
	s := script{root: "/srv", name: "/index.php", filename: "/srv/index.php"}
	b.ReportAllocs()
	for b.Loop() {
		buf := getRequestBuffer()
		buildRequest(buf, r, s, nil, env)
		putRequestBuffer(buf)
	}
}

func BenchmarkResolve(b *testing.B) {
	rs := resolver{index: "index.php", split: []string{".php"}, fileServer: true,
		stat: fakeFS("/srv/index.php", "/srv/app.php")}
	b.ReportAllocs()
	for b.Loop() {
		rs.resolve("/srv", "/users/42")
	}
}
