// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
)

func TestLogFieldsKeepOrderAndTypes(t *testing.T) {
	fields := logFields([]byte(`{"worker":"app","line":3,"boot_ms":1.5,"ok":true,"none":null,"list":[1]}`))
	enc := zapcore.NewMapObjectEncoder()
	var keys []string
	for _, f := range fields {
		f.AddTo(enc)
		keys = append(keys, f.Key)
	}
	if strings.Join(keys, ",") != "worker,line,boot_ms,ok,list" {
		t.Errorf("keys %v", keys)
	}
	if enc.Fields["worker"] != "app" || enc.Fields["line"] != int64(3) || enc.Fields["boot_ms"] != 1.5 || enc.Fields["ok"] != true {
		t.Errorf("fields %v", enc.Fields)
	}
	if bad := logFields([]byte(`not json`)); len(bad) != 1 || bad[0].Key != "fields" {
		t.Errorf("unreadable fields are kept raw: %v", bad)
	}
}

func TestCanonicalHeaderNames(t *testing.T) {
	headerNames.m.Store(nil) // "first" is per process: start from an empty cache
	for _, tc := range []struct{ in, want string }{
		{"content-type", "Content-Type"},
		{"X-Custom-Thing", "X-Custom-Thing"},
		{"x_underscore", "X_underscore"},
		{"Bad Name", ""},
		{"", ""},
		{"X-Ctl\x01", ""},
		{"Caf\xc3\xa9", ""},
	} {
		got, first := canonicalName([]byte(tc.in))
		if got != tc.want || !first {
			t.Errorf("canonicalName(%q) = %q, %v; want %q, true", tc.in, got, first, tc.want)
		}
		if again, first := canonicalName([]byte(tc.in)); again != tc.want || first {
			t.Errorf("canonicalName(%q) again = %q, %v; want %q from the cache", tc.in, again, first, tc.want)
		}
	}
}
