// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"net/url"
	"path"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Target is what a request path resolves to.
type Target int

const (
	TargetNotFound Target = iota
	TargetPHP             // run script
	TargetStatic          // let the file server send the file
	TargetRedirect        // 308 to the path with a trailing slash
)

// Resolver maps request paths to scripts the way FrankenPHP's php_server does: a
// directory holding the index redirects to its slash form, an existing static file is
// served, a script runs with PATH_INFO after the split extension, and anything else
// goes to the index file (the front controller).
type Resolver struct {
	index      string   // index file name; "" when disabled
	split      []string // lower-case ASCII split extensions, like ".php"
	fileServer bool     // serve existing non-PHP files
	stat       func(string) FileKind
	// known are files known to exist without a stat: the worker scripts (set once, read
	// by every request).
	known map[string]bool
}

// NewResolver is a Resolver with an index file ("" for none), split extensions
// (NormalizeSplit's), whether existing static files are served, and the files known to
// exist without a stat (running worker scripts; nil for none).
func NewResolver(index string, split []string, fileServer bool, known map[string]bool) Resolver {
	return Resolver{index: index, split: split, fileServer: fileServer, stat: StatKind, known: known}
}

// Split is the resolver's split extensions.
func (rs Resolver) Split() []string { return rs.split }

// FileKind is what a path names on disk.
type FileKind uint8

const (
	missing FileKind = iota
	regularFile
	directory
	otherFile
)

// StatKind stats a path without allocating (os.Stat allocates a FileInfo per call).
func StatKind(name string) FileKind {
	var st syscall.Stat_t
	if syscall.Stat(name, &st) != nil {
		return missing
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return regularFile
	case syscall.S_IFDIR:
		return directory
	}
	return otherFile
}

func (rs Resolver) isFile(name string) bool {
	if rs.known[name] {
		return true
	}
	return rs.stat(name) == regularFile
}

// joinRoot joins a path cleaned by caddyhttp.NormalizedPath (rooted, no dot segments)
// to the root without the allocations of filepath.Join.
func joinRoot(root, p string) string {
	if p == "" || p == "/" {
		return root
	}
	if strings.HasSuffix(root, "/") {
		return root + p[1:]
	}
	return root + p
}

// Resolve returns the target for the decoded request path reqPath under root.
func (rs Resolver) Resolve(root, reqPath string) (Target, Script) {
	// Rooted before it is cleaned: cleaning a relative path (a rewrite can leave one)
	// keeps its leading "..", which would climb above the root.
	if reqPath == "" || reqPath[0] != '/' {
		reqPath = "/" + reqPath
	}
	p := caddyhttp.NormalizedPath(reqPath, true)
	if pos := SplitPos(p, rs.split); pos >= 0 {
		name := p[:pos]
		filename := joinRoot(root, name)
		if rs.isFile(filename) {
			return TargetPHP, Script{Root: root, Name: name, PathInfo: p[pos:], Filename: filename}
		}
	} else {
		filename := joinRoot(root, strings.TrimSuffix(p, "/"))
		if kind := rs.stat(filename); kind != missing {
			if kind == directory {
				if rs.index != "" {
					name := path.Join(p, rs.index)
					index := joinRoot(root, name)
					if rs.isFile(index) {
						if !strings.HasSuffix(p, "/") {
							return TargetRedirect, Script{}
						}
						return TargetPHP, Script{Root: root, Name: name, Filename: index}
					}
				}
				if rs.fileServer && strings.HasSuffix(p, "/") {
					return TargetStatic, Script{}
				}
			} else if rs.fileServer && kind == regularFile {
				return TargetStatic, Script{}
			}
		}
	}
	if rs.index != "" {
		index := joinRoot(root, "/"+rs.index)
		if rs.isFile(index) {
			return TargetPHP, Script{Root: root, Name: "/" + rs.index, Filename: index}
		}
	}
	return TargetNotFound, Script{}
}

// RedirectLocation is the Location of the redirect a directory's path without its
// trailing slash gets (TargetRedirect): the path as Resolve cleaned it, escaped, with the
// slash and the query. Never the path as the client wrote it: "//evil.example/%2e%2e/blog"
// names the docroot's blog/ once cleaned, but echoed back it is a network-path reference
// that a browser follows to another host. A cleaned path starts with exactly one slash,
// and escaping turns a backslash (which browsers read as a slash) into %5C.
func RedirectLocation(reqPath, rawQuery string) string {
	p := caddyhttp.NormalizedPath("/"+strings.TrimLeft(reqPath, "/"), true)
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	loc := (&url.URL{Path: p}).EscapedPath()
	if rawQuery != "" {
		loc += "?" + rawQuery
	}
	return loc
}

// SplitPos returns the end of the first split extension in p that ends a path
// segment, or -1. Matching is ASCII case-insensitive and never matches a byte at or
// above 0x80, so Unicode look-alikes and case folding that changes byte lengths
// cannot select a different file (CVE-2026-24895, CVE-2026-45062).
func SplitPos(p string, exts []string) int {
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

// NormalizeSplit lower-cases split extensions; non-ASCII ones are refused.
func NormalizeSplit(exts []string) ([]string, bool) {
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
