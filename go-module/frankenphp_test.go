// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestPHPServerTakesFrankenPHPNames(t *testing.T) {
	var h Handler
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "app.php"), []byte("<?php"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := caddyfile.NewTestDispenser(`php_server {
		root ` + root + `
		split_path .php .phar
		index app.php
		try_files {http.request.uri.path} {http.request.uri.path}/app.php app.php
		resolve_root_symlink false
		env APP_ENV prod
		worker app.php 2
	}`)
	if err := h.unmarshal(d, dialectPHPServer); err != nil {
		t.Fatal(err)
	}
	if h.Root != root || h.Index != "app.php" || strings.Join(h.SplitPath, " ") != ".php .phar" ||
		h.ResolveRootSymlink == nil || *h.ResolveRootSymlink || h.Env["APP_ENV"] != "prod" || h.Workers[0].Num != 2 {
		t.Fatalf("php_server options: %+v", h)
	}
}

func TestTryFilesInTheFormTheResolverHas(t *testing.T) {
	for _, c := range []struct {
		index    string
		noFiles  bool
		list     string
		accepted bool
	}{
		{"", false, "{path} index.php", true},
		{"", false, "{path} {path}/index.php index.php", true},
		{"", false, "{path} /index.php", true},
		{"frankenphp-worker.php", false, "{path} frankenphp-worker.php", true},
		{"", true, "{path}/index.php index.php", true}, // FrankenPHP's default with file_server off
		{"", false, "{path}/index.php index.php", false},
		{"", false, "{path} other.php", false},
		{"", false, "{path} {path}.html index.php", false},
		{"off", false, "{path} index.php", false},
	} {
		h := Handler{Index: c.index, DisableFileServer: c.noFiles}
		err := h.checkTryFiles(strings.Fields(c.list))
		if (err == nil) != c.accepted {
			t.Errorf("index %q, file_server off %v, try_files %s: error %v", c.index, c.noFiles, c.list, err)
		}
	}
}

func TestFrankenPHPOptionsWithoutACounterpartAreRefused(t *testing.T) {
	for _, c := range []struct {
		dl     dialect
		block  string
		expect string
	}{
		{dialectFrankenPHP, "frankenphp {\n max_requests -1\n}", "must be a non-negative integer"},
		{dialectPHPWorker, "php_worker {\n max_request 10\n}", "unknown php_worker option"},
		{dialectPHPServer, "php_server {\n hot_reload\n}", "has no php_worker counterpart"},
		{dialectPHP, "php {\n file_server off\n}", "php has no file_server"},
		{dialectPHPWorker, "php_worker {\n try_files {path} index.php\n}", "try_files is php_server's"},
		{dialectPHPServer, "php_server {\n worker {\n file w.php\n max_consecutive_failures 3\n }\n}", "only -1"},
	} {
		d := caddyfile.NewTestDispenser(c.block)
		var err error
		if c.dl == dialectFrankenPHP || strings.HasPrefix(c.block, "php_worker {\n max_request") {
			err = new(App).unmarshal(d, c.dl)
		} else {
			err = new(Handler).unmarshal(d, c.dl)
		}
		if err == nil || !strings.Contains(err.Error(), c.expect) {
			t.Errorf("%s: got %v, want an error with %q", c.block, err, c.expect)
		}
	}
}

func TestWatchLinesAddUpAndAFolderMeansItsFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "app", "Http"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "w.php"), []byte("<?php"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Octane's CADDY_SERVER_WATCH_DIRECTIVES: one line per path.
	d := caddyfile.NewTestDispenser("worker {\n file w.php\n watch " + root + "/app\n watch " + root + "/.env\n}")
	d.Next()
	w, err := parseWorker(d, false, dialectFrankenPHP)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Watch) != 2 {
		t.Fatalf("watch lines: %q", w.Watch)
	}
	// What a folder and a file mean to the watcher: TestAFolderMeansItsFiles.
	if w.Watch[0] != root+"/app" || w.Watch[1] != root+"/.env" {
		t.Errorf("watch lines: %q", w.Watch)
	}
}
