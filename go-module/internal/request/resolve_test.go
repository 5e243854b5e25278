// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeFS answers stat for a fixed tree; directories end with "/".
func fakeFS(paths ...string) func(string) FileKind {
	files, dirs := map[string]bool{}, map[string]bool{}
	for _, p := range paths {
		if strings.HasSuffix(p, "/") {
			dirs[strings.TrimSuffix(p, "/")] = true
		} else {
			files[p] = true
		}
	}
	return func(name string) FileKind {
		name = strings.TrimSuffix(name, "/")
		switch {
		case files[name]:
			return regularFile
		case dirs[name]:
			return directory
		}
		return missing
	}
}

func TestStatKind(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.php")
	if err := os.WriteFile(file, []byte("<?php"), 0o644); err != nil {
		t.Fatal(err)
	}
	if StatKind(file) != regularFile || StatKind(dir) != directory || StatKind(file+"x") != missing {
		t.Error("statKind does not tell files, directories and missing paths apart")
	}
}

func TestSplitPos(t *testing.T) {
	exts := []string{".php"}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/index.php", 10},
		{"/index.php/a/b", 10},
		{"/INDEX.PHP/x", 10},
		{"/a.phpx", -1},
		{"/a.phpx/b.php", 13},
		{"/a.php.txt", -1},
		{"/noext", -1},
		{"/\u023a.php", 7},            // 'Ⱥ' is two bytes; the split is on the original bytes
		{"/a\uff0ephp", -1},           // fullwidth dot is not '.'
		{"/a.\u24df\u24d7\u24df", -1}, // circled letters are not "php"
	} {
		if got := SplitPos(tc.path, exts); got != tc.want {
			t.Errorf("splitPos(%q) = %d, want %d", tc.path, got, tc.want)
		}
	}
	if got := SplitPos("/a.phtml/x", []string{".php", ".phtml"}); got != 8 {
		t.Errorf("second extension: got %d", got)
	}
	if got := SplitPos("/a.php/b.phtml", []string{".phtml", ".php"}); got != 6 {
		t.Errorf("the earliest split wins whatever the order of extensions: got %d", got)
	}
}

func TestNormalizeSplitRefusesNonASCII(t *testing.T) {
	if _, ok := NormalizeSplit([]string{".PHP", ".phtml"}); !ok {
		t.Fatal("ASCII extensions refused")
	}
	if got, _ := NormalizeSplit([]string{".PHP"}); got[0] != ".php" {
		t.Fatalf("not lower-cased: %q", got)
	}
	if _, ok := NormalizeSplit([]string{".ph\u0440"}); ok {
		t.Fatal("a Cyrillic extension was accepted")
	}
}

func TestResolve(t *testing.T) {
	rs := Resolver{
		index:      "index.php",
		split:      []string{".php"},
		fileServer: true,
		stat: fakeFS("/srv/index.php", "/srv/app.php", "/srv/style.css", "/srv/dir/", "/srv/dir/index.php",
			"/srv/assets/", "/srv/assets/app.js"),
	}
	for _, tc := range []struct {
		path     string
		kind     Target
		name     string
		pathInfo string
		filename string
	}{
		{"/", TargetPHP, "/index.php", "", "/srv/index.php"},
		{"/app.php", TargetPHP, "/app.php", "", "/srv/app.php"},
		{"/app.php/x/y", TargetPHP, "/app.php", "/x/y", "/srv/app.php"},
		{"/style.css", TargetStatic, "", "", ""},
		{"/dir", TargetRedirect, "", "", ""},
		{"/dir/", TargetPHP, "/dir/index.php", "", "/srv/dir/index.php"},
		{"/assets/", TargetStatic, "", "", ""},
		{"/assets", TargetPHP, "/index.php", "", "/srv/index.php"},
		{"/users/42", TargetPHP, "/index.php", "", "/srv/index.php"},
		{"/missing.php/x", TargetPHP, "/index.php", "", "/srv/index.php"},
		{"/../../etc/passwd", TargetPHP, "/index.php", "", "/srv/index.php"},
		{"/dir/../app.php", TargetPHP, "/app.php", "", "/srv/app.php"},
		{"//app.php", TargetPHP, "/app.php", "", "/srv/app.php"},
	} {
		kind, s := rs.Resolve("/srv", tc.path)
		if kind != tc.kind || s.Name != tc.name || s.PathInfo != tc.pathInfo || s.Filename != tc.filename {
			t.Errorf("resolve(%q) = %v %+v, want %v name=%q pathInfo=%q filename=%q",
				tc.path, kind, s, tc.kind, tc.name, tc.pathInfo, tc.filename)
		}
		if kind == TargetPHP && s.Root != "/srv" {
			t.Errorf("resolve(%q): root %q", tc.path, s.Root)
		}
	}
}

