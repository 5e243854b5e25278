// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// target is what a request path resolves to.
type target int

const (
	targetNotFound target = iota
	targetPHP             // run script
	targetStatic          // let the file server send the file
	targetRedirect        // 308 to the path with a trailing slash
)

// resolver maps request paths to scripts the way FrankenPHP's php_server does: a
// directory holding the index redirects to its slash form, an existing static file is
// served, a script runs with PATH_INFO after the split extension, and anything else
// goes to the index file (the front controller).
type resolver struct {
	index      string   // index file name; "" when disabled
	split      []string // lower-case ASCII split extensions, like ".php"
	fileServer bool     // serve existing non-PHP files
	stat       func(string) (fs.FileInfo, error)
}

func (rs resolver) isFile(name string) bool {
	fi, err := rs.stat(name)
	return err == nil && fi.Mode().IsRegular()
}

// resolve returns the target for the decoded request path reqPath under root.
func (rs resolver) resolve(root, reqPath string) (target, script) {
	p := caddyhttp.NormalizedPath(reqPath, true)
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if pos := splitPos(p, rs.split); pos >= 0 {
		name := p[:pos]
		filename := caddyhttp.SanitizedPathJoin(root, name)
		if rs.isFile(filename) {
			return targetPHP, script{root: root, name: name, pathInfo: p[pos:], filename: filename}
		}
	} else {
		filename := caddyhttp.SanitizedPathJoin(root, p)
		if fi, err := rs.stat(filename); err == nil {
			if fi.IsDir() {
				if rs.index != "" {
					index := caddyhttp.SanitizedPathJoin(filename, rs.index)
					if rs.isFile(index) {
						if !strings.HasSuffix(p, "/") {
							return targetRedirect, script{}
						}
						return targetPHP, script{root: root, name: path.Join(p, rs.index), filename: index}
					}
				}
				if rs.fileServer && strings.HasSuffix(p, "/") {
					return targetStatic, script{}
				}
			} else if rs.fileServer && fi.Mode().IsRegular() {
				return targetStatic, script{}
			}
		}
	}
	if rs.index != "" {
		index := caddyhttp.SanitizedPathJoin(root, rs.index)
		if rs.isFile(index) {
			return targetPHP, script{root: root, name: "/" + rs.index, filename: index}
		}
	}
	return targetNotFound, script{}
}

// splitPos returns the end of the first split extension in p that ends a path
// segment, or -1. Matching is ASCII case-insensitive and never matches a byte at or
// above 0x80, so Unicode look-alikes and case folding that changes byte lengths
// cannot select a different file (CVE-2026-24895, CVE-2026-45062).
func splitPos(p string, exts []string) int {
	best := -1
	for _, ext := range exts {
		n := len(ext)
		for i := 0; i+n <= len(p); i++ {
			if best >= 0 && i+n >= best {
				break
			}
			if (i+n == len(p) || p[i+n] == '/') && asciiEqualFold(p[i:i+n], ext) {
				best = i + n
				break
			}
		}
	}
	return best
}

func asciiEqualFold(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// normalizeSplit lower-cases split extensions; non-ASCII ones are refused.
func normalizeSplit(exts []string) ([]string, bool) {
	out := make([]string, 0, len(exts))
	for _, e := range exts {
		for i := 0; i < len(e); i++ {
			if e[i] >= utf8.RuneSelf {
				return nil, false
			}
		}
		if e != "" {
			out = append(out, strings.ToLower(e))
		}
	}
	return out, true
}

var osStat = os.Stat
