// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"testing"

	"github.com/php-worker/php_worker/go-module/internal/core"
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
	s := Script{Root: "/srv", Name: "/index.php", Filename: "/srv/index.php"}
	b.ReportAllocs()
	for b.Loop() {
		buf := core.GetRequestBuffer()
		BuildRequest(buf, r, s, nil, env)
		core.PutRequestBuffer(buf)
	}
}

func BenchmarkResolve(b *testing.B) {
	rs := Resolver{index: "index.php", split: []string{".php"}, fileServer: true,
		stat: fakeFS("/srv/index.php", "/srv/app.php")}
	b.ReportAllocs()
	for b.Loop() {
		rs.Resolve("/srv", "/users/42")
	}
}
