// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"os"
	"path/filepath"
	"strings"
)

// The binary carries PHP, linked in statically, but PHP builds some extensions only as
// shared objects: OPcache, and the developer extensions (Xdebug, pcov, excimer) that
// php_ini loads by name when it wants them. They are in the binary's bundle folder:
//   - portable, set at link time by scripts/build-portable.sh: <dir of the binary>/../lib/php_worker/;
//   - else phpExtensionDir, set at link time by xcaddy.sh: the extension_dir of the PHP
//     build it linked.
var (
	portable        = ""
	phpExtensionDir = ""
)

// bundleDir is the folder of the binary's shared PHP extensions (the one holding
// opcache.so), or "".
func bundleDir() string {
	if portable == "" {
		if _, err := os.Stat(filepath.Join(phpExtensionDir, "opcache.so")); phpExtensionDir == "" || err != nil {
			return ""
		}
		return phpExtensionDir
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	dir := filepath.Join(filepath.Dir(exe), "..", "lib", "php_worker")
	if _, err := os.Stat(filepath.Join(dir, "opcache.so")); err != nil {
		return ""
	}
	return filepath.Clean(dir)
}

// withBundle is the engine settings for php_ini: OPcache is loaded first (as a php.ini
// line would load it), unless php_ini loads it itself, and PHP's extension_dir defaults
// to the bundle folder, so `zend_extension xdebug` finds it there (php.ini or php_ini may
// still set another).
//
// OPcache's JIT defaults to tracing: on PHP 8.4, whose JIT buffer is 64 MB by default, a
// Laravel page ran 6 to 13% faster with it and every fault and survival test passes with
// it. PHP 8.2's buffer defaults to 0, which keeps its JIT off. `opcache.jit disable` in
// php.ini or php_ini turns it off.
func withBundle(ini PHPIni) engineSettings {
	dir := bundleDir()
	if dir == "" {
		return engineSettings{PHPIni: ini}
	}
	out := ini.Clone()
	if out == nil {
		out = PHPIni{}
	}
	loadsOpcache := false
	for _, z := range out["zend_extension"] {
		name := strings.TrimSuffix(filepath.Base(z), ".so")
		loadsOpcache = loadsOpcache || name == "opcache"
	}
	if !loadsOpcache {
		out["zend_extension"] = append([]string{filepath.Join(dir, "opcache.so")}, out["zend_extension"]...)
	}
	return engineSettings{PHPIni: out, INIDefaults: map[string]string{"extension_dir": dir, "opcache.jit": "tracing"}}
}
