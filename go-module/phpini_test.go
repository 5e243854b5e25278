// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestPHPIniKeepsEveryExtensionLineInOrder(t *testing.T) {
	p := PHPIni{}
	for _, kv := range [][2]string{{"memory_limit", "64M"}, {"extension", "b.so"}, {"Extension", "c.so"}, {"extension", "a.so"}, {"memory_limit", "1G"}, {"zend_extension", "x.so"}} {
		p.Set(kv[0], kv[1])
	}
	want := PHPIni{"memory_limit": {"1G"}, "extension": {"b.so", "a.so"}, "Extension": {"c.so"}, "zend_extension": {"x.so"}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %v, want %v", p, want)
	}
	if p.Get("memory_limit") != "1G" || p.Get("unset") != "" {
		t.Errorf("Get: %q %q", p.Get("memory_limit"), p.Get("unset"))
	}

	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"extension":["b.so","a.so"]`) || !strings.Contains(string(b), `"memory_limit":"1G"`) {
		t.Errorf("JSON %s", b)
	}
	var back PHPIni
	if err := json.Unmarshal(b, &back); err != nil || !back.Equal(p) {
		t.Errorf("round trip: %v %v", back, err)
	}

	merged := PHPIni{"extension": {"first.so"}, "memory_limit": {"64M"}}
	merged.Merge(p)
	if !reflect.DeepEqual(merged["extension"], []string{"first.so", "b.so", "a.so"}) || merged.Get("memory_limit") != "1G" {
		t.Errorf("Merge: %v", merged)
	}
	if keys := merged.ChangedKeys(p); !reflect.DeepEqual(keys, []string{"extension"}) {
		t.Errorf("ChangedKeys: %v", keys)
	}
	if (PHPIni{"extension": {"a.so", "b.so"}}).Equal(PHPIni{"extension": {"b.so", "a.so"}}) {
		t.Error("extension order must count")
	}
}

func TestPHPIniJSONRefusesListsForSingleSettings(t *testing.T) {
	for in, message := range map[string]string{
		`{"memory_limit":["1G","2G"]}`: "only extension and zend_extension",
		`{"memory_limit":1}`:           "a value is a string",
		`{"extension":[1]}`:            "a value is a string",
	} {
		var p PHPIni
		if err := json.Unmarshal([]byte(in), &p); err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%s: error %v, want %q", in, err, message)
		}
	}
	var p PHPIni
	if err := json.Unmarshal([]byte(`{"zend_extension":["opcache.so","xdebug.so"],"precision":["14"]}`), &p); err != nil || p.Get("precision") != "14" {
		t.Errorf("lists: %v %v", p, err)
	}
}

func TestWithBundleLoadsOpcacheFirstUnlessPHPIniDoes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "opcache.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(p, d string) { portable, phpExtensionDir = p, d }(portable, phpExtensionDir)
	portable, phpExtensionDir = "", dir

	ini := PHPIni{"zend_extension": {"xdebug"}}
	s := withBundle(ini)
	want := []string{filepath.Join(dir, "opcache.so"), "xdebug"}
	if !reflect.DeepEqual(s.PHPIni["zend_extension"], want) || s.INIDefaults["extension_dir"] != dir ||
		s.INIDefaults["opcache.jit"] != "tracing" {
		t.Errorf("got %+v", s)
	}
	if !reflect.DeepEqual(ini["zend_extension"], []string{"xdebug"}) {
		t.Errorf("withBundle changed its argument: %v", ini)
	}
	if s := withBundle(PHPIni{"zend_extension": {"/elsewhere/opcache.so"}}); !reflect.DeepEqual(s.PHPIni["zend_extension"], []string{"/elsewhere/opcache.so"}) {
		t.Errorf("php_ini's own OPcache: %v", s.PHPIni)
	}

	phpExtensionDir = filepath.Join(dir, "none")
	if s := withBundle(ini); !s.PHPIni.Equal(ini) || s.INIDefaults != nil {
		t.Errorf("without a bundle: %+v", s)
	}
}