func TestResolveTrustsRunningWorkerFiles(t *testing.T) {
	rs := Resolver{index: "index.php", split: []string{".php"}, stat: fakeFS(),
		known: map[string]bool{"/srv/index.php": true}}
	if kind, s := rs.Resolve("/srv", "/users/1"); kind != TargetPHP || s.Filename != "/srv/index.php" {
		t.Errorf("a worker's file needs no stat: got %v %+v", kind, s)
	}
}

func TestJoinRoot(t *testing.T) {
	for _, tc := range [][3]string{
		{"/srv", "/", "/srv"}, {"/srv", "", "/srv"}, {"/srv", "/a/b.php", "/srv/a/b.php"}, {"/", "/x", "/x"},
	} {
		if got := joinRoot(tc[0], tc[1]); got != tc[2] {
			t.Errorf("joinRoot(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

func TestResolveWithoutFileServerOrIndex(t *testing.T) {
	stat := fakeFS("/srv/index.php", "/srv/style.css", "/srv/dir/", "/srv/dir/index.php")
	noFiles := Resolver{index: "index.php", split: []string{".php"}, stat: stat}
	if kind, s := noFiles.Resolve("/srv", "/style.css"); kind != TargetPHP || s.Name != "/index.php" {
		t.Errorf("file_server off: a static file must go to the index, got %v %+v", kind, s)
	}
	noIndex := Resolver{split: []string{".php"}, fileServer: true, stat: stat}
	if kind, _ := noIndex.Resolve("/srv", "/dir"); kind != TargetNotFound {
		t.Errorf("index off: no redirect and no front controller, got %v", kind)
	}
	if kind, _ := noIndex.Resolve("/srv", "/route"); kind != TargetNotFound {
		t.Errorf("index off: got %v", kind)
	}
}

// A root of "/" (or one ending in "/") must not double the slash before the index.
func TestResolveIndexUnderASlashRoot(t *testing.T) {
	rs := Resolver{index: "index.php", split: []string{".php"}, fileServer: true}
	for _, root := range []string{"/", "/srv/"} {
		prefix := strings.TrimSuffix(root, "/")
		rs.stat = fakeFS(root, prefix+"/index.php", prefix+"/sub/", prefix+"/sub/index.php")
		for path, want := range map[string]string{"/": prefix + "/index.php", "/sub/": prefix + "/sub/index.php"} {
			kind, s := rs.Resolve(root, path)
			if kind != TargetPHP || s.Filename != want {
				t.Errorf("root %q, resolve(%q) = %v %q, want %q", root, path, kind, s.Filename, want)
			}
		}
	}
}

// A directory's redirect names the path as resolved, never as the client wrote it: a
// Location starting with two slashes (or a slash and a backslash) is a network-path
// reference a browser follows to another host.
func TestRedirectLocationStaysOnTheSite(t *testing.T) {
	cases := []struct{ path, query, want string }{
		{"/blog", "", "/blog/"},
		{"/blog", "a=1&b=2", "/blog/?a=1&b=2"},
		{"//evil.example/../blog", "", "/blog/"}, // GET //evil.example/%2e%2e/blog, or ..%2fblog
		{"//evil.example/../blog", "x=1", "/blog/?x=1"},
		{"///evil.example/../blog", "", "/blog/"},
		{"//evil.example/..%2fblog", "", "/evil.example/..%252fblog/"}, // from ..%252fblog: a literal "%2f" in a name
		{`/\evil.example/../blog`, "", "/blog/"},
		{`/\evil.example`, "", "/%5Cevil.example/"},
		{"/a b/ü", "", "/a%20b/%C3%BC/"},
		{"blog", "", "/blog/"},
	}
	for _, c := range cases {
		got := RedirectLocation(c.path, c.query)
		if got != c.want {
			t.Errorf("RedirectLocation(%q, %q) = %q, want %q", c.path, c.query, got, c.want)
		}
		if strings.HasPrefix(got, "//") || strings.HasPrefix(got, `/\`) || !strings.HasPrefix(got, "/") {
			t.Errorf("RedirectLocation(%q) = %q leaves the site", c.path, got)
		}
	}
}
