// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

/*
#include <stdlib.h>
#include "php_worker.h"
*/
import "C"

import "unsafe"

// CLICommand is a php-cli command line for php_worker_cli_run.
type CLICommand struct {
	Mode     uint32   // a CLI* mode
	Argv     []string // the script's $argv; for CLIScript, Argv[0] is the script
	Code     string   // CLICode's code
	Settings []byte   // the engine settings JSON (its php_ini applies after php.ini)
	INIPath  string   // the php.ini file or folder to read instead (php -c), or ""
	NoINI    bool     // read no php.ini (php -n)
	// What PHP_BINARY names: a command that runs this PHP, or "".
	Executable string
}

// RunCLI runs a command line on PHP in this process, writing to the process's stdout
// and stderr: the exit status. No engine may run meanwhile.
func RunCLI(c CLICommand) int {
	var pin []unsafe.Pointer // C memory to free
	cstr := func(s string) *C.char {
		p := C.CString(s)
		pin = append(pin, unsafe.Pointer(p))
		return p
	}
	defer func() {
		for _, p := range pin {
			C.free(p)
		}
	}()
	argv := (*[1 << 20]*C.char)(C.malloc(C.size_t(len(c.Argv)+1) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	pin = append(pin, unsafe.Pointer(argv))
	for i, a := range c.Argv {
		argv[i] = cstr(a)
	}
	cmd := C.php_worker_cli_t{
		mode:         C.uint32_t(c.Mode),
		argv:         (**C.char)(unsafe.Pointer(argv)),
		argc:         C.size_t(len(c.Argv)),
		settings_len: C.size_t(len(c.Settings)),
		no_ini:       C.bool(c.NoINI),
	}
	cmd.settings_json = (*C.uint8_t)(unsafe.Pointer(cstr(string(c.Settings))))
	if c.Mode == CLICode {
		cmd.code = cstr(c.Code)
	}
	if c.INIPath != "" {
		cmd.ini_path = cstr(c.INIPath)
	}
	if c.Executable != "" {
		cmd.executable = cstr(c.Executable)
	}
	return int(C.php_worker_cli_run(&cmd))
}
