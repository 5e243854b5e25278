// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/php-worker/php_worker/go-module/internal/cluster"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "php-cli",
		Usage: cliUsage,
		Short: "Runs a PHP script on the server's PHP, as PHP's command line does",
		Long: `
Runs a PHP script (or -r code, -v, -m, -i) on the PHP built into this binary, with
its extensions, as PHP's own command line does: $argv, STDIN/STDOUT/STDERR, the
script's exit status, php_sapi_name() "cli". For artisan, migrations, cron jobs and
Composer scripts on the same PHP as the server:

	caddy php-cli --config /etc/caddy/Caddyfile artisan migrate

--config reads the php_ini settings of a config's php_worker app (the global option
block of a Caddyfile; --adapter as for caddy run), applied after php.ini as the server
applies them; -d settings come after those. -c and -n choose php.ini as PHP's -c and -n
do. php_worker's own PHP functions (the stores, frankenphp_handle_request) need a
server and are not loaded.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.DisableFlagParsing = true
			cmd.RunE = func(_ *cobra.Command, args []string) error {
				os.Exit(runCLI(args, os.Stdout, os.Stderr))
				return nil
			}
		},
	})
}

// The command a child process of `processes N` runs (internal/cluster): not for users.
func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  cluster.ChildCommand,
		Short: "Runs PHP for a php_worker server with processes above 1 (started by the server itself)",
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Hidden = true
			cmd.DisableFlagParsing = true
			cmd.RunE = func(*cobra.Command, []string) error {
				os.Exit(cluster.RunChild())
				return nil
			}
		},
	})
}

// cliUsage is php-cli's synopsis, for its help and its errors.
const cliUsage = "[--config <file> [--adapter <name>]] [-c <php.ini>] [-n] [-d key[=value]]... [<script> | -r <code> | -l <file> | -v | -m | -i | --ini] [args...]"

// The modes of php_worker_cli_run().
const (
	modeScript  = core.CLIScript
	modeCode    = core.CLICode
	modeVersion = core.CLIVersion
	modeModules = core.CLIModules
	modeInfo    = core.CLIInfo
	modeLint    = core.CLILint
	modeStdin   = core.CLIStdin
	modeIni     = core.CLIIni
)

// cliCommand is a parsed php-cli command line.
type cliCommand struct {
	mode    uint32
	argv    []string // the script's $argv
	code    string
	iniPath string
	noINI   bool
	config  string // --config: read its php_ini
	adapter string
	ini     [][2]string // -d key=value, in order
	help    bool
}

// parseCLI reads PHP's command-line options, up to the script (or --): what comes after
// belongs to the script.
func parseCLI(args []string) (cliCommand, error) {
	c := cliCommand{mode: modeScript}
	value := func(i *int, name string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("option %s needs a value", name)
		}
		*i++
		return args[*i], nil
	}
	modeSet := false
	setMode := func(m uint32) error {
		if modeSet {
			return fmt.Errorf("give one of a script, -r, -l, -v, -m, -i or --ini")
		}
		c.mode, modeSet = m, true
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		var err error
		switch {
		case a == "--":
			c.argv = append(c.argv, args[i+1:]...)
			i = len(args)
		case a == "-h" || a == "--help":
			c.help = true
		case a == "--config":
			c.config, err = value(&i, a)
		case a == "--adapter":
			c.adapter, err = value(&i, a)
		case a == "-c":
			c.iniPath, err = value(&i, a)
		case a == "-n":
			c.noINI = true
		case strings.HasPrefix(a, "-d"):
			setting := strings.TrimPrefix(a, "-d")
			if setting == "" {
				setting, err = value(&i, "-d")
			}
			key, v, found := strings.Cut(setting, "=")
			if !found {
				v = "1" // as PHP's -d: a bare name turns the setting on
			}
			c.ini = append(c.ini, [2]string{key, v})
		case a == "-r":
			if err = setMode(modeCode); err == nil {
				c.code, err = value(&i, a)
			}
		case a == "-v":
			err = setMode(modeVersion)
		case a == "-m":
			err = setMode(modeModules)
		case a == "-i":
			err = setMode(modeInfo)
		case a == "--ini":
			err = setMode(modeIni)
		case a == "-l":
			if err = setMode(modeLint); err == nil {
				var file string
				file, err = value(&i, a)
				c.argv = []string{file}
			}
		case a == "-a":
			err = fmt.Errorf("no interactive shell here (-a): PHP is built without readline; run a script, or -r <code>")
		case a == "-f":
			var file string
			if file, err = value(&i, a); err == nil {
				err = setMode(modeScript)
				c.argv = append([]string{file}, args[i+1:]...)
				i = len(args)
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			err = fmt.Errorf("unknown option %s", a)
		case modeSet && c.mode == modeCode:
			c.argv = append(c.argv, args[i:]...) // -r code's arguments
			i = len(args)
		default:
			if err = setMode(modeScript); err == nil {
				c.argv = append(c.argv, args[i:]...)
				i = len(args)
			}
		}
		if err != nil {
			return c, err
		}
	}
	switch c.mode {
	case modeCode:
		c.argv = append([]string{"Standard input code"}, c.argv...)
	case modeScript:
		if len(c.argv) == 0 && !c.help {
			// No script: PHP reads it from standard input, as `php < script.php`.
			c.mode, c.argv = modeStdin, []string{"Standard input code"}
		}
	}
	return c, nil
}

// settings is the engine settings JSON the command runs with: the config's php_ini, then
// the -d settings.
func (c *cliCommand) settings() ([]byte, error) {
	ini := PHPIni{}
	if c.config != "" {
		raw, _, _, err := caddycmd.LoadConfig(c.config, c.adapter)
		if err != nil {
			return nil, err
		}
		var cfg struct {
			Apps struct {
				PHPWorker  engineSettings `json:"php_worker"`
				FrankenPHP engineSettings `json:"frankenphp"` // the same app under FrankenPHP's name
			} `json:"apps"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("reading %s: %w", c.config, err)
		}
		for _, app := range []engineSettings{cfg.Apps.PHPWorker, cfg.Apps.FrankenPHP} {
			ini.Merge(app.PHPIni)
		}
	}
	for _, s := range c.ini {
		ini.Set(s[0], s[1])
	}
	return json.Marshal(withBundle(ini))
}

