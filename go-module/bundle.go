// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"os"
	"path/filepath"
)

// portable is set at link time by scripts/build-portable.sh: the binary carries PHP,
// linked in statically, and finds beside itself what PHP 8.2 builds only as a shared
// object: OPcache, a Zend extension.
var portable = ""

// bundledOpcache is OPcache's shared object beside a portable binary,
// <dir of the binary>/../lib/php_worker/opcache.so, or "".
func bundledOpcache() string {
	if portable == "" {
		return ""
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	p := filepath.Join(filepath.Dir(exe), "..", "lib", "php_worker", "opcache.so")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// withBundledExtensions is php_ini with a portable binary's OPcache loaded after php.ini
// (as a php.ini line would load it), unless php_ini loads a Zend extension itself.
func withBundledExtensions(ini map[string]string) map[string]string {
	p := bundledOpcache()
	if _, set := ini["zend_extension"]; p == "" || set {
		return ini
	}
	out := make(map[string]string, len(ini)+1)
	for k, v := range ini {
		out[k] = v
	}
	out["zend_extension"] = p
	return out
}
