// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseCLIReadsPHPsOptionsUpToTheScript(t *testing.T) {
	c, err := parseCLI([]string{"-d", "memory_limit=1G", "-dprecision=5", "-d", "display_errors", "-n", "artisan", "migrate", "-v", "--force"})
	if err != nil {
		t.Fatal(err)
	}
	if c.mode != modeScript || !reflect.DeepEqual(c.argv, []string{"artisan", "migrate", "-v", "--force"}) || !c.noINI {
		t.Errorf("got %+v", c)
	}
	if !reflect.DeepEqual(c.ini, [][2]string{{"memory_limit", "1G"}, {"precision", "5"}, {"display_errors", "1"}}) {
		t.Errorf("ini %v", c.ini)
	}
	c, err = parseCLI([]string{"-r", "echo 1;", "a", "b"})
	if err != nil || c.mode != modeCode || c.code != "echo 1;" || !reflect.DeepEqual(c.argv, []string{"Standard input code", "a", "b"}) {
		t.Errorf("-r: %+v %v", c, err)
	}
	c, err = parseCLI([]string{"-c", "/etc/php.ini", "-f", "x.php", "-m"})
	if err != nil || c.iniPath != "/etc/php.ini" || !reflect.DeepEqual(c.argv, []string{"x.php", "-m"}) {
		t.Errorf("-f: %+v %v", c, err)
	}
	// No script: PHP reads it from standard input.
	c, err = parseCLI([]string{"-d", "a=1"})
	if err != nil || c.mode != modeStdin || !reflect.DeepEqual(c.argv, []string{"Standard input code"}) {
		t.Errorf("stdin: %+v %v", c, err)
	}
	c, err = parseCLI([]string{"-l", "x.php"})
	if err != nil || c.mode != modeLint || !reflect.DeepEqual(c.argv, []string{"x.php"}) {
		t.Errorf("-l: %+v %v", c, err)
	}
	if c, err = parseCLI([]string{"--ini"}); err != nil || c.mode != modeIni {
		t.Errorf("--ini: %+v %v", c, err)
	}
	for in, want := range map[string]string{"-v -m": "give one of", "-x": "unknown option -x", "-r": "needs a value",
		"-a": "no interactive shell", "-l": "needs a value", "-l a.php -v": "give one of"} {
		if _, err := parseCLI(strings.Fields(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
	c, _ = parseCLI([]string{"-d", "a=1", "-d", "a=2", "-d", "extension=b.so", "-d", "zend_extension=z.so", "-d", "extension=a.so"})
	settings, err := (&cliCommand{ini: c.ini}).settings()
	var got engineSettings
	if err != nil || json.Unmarshal(settings, &got) != nil || got.PHPIni.Get("a") != "2" {
		t.Errorf("settings %s %v", settings, err)
	}
	// As PHP's CLI: every -d extension loads, in order; any other setting keeps its last value.
	if !reflect.DeepEqual(got.PHPIni["extension"], []string{"b.so", "a.so"}) || !reflect.DeepEqual(got.PHPIni["a"], []string{"2"}) {
		t.Errorf("repeated settings: %v", got.PHPIni)
	}
}