// runCLI runs a php-cli command line: the exit status.
func runCLI(args []string, stdout, stderr io.Writer) int {
	c, err := parseCLI(args)
	if err != nil {
		fmt.Fprintf(stderr, "php-cli: %v\nUsage: caddy php-cli %s\n", err, cliUsage)
		return 2
	}
	if c.help {
		fmt.Fprintf(stdout, "Usage: caddy php-cli %s\n(caddy help php-cli says more)\n", cliUsage)
		return 0
	}
	if c.mode == modeScript || c.mode == modeLint {
		if st, err := os.Stat(c.argv[0]); err != nil || st.IsDir() {
			fmt.Fprintf(stdout, "Could not open input file: %s\n", c.argv[0]) // PHP's words
			return 1
		}
	}
	settings, err := c.settings()
	if err != nil {
		fmt.Fprintf(stderr, "php-cli: %v\n", err)
		return 1
	}
	if c.mode == modeVersion {
		fmt.Fprintln(stdout, versionLine()) // os.File: unbuffered
	}

	return core.RunCLI(core.CLICommand{Mode: c.mode, Argv: c.argv, Code: c.code, Settings: settings, INIPath: c.iniPath,
		NoINI: c.noINI, Executable: phpBinary()})
}

// phpCommand is the name under which this binary is PHP's command line, as a link (the
// image, the package and the portable layout install one beside it).
const phpCommand = "php"

// Invoked as `php`, the binary is PHP's command line and nothing else: `php artisan`,
// Composer's `@php` scripts and PHP_BINARY's users run it so.
func init() {
	if filepath.Base(os.Args[0]) == phpCommand {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// phpBinary is what PHP_BINARY names: a command that runs this PHP. Invoked as `php`,
// the path it was invoked by; else a `php` link to this binary beside it; else "" (as
// PHP's own CLI says when it cannot tell).
func phpBinary() string {
	if filepath.Base(os.Args[0]) == phpCommand {
		path := os.Args[0]
		if !strings.Contains(path, "/") {
			found, err := exec.LookPath(path)
			if err != nil {
				return ""
			}
			path = found
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return ""
		}
		return abs
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	link := filepath.Join(filepath.Dir(exe), phpCommand)
	self, err1 := os.Stat(exe)
	other, err2 := os.Stat(link)
	if err1 != nil || err2 != nil || !os.SameFile(self, other) {
		return ""
	}
	return link
}
